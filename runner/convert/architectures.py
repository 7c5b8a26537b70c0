"""What each supported architecture writes: GGUF metadata from config.json, tensor
transforms, the shapes the config implies. Names and keys are llama.cpp's (gguf-py's
tables), so files are interchangeable with its converter's."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, TypedDict

import gguf
import numpy as np

from ..models.gemma2 import LAYERS_27B as GEMMA2_27B_LAYERS
from ..models.gemma3 import query_pre_attn_scalar
from .checkpoint import CheckpointError
from .command_r import (cohere2_hparams, cohere2_hyper, cohere_shape, cohere_split,
                        command_r_hparams, command_r_hyper)
from .deepseek2 import deepseek2_hparams, deepseek2_hyper, deepseek2_shape, deepseek2_split
from .exaone4 import exaone4_hparams
from .experts import fused_experts_split
from .gemma3n import gemma3n_hparams, gemma3n_hyper, gemma3n_shape, stack_altup
from .gemma4 import gemma4_extra, gemma4_hparams, gemma4_hyper, gemma4_shape, gemma4_split
from .gemma4_unified import gemma4_unified_hparams, gemma4_unified_prepare
from .gpt_oss import gpt_oss_hparams, gpt_oss_split, pair_mxfp4
from .granite import granite_hparams, granite_hyper, granitemoe_hparams, granitemoe_split
from .hyper import Hyper, expected_shape, extra_tensors, fused_shape
from .llama_variants import mixtral_hparams, seed_oss_hparams, smollm3_hparams
from .glm4 import glm4_hyper
from .phi3 import phi3_extra, phi3_hparams, phi3_hyper
from .starcoder2 import starcoder2_hparams
from .qwen35 import qwen35_hparams, qwen35_hyper, qwen35_prepare, qwen35_split
from .nomic import (NOMIC_NAMES, nomic_hparams, nomic_hyper, nomic_moe_hparams,
                    nomic_moe_hyper, nomic_moe_split)
from .sentence import add_dense_tensors, dense_sizes


def gemma3_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
    """Sliding-window layers (every sixth global), the local layers' rope base."""
    pattern = ["full_attention" if i % 6 == 5 else "sliding_attention"
               for i in range(h.layers)]
    if config.get("layer_types", pattern) != pattern:
        raise CheckpointError("This Gemma 3's layer pattern is not every sixth layer global, "
                              "the only one the runner's gemma3 knows.")
    expected = query_pre_attn_scalar(h.layers, h.embd, h.heads, h.head_dim)
    if config.get("query_pre_attn_scalar", expected) != expected:
        raise CheckpointError(f"This Gemma 3's query_pre_attn_scalar is "
                              f"{config['query_pre_attn_scalar']}; GGUF cannot record it, and "
                              f"llama.cpp and the runner take {expected} for a "
                              f"{h.layers}-layer model.")
    if config.get("final_logit_softcapping") or config.get("attn_logit_softcapping"):
        raise CheckpointError("Gemma 3 with logit softcapping is not supported.")
    writer.add_sliding_window(config["sliding_window"])
    local = (config.get("rope_parameters") or {}).get("sliding_attention", {}).get(
        "rope_theta", config.get("rope_local_base_freq"))
    if local is not None:
        writer.add_rope_freq_base_swa(float(local))


def gemma2_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
    """Every other layer sliding (the even ones), soft-caps, the query scale by size."""
    pattern = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(h.layers)]
    if config.get("layer_types", pattern) != pattern:
        raise CheckpointError("This Gemma 2's layer pattern is not every other layer sliding, "
                              "the only one llama.cpp and the runner know.")
    expected = query_pre_attn_scalar(h.layers, h.embd, h.heads, h.head_dim, GEMMA2_27B_LAYERS)
    if config.get("query_pre_attn_scalar", expected) != expected:
        raise CheckpointError(f"This Gemma 2's query_pre_attn_scalar is "
                              f"{config['query_pre_attn_scalar']}; GGUF cannot record it, and "
                              f"llama.cpp and the runner take {expected} for a "
                              f"{h.layers}-layer model.")
    writer.add_sliding_window(config.get("sliding_window", 4096))
    writer.add_attn_logit_softcapping(float(config.get("attn_logit_softcapping") or 0.0))
    writer.add_final_logit_softcapping(float(config.get("final_logit_softcapping") or 0.0))


