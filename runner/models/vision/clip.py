"""LLaVA's vision: a CLIP tower (class token, learned positions, a LayerNorm before the
blocks, quick-GELU MLPs) read at its second-to-last layer, the class token dropped, then a
two-layer MLP projector (llama.cpp's "mlp": mm.0, GELU, mm.2). The image is resized so its
short side is image_size (bicubic) and cropped to a centred square, as LLaVA's processor
does.
"""

from __future__ import annotations

from ..contract import register_projector
from .pixels import FEATURE_LAYER, Layout, Pixels
from . import images
from ..base import Metadata, ModelError, Weights
from .vit import (ViTConfig, as_f32, bind_blocks, embed_patches, encoder_block, layer_norm,
                  square_pixels)

@register_projector("mlp")
class LlavaVision:
    layout = Layout()                    # the rows stand alone, where the image token was

    def __init__(self, config: ViTConfig, feature_layer: int, weights: Weights):
        c = self.config = config
        if not 0 < feature_layer <= c.layers:
            raise ModelError(f"The feature layer {feature_layer} is not one of the "
                             f"{c.layers} layers.")
        self.feature_layer = feature_layer
        side = c.image_size // c.patch
        self.patch_embd = weights.take("v.patch_embd.weight", (c.embd, 3, c.patch, c.patch))
        self.class_embd = weights.take("v.class_embd", (c.embd,))
        self.position_embd = weights.take("v.position_embd.weight", (side * side + 1, c.embd))
        self.pre_ln = weights.take("v.pre_ln.weight", (c.embd,))
        self.pre_ln_b = weights.take("v.pre_ln.bias", (c.embd,))
        self.blocks = bind_blocks(weights, c, feature_layer)
        hidden = weights.take("mm.0.weight").shape[0]
        self.mm_0 = weights.take("mm.0.weight", (hidden, c.embd))
        self.mm_0_b = weights.take("mm.0.bias", (hidden,))
        self.mm_2 = weights.take("mm.2.weight", (c.projection, hidden))
        self.mm_2_b = weights.take("mm.2.bias", (c.projection,))

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "LlavaVision":
        config = ViTConfig.from_metadata(meta)
        # llama.cpp's default: the output of the second-to-last layer (hidden state -2)
        layers = Metadata(meta, "clip").get(FEATURE_LAYER) or [config.layers - 1]
        if len(layers) != 1:
            raise ModelError(f"Features stacked from several layers ({layers}) are not "
                             "supported.")
        return cls(config, int(layers[0]), weights)

    @property
    def max_rows(self) -> int:
        return (self.config.image_size // self.config.patch) ** 2

    def preprocess(self, image) -> Pixels:
        c = self.config
        width, height = (c.image_size, int(c.image_size * image.height / image.width)) \
            if image.width <= image.height else \
            (int(c.image_size * image.width / image.height), c.image_size)
        resized = images.resize(image, height, width, "bicubic")
        top, left = (height - c.image_size) // 2, (width - c.image_size) // 2
        cropped = resized.crop((left, top, left + c.image_size, top + c.image_size))
        return square_pixels(images.pixels(cropped, c.mean, c.std), c, self.max_rows)

    def largest(self) -> Pixels:
        return self.preprocess(images.blank(self.config.image_size, self.config.image_size))

    def forward(self, patches, grid: tuple[int, int], flash: bool = False):
        """patches (P, 3*p*p) -> (P, text embd)."""
        c = self.config
        n = patches.shape[0]
        x = embed_patches(patches, self.patch_embd, c)                         # (P, D)
        ctx = patches.context
        x = as_f32(self.class_embd, ctx).reshape(1, c.embd).concat(x, 0)      # (P+1, D)
        x = x.add(as_f32(self.position_embd, ctx))
        x = layer_norm(x, self.pre_ln, self.pre_ln_b, c.eps)
        for block in self.blocks:
            x = encoder_block(x, block, c, flash)
        x = x.view((n, c.embd), offset=x.strides[0])                          # no class token
        h = self.mm_0.mul_mat(x).add(self.mm_0_b).gelu_erf()
        return self.mm_2.mul_mat(h).add(self.mm_2_b)                          # (P, E)
