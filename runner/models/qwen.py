"""Qwen2 (Q/K/V biases), Qwen3 (per-head Q/K RMSNorm) and Qwen3 MoE: llama-shaped, NEOX rope
(their converter does not permute Q and K). The optional weights live in llama.Llama.

Qwen3 MoE replaces every FFN with experts: a softmax over the router's logits, the top k
experts' probabilities renormalised to sum to one (as llama.cpp always does for qwen3moe),
each expert a SwiGLU through mul_mat_id, their outputs summed by those weights.

The text models of Qwen2-VL and Qwen2.5-VL (qwen2vl; Ollama's qwen25vl), Qwen3-VL
(qwen3vl) and its MoE (qwen3vlmoe) are these with M-RoPE (rope.py): each section of a head's
pairs rotates by one axis of a position (time, row, column), laid out in blocks (Qwen2-VL)
or interleaved (Qwen3-VL, llama.cpp's IMROPE). An image's rows take their row and column
on those axes (the engine computes them, multimodal/axes.py). Qwen3-VL's image rows also
bring deepstack embeddings for its first layers (Qwen3VLText)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .contract import register
from .base import LLM, Metadata, Weights, weight
from .experts import Routing, route, swiglu_experts
from .llama import Llama, LlamaBlock, LlamaConfig

if TYPE_CHECKING:
    from pyggml import Tensor


@register("qwen25vl")                     # Ollama's name for Qwen2.5-VL
@register("qwen2vl")
@register("qwen2")
class Qwen2(Llama):
    rope_mode = "neox"


@register("qwen3")
class Qwen3(Llama):
    rope_mode = "neox"


class Qwen3VLText(Llama):
    """Qwen3-VL's text models (a base before Qwen3 or Qwen3Moe): M-RoPE's axes interleaved
    over a head's pairs (llama.cpp's IMROPE), and deepstack: an image row brings, after its
    embedding, one more for each of the first n_deepstack_layers layers, added to that
    layer's output at the row."""

    deepstack_layers = 0

    @classmethod
    def config_of(cls, meta: dict):
        config = super().config_of(meta)
        config.rope.interleaved = True
        return config

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights):
        model = super().from_metadata(meta, weights)
        m = Metadata(meta, meta["general.architecture"])
        model.deepstack_layers = int(m.get(LLM.NUM_DEEPSTACK_LAYERS, 0))
        return model

    @property
    def _cut_layer(self) -> int | None:
        """None where deepstack adds to the last layer's every row (a tiny model's)."""
        return None if self.deepstack_layers >= len(self.blocks) else super()._cut_layer

    def media_width(self) -> int:
        return self.config.embd * (1 + self.deepstack_layers)

    def _layer_output(self, i: int, x, inputs):
        """x (T, E), with the i-th deepstack embedding added at the image rows."""
        if inputs.media is None or i >= self.deepstack_layers:
            return x
        rows = inputs.media_rows
        added = x.get_rows(rows).add(inputs.media_part(i + 1, x.shape[1]))    # (M, E)
        return x.set_rows(added, rows)


@register("qwen3vl")
class Qwen3VL(Qwen3VLText, Qwen3):
    pass


@dataclass
class Qwen3MoeConfig(LlamaConfig):
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "qwen3moe") -> Qwen3MoeConfig:
        base, m = LlamaConfig.from_metadata(meta, arch), Metadata(meta, arch)
        experts, experts_used = m.experts(required=True)
        return cls(**vars(base), experts=experts, experts_used=experts_used,
                   expert_ffn=int(m.require(LLM.EXPERT_FEED_FORWARD_LENGTH)))


@dataclass
class Qwen3MoeBlock(LlamaBlock):
    ffn_gate_inp: Tensor = weight()         # the router (experts, E)
    ffn_gate_exps: Tensor = weight()        # (experts, F, E) in numpy order
    ffn_up_exps: Tensor = weight()
    ffn_down_exps: Tensor = weight()


@register("qwen3moe")
class Qwen3Moe(Qwen3):
    config_class = Qwen3MoeConfig
    config: Qwen3MoeConfig
    block_class = Qwen3MoeBlock

    def _bind_block(self, weights: Weights, i: int) -> LlamaBlock:
        c = self.config
        block = self._bind_attention(weights, i)
        weights.bind(block, f"blk.{i}.", {
            "ffn_gate_inp": (c.experts, c.embd),
            "ffn_gate_exps": (c.experts, c.expert_ffn, c.embd),
            "ffn_up_exps": (c.experts, c.expert_ffn, c.embd),
            "ffn_down_exps": (c.experts, c.embd, c.expert_ffn)})
        return block

    def _ffn(self, block: LlamaBlock, h):
        """h (T, E) -> (T, E): the chosen experts' outputs, weighted."""
        assert isinstance(block, Qwen3MoeBlock)                              # block_class's
        c = self.config
        chosen, weights = route(Routing(c.experts, c.experts_used),
                                block.ffn_gate_inp.mul_mat(h))               # (T, K), (T, K, 1)
        return swiglu_experts(block.ffn_gate_exps, block.ffn_up_exps, block.ffn_down_exps, h,
                              chosen, weights)


@register("qwen3vlmoe")
class Qwen3VLMoe(Qwen3VLText, Qwen3Moe):
    pass