def qwen3moe_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
    """Experts on every layer, their top-k weights renormalised: llama.cpp's qwen3moe knows
    no other kind."""
    if not config.get("norm_topk_prob", False):
        raise CheckpointError("This Qwen3 MoE does not renormalise its top-k expert weights "
                              "(norm_topk_prob false); llama.cpp's qwen3moe always does.")
    if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
        raise CheckpointError("This Qwen3 MoE has dense layers among its expert layers; "
                              "llama.cpp's qwen3moe has experts on every layer.")
    writer.add_expert_count(config.get("num_experts") or config["num_local_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])


def qwen35_shape(name: str, h: Hyper, config: dict) -> tuple[int, ...] | None:
    """Qwen 3.5's attn_q holds each head's query and its gate."""
    if name.endswith("attn_q.weight"):
        return (2 * h.heads * h.head_dim, h.embd)
    return expected_shape(name, h)


def olmo2_shape(name: str, h: Hyper, config: dict) -> tuple[int, ...] | None:
    """OLMo 2 norms Q and K over all heads: its norm weights span them."""
    if name.endswith("attn_q_norm.weight"):
        return (h.heads * h.head_dim,)
    if name.endswith("attn_k_norm.weight"):
        assert isinstance(h.kv_heads, int)          # per-layer KV heads are Gemma 4's only
        return (h.kv_heads * h.head_dim,)
    return expected_shape(name, h)


QWEN3VL_SECTIONS = [24, 20, 20]        # transformers' default for Qwen3-VL


def mrope_hparams(default: list[int]) -> Callable:
    """Qwen-VL's M-RoPE sections (pairs of a head per axis: time, row, column), and Qwen3-VL's
    deepstack layer count, as llama.cpp's converter writes them."""
    def write(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        sections = list(rope.get("mrope_section", default))
        if sum(sections) * 2 != h.head_dim:
            raise CheckpointError(f"The M-RoPE sections {sections} do not cover the "
                                  f"{h.head_dim // 2} rotated pairs of a head.")
        writer.add_rope_dimension_sections(sections + [0] * (4 - len(sections)))
        deepstack = (config.get("vision_config") or {}).get("deepstack_visual_indexes")
        if deepstack is not None:
            writer.add_num_deepstack_layers(len(deepstack))
    return write


def qwen3vlmoe_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
    """Qwen3-VL MoE's experts (always renormalised) and its M-RoPE sections."""
    qwen3moe_hparams(writer, {"norm_topk_prob": True, **config}, h, directory)
    mrope_hparams(QWEN3VL_SECTIONS)(writer, config, h, directory)


def mistral3_hyper(config: dict, h: Hyper) -> Hyper:
    """Ministral 3's YaRN carries mscale and mscale_all_dim; equal, they cancel in
    transformers' attention factor, which the file says with yarn_log_multiplier
    (mistral3_hparams) as llama.cpp's converter does."""
    scaling = dict(h.rope_scaling or {})
    if scaling.get("mscale", 1.0) != scaling.get("mscale_all_dim", 1.0):
        raise CheckpointError("This Mistral 3's YaRN mscale differs from its mscale_all_dim; "
                              "llama.cpp's mistral3 reads only the latter.")
    scaling.pop("mscale", None)
    scaling.pop("mscale_all_dim", None)
    return replace(h, rope_scaling=scaling or None)


def mistral3_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
    """The YaRN log multiplier (mscale_all_dim) and Llama 4's attention temperature."""
    rope = config.get("rope_parameters") or {}
    if rope.get("rope_type", rope.get("type")) == "yarn":
        writer.add_rope_scaling_yarn_log_mul(float(rope.get("mscale_all_dim", 1.0)))
    if rope.get("llama_4_scaling_beta"):
        writer.add_attn_temperature_scale(float(rope["llama_4_scaling_beta"]))


def olmo3_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
    """OLMo 3: a window on the layers layer_types names sliding (three of four where it
    names none), one bool per layer as llama.cpp's converter writes them; one rope base for
    both kinds; the global layers' rope may be scaled (YaRN, written as the common keys), the
    sliding layers' not (llama.cpp's olmo2 rotates them unscaled)."""
    kinds = config.get("layer_types") or \
        ["full_attention" if i % 4 == 3 else "sliding_attention" for i in range(h.layers)]
    if len(kinds) != h.layers:
        raise CheckpointError(f"This OLMo 3's layer_types names {len(kinds)} layers, not its "
                              f"{h.layers}.")
    writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in kinds])
    rope = config.get("rope_parameters") or {}
    kinds = [p for p in rope.values() if isinstance(p, dict)]
    sliding = rope.get("sliding_attention") or {}
    if sliding.get("rope_type", "default") != "default" or \
            len({p.get("rope_theta") for p in kinds}) > 1:
        raise CheckpointError("OLMo 3 with scaled rope on its sliding layers or a rope base "
                              "per layer kind is not supported (llama.cpp's olmo2 has neither).")
    writer.add_sliding_window(config["sliding_window"])


def gemma_embedding_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper",
                            directory) -> None:
    """Gemma 3's, with the window as config.json gives it (transformers halves it for
    bidirectional attention as it loads; llama.cpp halves the file's), and the Dense
    layers' sizes."""
    gemma3_hparams(writer, config, h, directory)
    for name, (size_in, size_out) in dense_sizes(directory).items():
        writer.add_dense_features_dims(name, size_in, size_out)


