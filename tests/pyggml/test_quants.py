"""Quantization through ggml, checked against the gguf package's numpy codecs."""

import gguf.quants
import numpy as np
import pytest

import pyggml

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
# typical worst-case error per element relative to the row's max magnitude
BOUND = {"Q8_0": 0.01, "Q6_K": 0.03, "Q5_0": 0.05, "Q5_1": 0.05, "Q5_K": 0.05, "Q4_0": 0.1,
         "Q4_1": 0.1, "Q4_K": 0.1, "Q3_K": 0.25, "Q2_K": 0.5}


@pytest.mark.parametrize("name", TYPES)
def test_ggml_and_gguf_dequantize_agree(rng, name):
    values = rng.standard_normal((8, 512)).astype(np.float32)
    raw = pyggml.quantize(values, name)
    ggml_type = pyggml.GGMLType[name]
    assert raw.shape == (8, ggml_type.row_size(512))
    assert raw.shape[1] == 512 // ggml_type.block_size * ggml_type.type_size
    ours = pyggml.dequantize(raw, ggml_type, (8, 512))
    theirs = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name])
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    error = np.abs(ours - values).max(axis=1) / np.abs(values).max(axis=1)
    assert error.max() < BOUND[name], error.max()


def test_q8_0_bytes_match_the_gguf_reference_quantizer(rng):
    values = rng.standard_normal((4, 256)).astype(np.float32)
    ours = pyggml.quantize(values, "Q8_0")
    theirs = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0)
    assert np.array_equal(ours, theirs)


def test_block_sizes():
    assert pyggml.GGMLType.Q4_K.block_size == 256 and pyggml.GGMLType.Q4_K.type_size == 144
    assert pyggml.GGMLType.Q8_0.block_size == 32 and pyggml.GGMLType.Q8_0.type_size == 34
    assert pyggml.GGMLType.F16.row_size(10) == 20


def test_bad_quantize_input(rng):
    with pytest.raises(ValueError, match="multiple of 256"):
        pyggml.quantize(rng.standard_normal((2, 100)).astype(np.float32), "Q4_K")
    with pytest.raises(ValueError, match="non-empty"):
        pyggml.quantize(np.zeros((0,), np.float32), "Q8_0")
    with pytest.raises(ValueError, match=r"shape \(32,\)"):
        pyggml.quantize(np.zeros((1, 32), np.float32), "Q8_0", imatrix=np.ones(3))
    with pytest.raises(ValueError, match="Unknown ggml type"):
        pyggml.quantize(np.zeros((1, 32), np.float32), "Q9_9")
