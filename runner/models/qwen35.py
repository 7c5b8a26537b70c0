"""Qwen 3.5 and its successors (qwen35 dense, qwen35moe) and Qwen3-Next (qwen3next): hybrids
of gated DeltaNet layers, a linear-attention recurrence whose state the cache keeps
(kvcache/hybrid.py), and gated attention layers (every full_attention_interval-th).

A DeltaNet layer: one product gives the queries, keys and values (attn_qkv), which pass a
short causal convolution (ssm_conv1d, carrying the last kernel - 1 inputs from the batch
before) and SiLU; queries and keys are L2-normed; per value head a decay
g = softplus(alpha + dt) * a (ssm_a holds -exp(A_log), as llama.cpp's converter writes
it) and a write strength beta = sigmoid(...); the gated delta rule (ggml_gated_delta_net)
gives each token's output, normed per head (ssm_norm), times silu of the gate z, projected
out (ssm_out). Qwen 3.5's files order the value heads tiled (value head j reads key head
j % H_k, llama.cpp's converter reorders them so); Qwen3-Next's keep them grouped (j reads
j // (H_v / H_k)) and its beta and alpha come packed per key head (ssm_ba).

An attention layer: the query's projection also gives a gate per head (attn_q holds
[q, gate] per head), Q/K RMSNorm per head, rotary on the first rope.dimension_count
dimensions (NEOX; Qwen 3.5's as interleaved M-RoPE, which for text is the same), and the
output times sigmoid(gate) before attn_output. The norms' weights already hold their +1
(the converter adds it). The MoE FFN adds a shared expert weighed by sigmoid of its own
gate. Layers past block_count - nextn_predict_layers (the MTP head) are not run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gguf

from .contract import register
from .attention import attention
from .base import ATTENTION, LLM, Block, Metadata, ModelError, Transformer, Weights, weight
from .experts import Routing, route, swiglu_experts
from .llama import LlamaConfig
from ..kvcache import LayerShape, StateShape

if TYPE_CHECKING:
    from pyggml import Tensor

SSM = gguf.Keys.SSM
RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"     # llama.cpp's, not in gguf-py
V_HEAD_REORDERED = "{arch}.ssm.v_head_reordered"           # Ollama's files
# the DeltaNet's query and key L2 norm: transformers' (FLA's) fixed 1e-6; llama.cpp takes
# rms_norm_eps, which the released models set to 1e-6 as well
L2_NORM_EPS = 1e-6


@dataclass
class Qwen35Config(LlamaConfig):
    arch: str = "qwen35"             # the file's, which names its keys
    conv_kernel: int = 4
    state: int = 128                 # S: a key's and a value's head size
    key_heads: int = 1               # H_k
    value_heads: int = 1             # H_v, a multiple of H_k
    recurrent: list = field(default_factory=list)    # per layer: a DeltaNet's
    tiled: bool = True               # value head j reads key head j % H_k (else j // r)
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0
    shared_ffn: int = 0

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "qwen35") -> Qwen35Config:
        m = Metadata(meta, arch)
        kv_heads = m.get(ATTENTION.HEAD_COUNT_KV, array=True)
        layers = m.layers_run()
        # Ollama's files give head_count_kv per layer, 0 for a DeltaNet's
        per_layer = isinstance(kv_heads, list)
        if per_layer and len(kv_heads) < layers:
            raise m.malformed(ATTENTION.HEAD_COUNT_KV, kv_heads, f"fewer values than the "
                              f"{layers} layers")
        fixed = dict(meta)
        fixed[ATTENTION.HEAD_COUNT_KV.format(arch=arch)] = max(kv_heads) if per_layer else \
            kv_heads
        fixed.setdefault(LLM.FEED_FORWARD_LENGTH.format(arch=arch), 0)
        fixed[LLM.BLOCK_COUNT.format(arch=arch)] = layers
        base = LlamaConfig.from_metadata(fixed, arch)
        recurrent = m.get(RECURRENT_LAYERS)
        if recurrent is not None and not isinstance(recurrent, list):
            raise m.malformed(RECURRENT_LAYERS, recurrent, "not an array of one flag per layer")
        if recurrent is None and per_layer:
            recurrent = [n == 0 for n in kv_heads]
        if recurrent is None:
            interval = int(m.get(LLM.FULL_ATTENTION_INTERVAL, 4))
            recurrent = [(i + 1) % interval != 0 for i in range(layers)]
        experts, experts_used = m.experts()
        config = cls(**vars(base), arch=arch, conv_kernel=int(m.require(SSM.CONV_KERNEL)),
                     state=int(m.require(SSM.STATE_SIZE)),
                     key_heads=int(m.require(SSM.GROUP_COUNT)),
                     value_heads=int(m.require(SSM.TIME_STEP_RANK)),
                     recurrent=[bool(r) for r in recurrent[:layers]],
                     tiled=arch != "qwen3next" and bool(m.get(V_HEAD_REORDERED, True)),
                     experts=experts, experts_used=experts_used,
                     expert_ffn=int(m.get(LLM.EXPERT_FEED_FORWARD_LENGTH, 0)),
                     shared_ffn=int(m.get(LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, 0)))
        config.rope.interleaved = bool(config.rope.sections)     # llama.cpp's IMROPE
        return config

    def check(self, m: Metadata) -> None:
        """Refuse sizes that disagree with each other, naming the key."""
        super().check(m)
        inner = int(m.require(SSM.INNER_SIZE))
        if inner != self.state * self.value_heads:
            raise ModelError(f"{SSM.INNER_SIZE.format(arch=m.arch)} is {inner}, but "
                             f"state_size x time_step_rank is "
                             f"{self.state * self.value_heads}.")
        if self.value_heads % self.key_heads:
            raise ModelError(f"{SSM.TIME_STEP_RANK.format(arch=m.arch)} "
                             f"({self.value_heads} value heads) must be a multiple of "
                             f"{SSM.GROUP_COUNT.format(arch=m.arch)} ({self.key_heads} key "
                             "heads).")
        if len(self.recurrent) != self.layers:
            raise ModelError(f"{RECURRENT_LAYERS.format(arch=m.arch)} names "
                             f"{len(self.recurrent)} layers, not {self.layers}.")
        if self.conv_kernel < 2:
            raise ModelError(f"{SSM.CONV_KERNEL.format(arch=m.arch)} must be at least "
                             f"2, not {self.conv_kernel}.")

    @property
    def key_dim(self) -> int:
        return self.state * self.key_heads

    @property
    def value_dim(self) -> int:
        return self.state * self.value_heads

    @property
    def conv_channels(self) -> int:
        return 2 * self.key_dim + self.value_dim


@dataclass
class Qwen35Block(Block):
    """Every layer's norms, then the weights of its kind (attention or DeltaNet) and of its
    FFN's (dense, or experts): None in the other kinds' layers."""
    attn_norm: Tensor = weight()
    post_attention_norm: Tensor = weight()
    # gated attention
    attn_q: Tensor | None = None            # (2 * H * D, E): [q, gate] per head
    attn_k: Tensor | None = None
    attn_v: Tensor | None = None
    attn_q_norm: Tensor | None = None
    attn_k_norm: Tensor | None = None
    attn_output: Tensor | None = None
    # gated DeltaNet
    attn_qkv: Tensor | None = None          # (2 * key_dim + value_dim, E)
    attn_gate: Tensor | None = None         # z: (value_dim, E)
    ssm_conv1d: Tensor | None = None        # (channels, kernel)
    ssm_a: Tensor | None = None             # (H_v,): -exp(A_log)
    ssm_dt: Tensor | None = None            # (H_v,): the decay's bias
    ssm_beta: Tensor | None = None          # (H_v, E)
    ssm_alpha: Tensor | None = None         # (H_v, E)
    ssm_ba: Tensor | None = None            # Qwen3-Next: (2 * H_v, E), [b, a] per key head
    ssm_norm: Tensor | None = None          # (S,)
    ssm_out: Tensor | None = None           # (E, value_dim)
    # FFN: dense, or experts and a shared expert
    ffn_gate: Tensor | None = None
    ffn_up: Tensor | None = None
    ffn_down: Tensor | None = None
    ffn_gate_inp: Tensor | None = None
    ffn_gate_exps: Tensor | None = None
    ffn_up_exps: Tensor | None = None
    ffn_down_exps: Tensor | None = None
    ffn_gate_inp_shexp: Tensor | None = None
    ffn_gate_shexp: Tensor | None = None
    ffn_up_shexp: Tensor | None = None
    ffn_down_shexp: Tensor | None = None


@register("qwen35moe")
@register("qwen3next")
@register("qwen35")
class Qwen35(Transformer):
    config_class = Qwen35Config
    config: Qwen35Config

    @classmethod
    def config_of(cls, meta: dict):
        return Qwen35Config.from_metadata(meta, meta["general.architecture"])

    def __init__(self, config: Qwen35Config, weights: Weights):
        self.config = config
        self.bind_ends(weights)
        self.blocks = [self._bind_block(weights, i) for i in range(config.layers)]

    def _bind_block(self, weights: Weights, i: int) -> Qwen35Block:
        c, block, p = self.config, Qwen35Block(), f"blk.{i}."
        weights.bind(block, p, {"attn_norm": (c.embd,), "post_attention_norm": (c.embd,)})
        if c.recurrent[i]:
            self._bind_delta_net(weights, block, p)
        else:
            q_dim, kv_dim = c.heads * c.head_dim, c.kv_heads * c.head_dim
            weights.bind(block, p, {
                "attn_q": (2 * q_dim, c.embd), "attn_k": (kv_dim, c.embd),
                "attn_v": (kv_dim, c.embd), "attn_output": (c.embd, q_dim),
                "attn_q_norm": (c.head_dim,), "attn_k_norm": (c.head_dim,)})
        if c.experts:
            weights.bind(block, p, {
                "ffn_gate_inp": (c.experts, c.embd),
                "ffn_gate_exps": (c.experts, c.expert_ffn, c.embd),
                "ffn_up_exps": (c.experts, c.expert_ffn, c.embd),
                "ffn_down_exps": (c.experts, c.embd, c.expert_ffn),
                "ffn_gate_shexp": (c.shared_ffn, c.embd), "ffn_up_shexp": (c.shared_ffn, c.embd),
                "ffn_down_shexp": (c.embd, c.shared_ffn)})
            block.ffn_gate_inp_shexp = weights.take(f"{p}ffn_gate_inp_shexp.weight")
        else:
            weights.bind(block, p, {"ffn_gate": (c.ffn, c.embd), "ffn_up": (c.ffn, c.embd),
                                    "ffn_down": (c.embd, c.ffn)})
        return block

    def _bind_delta_net(self, weights: Weights, block: Qwen35Block, p: str) -> None:
        try:
            self._bind_delta_net_weights(weights, block, p)
        except ModelError as error:
            c, arch = self.config, self.config.arch
            sizes = ", ".join(f"{key.format(arch=arch)} = {value}" for key, value in (
                (SSM.STATE_SIZE, c.state), (SSM.GROUP_COUNT, c.key_heads),
                (SSM.TIME_STEP_RANK, c.value_heads), (SSM.CONV_KERNEL, c.conv_kernel)))
            raise ModelError(f"{error} The recurrent layers' sizes come from {sizes}; one "
                             "of these keys disagrees with the file's tensors.") from error

    def _bind_delta_net_weights(self, weights: Weights, block: Qwen35Block, p: str) -> None:
        c, heads = self.config, self.config.value_heads
        weights.bind(block, p, {
            "attn_qkv": (c.conv_channels, c.embd), "attn_gate": (c.value_dim, c.embd),
            "ssm_conv1d": (c.conv_channels, c.conv_kernel), "ssm_norm": (c.state,),
            "ssm_out": (c.embd, c.value_dim)})
        if c.tiled:
            weights.bind(block, p, {"ssm_beta": (heads, c.embd), "ssm_alpha": (heads, c.embd)})
        else:
            weights.bind(block, p, {"ssm_ba": (2 * heads, c.embd)})
        block.ssm_a = weights.take(f"{p}ssm_a", (heads,))
        # llama.cpp's files: ssm_dt.bias; Ollama's: ssm_dt
        dt = f"{p}ssm_dt.bias" if f"{p}ssm_dt.bias" in weights.tensors else f"{p}ssm_dt"
        block.ssm_dt = weights.take(dt, (heads,))

    @classmethod
    def layer_shapes(cls, config: Qwen35Config) -> list[LayerShape]:
        state = StateShape(config.conv_channels, config.conv_kernel - 1,
                           config.value_heads * config.state * config.state)
        return [LayerShape(0, 0, 0, state=state) if recurrent else
                LayerShape(config.kv_heads, config.head_dim, config.head_dim)
                for recurrent in config.recurrent]

    def position_axes(self) -> int:
        return self.config.rope.axes

    def forward(self, inputs, kv):
        c = self.config
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        cut = self._cut_layer
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(c.norm_eps).mul(block.attn_norm)
            if c.recurrent[i]:
                a, out = self._delta_net(block, h, kv, i), block.ssm_out      # (T, H_v * S)
            else:
                a, out = self._attention(block, h, inputs, kv, i), block.attn_output
            if i == cut:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = x.add(out.mul_mat(a))
            h = x.rms_norm(c.norm_eps).mul(block.post_attention_norm)
            x = x.add(self._ffn(block, h))
        x = x.rms_norm(c.norm_eps).mul(self.output_norm)                     # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def _attention(self, block: Qwen35Block, h, inputs, kv, i: int):
        """h (T, E) -> (T, H * D): attention times sigmoid of its gate."""
        c, n = self.config, h.shape[0]
        d, heads = c.head_dim, c.heads
        assert block.attn_q is not None and block.attn_k is not None and \
            block.attn_v is not None                                 # an attention layer's
        both = block.attn_q.mul_mat(h).reshape(n, heads, 2 * d)              # (T, H, 2D)
        row, head, item = both.strides
        q = both.view((n, heads, d), strides=(row, head, item))              # (T, H, D)
        gate = both.view((n, heads, d), offset=d * item, strides=(row, head, item))
        q = q.rms_norm(c.norm_eps).mul(block.attn_q_norm)
        k = block.attn_k.mul_mat(h).reshape(n, c.kv_heads, d).rms_norm(c.norm_eps) \
            .mul(block.attn_k_norm)                                           # (T, KVH, D)
        v = block.attn_v.mul_mat(h).reshape(n, c.kv_heads, d)
        q = c.rope.apply(q, inputs.positions, "neox")
        k = c.rope.apply(k, inputs.positions, "neox")
        a = attention(kv, i, q, k, v, 1.0 / math.sqrt(d))                    # (T, H * D)
        return a.mul(gate.sigmoid().reshape(n, heads * d))

    def _beta_alpha(self, block: Qwen35Block, h):
        """h (T, E) -> beta's and alpha's logits, (T, H_v) each, value heads in the order
        the keys' broadcast reads them."""
        if block.ssm_ba is None:
            assert block.ssm_beta is not None and block.ssm_alpha is not None
            return block.ssm_beta.mul_mat(h), block.ssm_alpha.mul_mat(h)
        c, n = self.config, h.shape[0]
        r = c.value_heads // c.key_heads
        packed = block.ssm_ba.mul_mat(h).reshape(n, c.key_heads, 2 * r)     # (T, H_k, 2r)
        row, head, item = packed.strides
        b = packed.view((n, c.key_heads, r), strides=(row, head, item)).cont()
        a = packed.view((n, c.key_heads, r), offset=r * item, strides=(row, head, item)).cont()
        return b.reshape(n, c.value_heads), a.reshape(n, c.value_heads)

    def _delta_net(self, block: Qwen35Block, h, kv, i: int):
        """h (T, E) -> (T, H_v * S): the gated DeltaNet's output before ssm_out, each
        sequence from its state, the new states stored."""
        c, n = self.config, h.shape[0]
        assert block.attn_qkv is not None and block.attn_gate is not None    # a DeltaNet's
        qkv = block.attn_qkv.mul_mat(h)                                      # (T, channels)
        beta, alpha = self._beta_alpha(block, h)                             # (T, H_v) each
        beta = beta.sigmoid()
        decay = alpha.add(block.ssm_dt).softplus().mul(block.ssm_a)          # (T, H_v), <= 0
        outs = [self._recurrence(block, kv, i, group, qkv, decay, beta)
                for group in range(len(kv.state_groups))]
        o = kv.join(outs).reshape(n, c.value_heads, c.state)                 # (T, H_v, S)
        z = block.attn_gate.mul_mat(h).reshape(n, c.value_heads, c.state)
        o = o.rms_norm(c.norm_eps).mul(block.ssm_norm).mul(z.silu())
        return o.reshape(n, c.value_dim)

    def _recurrence(self, block: Qwen35Block, kv, i: int, group: int, qkv, decay, beta):
        """One group's S sequences of t tokens each: (S * t, H_v * S) outputs."""
        c = self.config
        x = kv.rows(qkv, group)                                              # (S, t, C)
        seqs, t = x.shape[0], x.shape[1]
        held = c.conv_kernel - 1
        conv_in = kv.conv_state(i, group).concat(x.transpose(), axis=2)     # (S, C, K-1+t)
        row, channel, item = conv_in.strides
        kv.write_conv(i, group, conv_in.view((seqs, c.conv_channels, held), offset=t * item,
                                             strides=(row, channel, item)))
        conv = conv_in.ssm_conv(block.ssm_conv1d).silu()                     # (S, t, C)
        q = self._heads(conv, 0, c.key_heads)                                # (S, t, H_k, S)
        k = self._heads(conv, c.key_dim, c.key_heads)
        v = self._heads(conv, 2 * c.key_dim, c.value_heads)                  # (S, t, H_v, S)
        q, k = self._l2_norm(q), self._l2_norm(k)
        if not c.tiled and c.value_heads != c.key_heads:       # grouped: j reads j // r
            q, k = self._grouped(q), self._grouped(k)
        gate = kv.rows(decay, group).reshape(seqs, t, c.value_heads, 1)
        strength = kv.rows(beta, group).reshape(seqs, t, c.value_heads, 1)
        state = kv.recurrent_state(i, group).reshape(seqs, c.value_heads, c.state, c.state)
        out = q.gated_delta_net(k, v, gate, strength, state)   # (S*t + S*S_v, H_v * S_v)
        width = c.value_dim
        row = out.strides[0]
        kv.write_recurrent(i, group, out.view((seqs, c.value_heads * c.state * c.state),
                                              offset=seqs * t * row,
                                              strides=(c.state * row, out.strides[1])))
        return out.view((seqs * t, width), strides=out.strides)

    def _heads(self, conv, offset: int, heads: int):
        """(S, t, heads, S_k): the heads that start at channel offset of conv (S, t, C)."""
        c = self.config
        seq, token, item = conv.strides
        return conv.view((conv.shape[0], conv.shape[1], heads, c.state), offset=offset * item,
                         strides=(seq, token, c.state * item, item))

    def _l2_norm(self, x):
        """x / sqrt(sum(x^2) + 1e-6) over the head (transformers' l2norm)."""
        c = self.config
        return x.rms_norm(L2_NORM_EPS / c.state).scale(1.0 / math.sqrt(c.state))

    def _grouped(self, x):
        """(S, t, H_k, D) -> (S, t, H_v, D): each key head repeated for its r value heads."""
        c = self.config
        seqs, t = x.shape[0], x.shape[1]
        r = c.value_heads // c.key_heads
        spread = x.reshape(seqs * t, c.key_heads, 1, c.state).repeat(seqs * t, c.key_heads, r,
                                                                     c.state)
        return spread.reshape(seqs, t, c.value_heads, c.state)

    def _ffn(self, block: Qwen35Block, h):
        """h (T, E) -> (T, E): SwiGLU, or the chosen experts plus the shared expert weighed
        by sigmoid of its gate."""
        if not self.config.experts:
            gate, up, down = block.ffn_gate, block.ffn_up, block.ffn_down
            assert gate is not None and up is not None and down is not None
            return down.mul_mat(gate.mul_mat(h).swiglu(up.mul_mat(h)))
        c = self.config
        assert block.ffn_gate_inp is not None and block.ffn_gate_shexp is not None and \
            block.ffn_up_shexp is not None and block.ffn_down_shexp is not None
        chosen, weights = route(Routing(c.experts, c.experts_used),
                                block.ffn_gate_inp.mul_mat(h))               # (T, K), (T, K, 1)
        routed = swiglu_experts(block.ffn_gate_exps, block.ffn_up_exps, block.ffn_down_exps,
                                h, chosen, weights)
        shared = block.ffn_down_shexp.mul_mat(block.ffn_gate_shexp.mul_mat(h).swiglu(
            block.ffn_up_shexp.mul_mat(h)))                                  # (T, E)
        weight = h.mul(block.ffn_gate_inp_shexp).sum_rows().sigmoid()        # (T, 1)
        return routed.add(shared.mul(weight))

    def shift(self, k, deltas, layer: int):
        return self.config.rope.shift(k, deltas, "neox")