def bert_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
    writer.add_causal_attention(False)
    writer.add_token_type_count(int(config.get("type_vocab_size", 1)))    # llama.cpp needs it
    if config.get("hidden_act", "gelu") != "gelu":
        raise CheckpointError(f"BERT with {config['hidden_act']} is not supported (gelu is).")


def llama4_hparams(writer: gguf.GGUFWriter, config: dict, h: "Hyper", directory) -> None:
    """Experts, the dense/MoE interleave, the no-RoPE interval, chunk and temperature (the
    last three llama.cpp fixes in code; we write them too, under keys it ignores)."""
    interval, step = config.get("no_rope_layer_interval", 4), \
        config.get("interleave_moe_layer_step", 1)
    if config.get("no_rope_layers", [int((i + 1) % interval != 0) for i in range(h.layers)]) \
            != [int((i + 1) % interval != 0) for i in range(h.layers)]:
        raise CheckpointError("This Llama 4's no-RoPE layers are not every "
                              f"{interval}th layer.")
    if config.get("moe_layers", list(range(step - 1, h.layers, step))) != \
            list(range(step - 1, h.layers, step)):
        raise CheckpointError(f"This Llama 4's MoE layers are not every {step}th layer.")
    if not config.get("attn_temperature_tuning", True):
        raise CheckpointError("Llama 4 without attention temperature tuning is not supported.")
    arch = "llama4"
    writer.add_expert_count(config["num_local_experts"])
    writer.add_expert_used_count(config.get("num_experts_per_tok", 1))
    writer.add_expert_feed_forward_length(config["intermediate_size"])
    writer.add_interleave_moe_layer_step(step)
    writer.add_uint32(f"{arch}.no_rope_layer_interval", interval)
    writer.add_uint32(f"{arch}.attention.chunk_size", config.get("attention_chunk_size", 8192))
    writer.add_uint32(gguf.Keys.Attention.TEMPERATURE_LENGTH.format(arch=arch),
                      int(config.get("floor_scale", 8192)))
    writer.add_float32(gguf.Keys.Attention.TEMPERATURE_SCALE.format(arch=arch),
                       float(config.get("attn_scale", 0.1)))
    writer.add_bool(f"{arch}.attention.use_qk_norm", bool(config.get("use_qk_norm", True)))


FUSED_EXPERTS = re.compile(r"layers\.(\d+)\.feed_forward\.experts\.(gate_up_proj|down_proj)$")


