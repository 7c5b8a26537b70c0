"""Convolution, im2col, pooling and resampling (pyggml/spatial_ops.py) against numpy references."""

import numpy as np
import pytest

from .conftest import f32


def conv2d_reference(x, w, stride, padding, dilation):
    """x (N, C, H, W), w (OC, C, KH, KW) -> (N, OC, OH, OW), cross-correlation like torch."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, oc, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                       j * dw: j * dw + sw * (ow - 1) + 1: sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


@pytest.mark.parametrize("stride,padding,dilation", [((1, 1), (0, 0), (1, 1)),
                                                     ((2, 1), (1, 2), (1, 1)),
                                                     ((1, 2), (1, 1), (2, 1))])
def test_conv_2d(compute, rng, stride, padding, dilation):
    x, w = f32(rng, 2, 3, 9, 11), f32(rng, 4, 3, 3, 2)
    out = compute(lambda k, d: k.conv_2d(d, stride, padding, dilation), w.astype(np.float16), x)
    expected = conv2d_reference(x, w.astype(np.float16).astype(np.float32), stride, padding,
                                dilation)
    assert out.shape == expected.shape
    # ggml's conv_2d unfolds the data through F16 columns
    np.testing.assert_allclose(out, expected, rtol=0, atol=2e-2)


def test_im2col_2d(compute, rng):
    x, w = f32(rng, 1, 2, 4, 5), np.zeros((3, 2, 2, 2), np.float16)
    out = compute(lambda k, d: k.im2col(d, dtype="F32"), w, x)
    assert out.shape == (1, 3, 4, 2 * 2 * 2)          # (N, OH, OW, C*KH*KW)
    for oh in range(3):
        for ow in range(4):
            np.testing.assert_array_equal(out[0, oh, ow], x[0, :, oh:oh + 2, ow:ow + 2].ravel())


def test_im2col_strided_and_padded_in_f32(compute, rng):
    """As Gemma 4's audio subsampling unfolds (time, mel) planes: 3x3, stride 2, padding 1."""
    x, w = f32(rng, 1, 2, 7, 6), np.zeros((4, 2, 3, 3), np.float32)
    out = compute(lambda k, d: k.im2col(d, (2, 2), (1, 1), dtype="F32"), w, x)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    assert out.shape == (1, 4, 3, 2 * 3 * 3)
    for oh in range(4):
        for ow in range(3):
            window = padded[0, :, 2 * oh:2 * oh + 3, 2 * ow:2 * ow + 3]
            np.testing.assert_array_equal(out[0, oh, ow], window.ravel())


@pytest.mark.parametrize("kernel,padding,stride", [(3, 1, 1), (5, 2, 1), (4, 0, 2)])
def test_conv_1d_dw(compute, rng, kernel, padding, stride):
    channels, length = 6, 40
    x, w = f32(rng, channels, length), f32(rng, channels, 1, kernel)
    out = compute(lambda k, d: k.conv_1d_dw(d, stride, padding), w, x)
    xp = np.pad(x, ((0, 0), (padding, padding)))
    out_len = (length + 2 * padding - kernel) // stride + 1
    expected = np.stack([[np.dot(xp[c, t * stride: t * stride + kernel], w[c, 0])
                          for t in range(out_len)] for c in range(channels)])
    assert out.shape == expected.shape
    # F32 all the way (patches/0001): without the patch the data went through F16 (~1e-3)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["max", "avg"])
def test_pool_2d(compute, rng, op):
    x = f32(rng, 1, 3, 6, 8)
    out = compute(lambda t: t.pool_2d(op, (2, 2)), x)
    blocks = x.reshape(1, 3, 3, 2, 4, 2)
    expected = blocks.max(axis=(3, 5)) if op == "max" else blocks.mean(axis=(3, 5))
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_upscale_nearest(compute, rng):
    x = f32(rng, 1, 2, 3, 4)
    out = compute(lambda t: t.upscale(2), x)
    np.testing.assert_array_equal(out, x.repeat(2, axis=2).repeat(2, axis=3))


def bilinear_reference(x, out_h, out_w, align_corners):
    h, w = x.shape[-2:]

    def source(n_out, n_in):
        i = np.arange(n_out, dtype=np.float64)
        if align_corners:
            return i * (n_in - 1) / max(n_out - 1, 1)
        return np.clip((i + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)

    ys, xs = source(out_h, h), source(out_w, w)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    wy, wx = (ys - y0)[:, None], (xs - x0)[None, :]
    top = x[..., y0, :][..., x0] * (1 - wx) + x[..., y0, :][..., x1] * wx
    bottom = x[..., y1, :][..., x0] * (1 - wx) + x[..., y1, :][..., x1] * wx
    return top * (1 - wy) + bottom * wy


@pytest.mark.parametrize("align_corners", [True, False])
def test_interpolate_bilinear(compute, rng, align_corners):
    x = f32(rng, 1, 2, 4, 5)
    out = compute(lambda t: t.interpolate((1, 2, 7, 9), "bilinear", align_corners), x)
    np.testing.assert_allclose(out, bilinear_reference(x, 7, 9, align_corners), rtol=1e-5,
                               atol=1e-5)