def llama4_split(entry, config: dict) -> dict | None:
    """HF's fused expert tensors, (experts, in, out), into llama.cpp's (experts, out, in):
    gate_up_proj's halves are the gate and the up projection. GGUF name -> (shape, loader)."""
    found = FUSED_EXPERTS.search(entry.name)
    if found is None:
        return None
    layer, kind = found.groups()

    def part(index):
        return lambda: np.ascontiguousarray(
            np.split(entry.load(), 2, axis=-1)[index].transpose(0, 2, 1))

    experts, rows, columns = entry.shape
    if kind == "gate_up_proj":
        half = (experts, columns // 2, rows)
        return {f"blk.{layer}.ffn_gate_exps.weight": (half, part(0)),
                f"blk.{layer}.ffn_up_exps.weight": (half, part(1))}
    return {f"blk.{layer}.ffn_down_exps.weight": (
        (experts, columns, rows), lambda: np.ascontiguousarray(entry.load().transpose(0, 2, 1)))}


@dataclass(frozen=True)
class Architecture:
    arch: gguf.MODEL_ARCH
    permute_qk: bool = False        # llama: HF's rotate-half layout -> interleaved pairs
    norm_shift: float = 0.0         # Gemma's norms multiply by 1 + weight: GGUF stores the sum
    space_prefix: bool = True       # SentencePiece: a space before the text (not Gemma's)
    hparams: Callable | None = None  # what the architecture writes beyond the common keys
    split: Callable | None = None    # (checkpoint tensor, config) -> {GGUF name: (shape,
    #                                  loader)}, or None for the usual name
    hyper: Callable | None = None    # (config, Hyper) -> the Hyper its common keys are from
    shape: Callable | None = None    # (name, Hyper, config) -> shape, for per-layer shapes
    extra: Callable | None = None    # (config, Hyper) -> tensors the checkpoint lacks
    pooling: gguf.PoolingType | None = None  # an encoder's pooling when the checkpoint has
    #                                          no sentence-transformers Pooling module
    names: dict | None = None        # config.json's own names -> the common ones
    prepare: Callable | None = None  # (checkpoint) -> None: rewrites its tensors first

    @property
    def name(self) -> str:
        return gguf.MODEL_ARCH_NAMES[self.arch]

    def hyper_of(self, config: dict) -> Hyper:
        if self.names:
            config = {**{common: config[own] for own, common in self.names.items()
                         if own in config}, **config}
        h = Hyper.of(config)
        return self.hyper(config, h) if self.hyper else h

    def shape_of(self, name: str, h: Hyper, config: dict) -> tuple[int, ...] | None:
        return self.shape(name, h, config) if self.shape else expected_shape(name, h)

    def extra_of(self, config: dict, h: Hyper) -> dict[str, np.ndarray]:
        return {**extra_tensors(h), **(self.extra(config, h) if self.extra else {})}


class ArchitectureParts(TypedDict, total=False):
    """Architecture's fields that several architectures share (QWEN35_PARTS)."""
    norm_shift: float
    hyper: Callable
    hparams: Callable
    split: Callable
    shape: Callable
    prepare: Callable


# config.json model_type -> architecture
# Qwen 3.5 (dense, MoE) and Qwen3-Next: norms +1 but ssm_norm, the DeltaNet's tensors, MTP
QWEN35_PARTS: ArchitectureParts = dict(norm_shift=1.0, hyper=qwen35_hyper, hparams=qwen35_hparams,
                    split=qwen35_split, shape=qwen35_shape, prepare=qwen35_prepare)
ARCHITECTURES = {
    "llama": Architecture(gguf.MODEL_ARCH.LLAMA, permute_qk=True),
    "mistral": Architecture(gguf.MODEL_ARCH.LLAMA, permute_qk=True),   # as llama.cpp's
    "qwen2": Architecture(gguf.MODEL_ARCH.QWEN2),
    "qwen3": Architecture(gguf.MODEL_ARCH.QWEN3),
    # the text models of Qwen-VL checkpoints (their towers are not converted)
    "qwen2_vl_text": Architecture(gguf.MODEL_ARCH.QWEN2VL, hparams=mrope_hparams([16, 24, 24])),
    "qwen2_5_vl_text": Architecture(gguf.MODEL_ARCH.QWEN2VL,
                                    hparams=mrope_hparams([16, 24, 24])),
    "qwen3_vl_text": Architecture(gguf.MODEL_ARCH.QWEN3VL,
                                  hparams=mrope_hparams(QWEN3VL_SECTIONS)),
    "qwen3_vl_moe_text": Architecture(gguf.MODEL_ARCH.QWEN3VLMOE, hparams=qwen3vlmoe_hparams,
                                      split=fused_experts_split),
    "deepseek_v2": Architecture(gguf.MODEL_ARCH.DEEPSEEK2, hyper=deepseek2_hyper,
                                hparams=deepseek2_hparams, split=deepseek2_split,
                                shape=deepseek2_shape),
    "deepseek_v3": Architecture(gguf.MODEL_ARCH.DEEPSEEK2, hyper=deepseek2_hyper,
                                hparams=deepseek2_hparams, split=deepseek2_split,
                                shape=deepseek2_shape),
    "glm4_moe_lite": Architecture(gguf.MODEL_ARCH.DEEPSEEK2, hyper=deepseek2_hyper,
                                  hparams=deepseek2_hparams, split=deepseek2_split,
                                  shape=deepseek2_shape),
    "qwen3_moe": Architecture(gguf.MODEL_ARCH.QWEN3MOE, hparams=qwen3moe_hparams,
                              split=fused_experts_split),
    "ministral3": Architecture(gguf.MODEL_ARCH.MISTRAL3, permute_qk=True,
                               hyper=mistral3_hyper, hparams=mistral3_hparams),
    "olmo2": Architecture(gguf.MODEL_ARCH.OLMO2, shape=olmo2_shape),
    "olmo3": Architecture(gguf.MODEL_ARCH.OLMO2, shape=olmo2_shape, hparams=olmo3_hparams),
    "gemma2": Architecture(gguf.MODEL_ARCH.GEMMA2, norm_shift=1.0, space_prefix=False,
                           hparams=gemma2_hparams),
    "gemma3_text": Architecture(gguf.MODEL_ARCH.GEMMA3, norm_shift=1.0, space_prefix=False,
                                hparams=gemma3_hparams),
    # EmbeddingGemma: gemma3_text with use_bidirectional_attention (VARIANTS)
    "gemma3_embedding": Architecture(gguf.MODEL_ARCH.GEMMA_EMBEDDING, norm_shift=1.0,
                                     space_prefix=False, hparams=gemma_embedding_hparams,
                                     pooling=gguf.PoolingType.MEAN,
                                     prepare=add_dense_tensors),
    "gemma3n_text": Architecture(gguf.MODEL_ARCH.GEMMA3N, space_prefix=False,
                                 hparams=gemma3n_hparams, hyper=gemma3n_hyper,
                                 shape=gemma3n_shape, prepare=stack_altup),
    "gemma4_text": Architecture(gguf.MODEL_ARCH.GEMMA4, space_prefix=False,
                                hparams=gemma4_hparams, split=gemma4_split, hyper=gemma4_hyper,
                                shape=gemma4_shape, extra=gemma4_extra),
    # Gemma 4 12B: the same text model, its config's own defaults, suppressed tokens
    "gemma4_unified_text": Architecture(gguf.MODEL_ARCH.GEMMA4, space_prefix=False,
                                        hparams=gemma4_unified_hparams, split=gemma4_split,
                                        hyper=gemma4_hyper, shape=gemma4_shape,
                                        extra=gemma4_extra, prepare=gemma4_unified_prepare),
    "bert": Architecture(gguf.MODEL_ARCH.BERT, hparams=bert_hparams,
                         pooling=gguf.PoolingType.CLS),
    "nomic_bert": Architecture(gguf.MODEL_ARCH.NOMIC_BERT, hyper=nomic_hyper,
                               hparams=nomic_hparams, pooling=gguf.PoolingType.MEAN,
                               names=NOMIC_NAMES),
    "nomic_bert_moe": Architecture(gguf.MODEL_ARCH.NOMIC_BERT_MOE, hyper=nomic_moe_hyper,
                                   hparams=nomic_moe_hparams, split=nomic_moe_split,
                                   pooling=gguf.PoolingType.MEAN, names=NOMIC_NAMES),
    "gpt_oss": Architecture(gguf.MODEL_ARCH.GPT_OSS, hparams=gpt_oss_hparams,
                            split=gpt_oss_split, shape=lambda name, h, config: None,
                            prepare=pair_mxfp4),
    "llama4_text": Architecture(gguf.MODEL_ARCH.LLAMA4, hparams=llama4_hparams,
                                split=llama4_split),
    "qwen3_5_text": Architecture(gguf.MODEL_ARCH.QWEN35, **QWEN35_PARTS),
    "qwen3_5_moe_text": Architecture(gguf.MODEL_ARCH.QWEN35MOE, **QWEN35_PARTS,
                                     names={"moe_intermediate_size": "intermediate_size"}),
    "qwen3_next": Architecture(gguf.MODEL_ARCH.QWEN3NEXT, **QWEN35_PARTS),
    "phi3": Architecture(gguf.MODEL_ARCH.PHI3, hyper=phi3_hyper, hparams=phi3_hparams,
                         extra=phi3_extra, shape=fused_shape),
    "glm4": Architecture(gguf.MODEL_ARCH.GLM4, hyper=glm4_hyper, shape=fused_shape),
    "granite": Architecture(gguf.MODEL_ARCH.GRANITE, permute_qk=True, hyper=granite_hyper,
                            hparams=granite_hparams),
    "granitemoe": Architecture(gguf.MODEL_ARCH.GRANITE_MOE, permute_qk=True,
                               hyper=granite_hyper, hparams=granitemoe_hparams,
                               split=granitemoe_split),
    "granitemoeshared": Architecture(gguf.MODEL_ARCH.GRANITE_MOE, permute_qk=True,
                                     hyper=granite_hyper, hparams=granitemoe_hparams,
                                     split=granitemoe_split),
    "smollm3": Architecture(gguf.MODEL_ARCH.SMOLLM3, permute_qk=True, hparams=smollm3_hparams),
    "seed_oss": Architecture(gguf.MODEL_ARCH.SEED_OSS, hparams=seed_oss_hparams),
    "mixtral": Architecture(gguf.MODEL_ARCH.LLAMA, permute_qk=True, hparams=mixtral_hparams,
                            split=fused_experts_split),      # llama.cpp's llama with experts
    "cohere": Architecture(gguf.MODEL_ARCH.COMMAND_R, hyper=command_r_hyper,
                           hparams=command_r_hparams, split=cohere_split, shape=cohere_shape),
    "cohere2": Architecture(gguf.MODEL_ARCH.COHERE2, hyper=cohere2_hyper, hparams=cohere2_hparams,
                            split=cohere_split, shape=cohere_shape),
    "starcoder2": Architecture(gguf.MODEL_ARCH.STARCODER2, hparams=starcoder2_hparams),
    "exaone4": Architecture(gguf.MODEL_ARCH.EXAONE4, hparams=exaone4_hparams),
}
# multimodal checkpoints (model_type) whose text model we convert: their config.json nests it
# under text_config, their text tensors live under one of TEXT_PREFIXES (as transformers
# saves them, or as the released checkpoints name them), and their other towers are left
# out (convert/mmproj.py writes them)
MULTIMODAL = {"gemma3", "gemma3n", "gemma4", "gemma4_unified", "llava", "mistral3", "qwen2_vl",
              "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"}
TEXT_PREFIXES = ("model.language_model.", "language_model.model.")
HEAD_PREFIXES = ("language_model.lm_head.",)
# a text model saved under its own names beside the tower's ("visual.": Qwen2.5-VL)
PLAIN_TEXT_PREFIXES = ("model.embed_tokens.", "model.layers.", "model.norm.")


def unwrap_multimodal(checkpoint) -> None:
    """Make a multimodal checkpoint look like its text model's own (in place)."""
    config = checkpoint.config
    if config.get("model_type") not in MULTIMODAL:
        return
    if "text_config" not in config or "model_type" not in config["text_config"]:
        raise CheckpointError(f"This {config['model_type']} checkpoint's config.json has no "
                              "text_config naming its text model's type.")
    outer = {k: v for k, v in config.items() if k not in ("text_config", "model_type")}
    checkpoint.config = {**outer, **config["text_config"]}
    text = {}
    for name, entry in checkpoint.tensors.items():
        for prefix, canonical in [*((p, "model.") for p in TEXT_PREFIXES),
                                  *((p, "lm_head.") for p in HEAD_PREFIXES),
                                  *((p, p) for p in PLAIN_TEXT_PREFIXES),
                                  ("lm_head.", "lm_head.")]:
            if name.startswith(prefix):
                text_name = canonical + name[len(prefix):]
                text[text_name] = replace(entry, name=text_name)
                break
    checkpoint.tensors = text


# (model_type, a config flag that makes it another architecture) -> that architecture
VARIANTS = {("gemma3_text", "use_bidirectional_attention"): "gemma3_embedding",
            ("nomic_bert", "moe_every_n_layers"): "nomic_bert_moe"}


def architecture_of(config: dict) -> Architecture:
    kind = config.get("model_type")
    for (base, flag), variant in VARIANTS.items():
        if kind == base and config.get(flag):
            return ARCHITECTURES[variant]
    if kind not in ARCHITECTURES:
        raise CheckpointError(f"The architecture {kind!r} is not supported; supported: "
                              f"{', '.join([*ARCHITECTURES, *sorted(MULTIMODAL)])}.")
    return ARCHITECTURES[kind]


def permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """Rows of each head from [first halves, second halves] to interleaved pairs."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]) \
        .swapaxes(1, 2).reshape(weights.shape)


def transform(arch: Architecture, name: str, data: np.ndarray, h: Hyper) -> np.ndarray:
    if arch.norm_shift and name.endswith("norm.weight"):
        return data + arch.norm_shift
    if arch.permute_qk and name.endswith(("attn_q.weight", "attn_q.bias")):
        return permute(data, h.heads)
    if arch.permute_qk and name.endswith(("attn_k.weight", "attn_k.bias")):
        assert isinstance(h.kv_heads, int)          # per-layer KV heads are Gemma 4's only
        return permute(data, h.kv_heads)
    return data
