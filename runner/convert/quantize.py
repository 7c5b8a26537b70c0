"""GGUF -> a smaller GGUF, through ggml's quantization, with llama.cpp's mixture rules.

    python -m runner quantize IN.gguf OUT.gguf --type Q4_K_M

Which tensors get which type follows llama.cpp's llama_tensor_get_type for the types here:
1-D tensors (norms, biases, rope factors), expert routers, the few matrices llama.cpp
leaves alone (KEPT) and MXFP4 experts (gpt-oss's as released; llama.cpp refuses to
requantize them) keep their type; the output matrix (or the tied embeddings, Gemma 3n's
per-layer ones with them) gets Q6_K (Q8_0 stays Q8_0); with _M, attn_v (and DeepSeek's
attn_kv_b and a fused attn_qkv, which llama.cpp ranks with it) and ffn_down get Q6_K in
the places use_more_bits picks (the first and last eighth, and every third between):
attn_v-like tensors by their place among the file's (by layer; where some layers have none,
as Gemma 4's full layers whose V is K, that is not the layer's index), ffn_down by layer
index (dense, expert and shared-expert tensors of one layer alike) in mixture-of-experts
models, as Ollama's MoE-aware counting does. A model of exactly 8 experts (llama.cpp's
rule, made for Mixtral) keeps attn_k, attn_v, attn_qkv and attn_kv_b in Q8_0 and, with
Q4_K_M, attn_output in Q5_K. A K-quant needs rows of a multiple of 256: other rows fall
back as llama.cpp's do (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; DeepSeek's attn_k_b,
rows of 128, becomes Q5_0), and rows that are not a multiple of 32 become F16.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from tqdm import tqdm

import pyggml
from pyggml.gguf_reader import Header
from pyggml.numpy_interop import dequantize


@dataclass(frozen=True)
class Mixture:
    base: str
    file_type: gguf.LlamaFileType
    more_bits: bool = False      # the _M rule for attn_v and ffn_down
    wider_output: bool = False   # attn_output in Q5_K when the model has 8 experts


MIXTURES = {
    "Q4_0": Mixture("Q4_0", gguf.LlamaFileType.MOSTLY_Q4_0),
    "Q4_1": Mixture("Q4_1", gguf.LlamaFileType.MOSTLY_Q4_1),
    "Q5_0": Mixture("Q5_0", gguf.LlamaFileType.MOSTLY_Q5_0),
    "Q8_0": Mixture("Q8_0", gguf.LlamaFileType.MOSTLY_Q8_0),
    "Q6_K": Mixture("Q6_K", gguf.LlamaFileType.MOSTLY_Q6_K),
    "Q4_K_M": Mixture("Q4_K", gguf.LlamaFileType.MOSTLY_Q4_K_M, more_bits=True,
                      wider_output=True),
    "Q5_K_M": Mixture("Q5_K", gguf.LlamaFileType.MOSTLY_Q5_K_M, more_bits=True),
}
K_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
FLOATS = {"F32", "F16", "BF16"}
# types a file may hold already that stay as they are: gpt-oss's MXFP4 experts, as released
# (llama.cpp refuses to quantize such a file unless told to requantize them)
PASS_THROUGH = ("MXFP4",)
# kept in their type, as llama.cpp keeps them: expert routers, Gemma 3n's small AltUp and
# Laurel matrices and its per-layer projection, BERT's position and token-type embeddings,
# a recurrent layer's convolution kernel (small, and ggml's ssm_conv reads it as F32)
KEPT = ("ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
        "position_embd.weight", "token_types.weight", "ssm_conv1d.weight")
# the embeddings that stand in for the output matrix when the model ties it (Gemma 3n's
# per-layer ones are ranked with them)
EMBEDDINGS = ("token_embd.weight", "per_layer_token_embd.weight")
LAYER = re.compile(r"^blk\.(\d+)\.")
VALUE_LIKE = re.compile(r"\.(attn_v|attn_qkv|attn_kv_b)\.weight$")
EIGHT_EXPERTS = 8


def use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def value_ranks(names) -> dict[str, tuple[int, int]]:
    """Each attn_v-like tensor's place among those of the file and their count, in
    llama.cpp's order (by layer, then name): its i_attention_wv and n_attention_wv."""
    found = sorted((int(layer.group(1)), name) for name in names
                   if VALUE_LIKE.search(name) and (layer := LAYER.match(name)))
    return {name: (i, len(found)) for i, (_, name) in enumerate(found)}


def tensor_type(name: str, shape: tuple[int, ...], mixture: Mixture, layers: int,
                has_output: bool, experts: int = 0, source: str = "F32",
                rank: tuple[int, int] | None = None) -> str:
    """The ggml type name for a tensor (shape in numpy order, its type source) of a model
    with layers layers and experts experts a layer; rank: an attn_v-like tensor's
    value_ranks (None: its layer's index among the layers)."""
    if len(shape) < 2 or not name.endswith(".weight") or name.endswith("_norm.weight") or \
            any(part in name for part in KEPT) or source in PASS_THROUGH:
        return source
    kind = mixture.base
    if name == "output.weight" or (not has_output and name in EMBEDDINGS):
        kind = "Q8_0" if kind == "Q8_0" or shape[-1] % 256 else "Q6_K"
    elif mixture.more_bits and (layer := LAYER.match(name)) and \
            re.search(r"\.(attn_v|attn_qkv|attn_kv_b|ffn_down(_exps|_shexp)?)\.weight$", name):
        if use_more_bits(*(rank or (int(layer.group(1)), layers))):
            kind = "Q6_K"
    if experts == EIGHT_EXPERTS and re.search(r"\.attn_(k|v|qkv|kv_b)\.weight$", name):
        kind = "Q8_0"
    elif experts == EIGHT_EXPERTS and mixture.wider_output and \
            name.endswith(".attn_output.weight"):
        kind = "Q5_K"
    if kind.endswith("_K") and shape[-1] % 256:
        kind = K_FALLBACK[kind]
    if shape[-1] % pyggml.GGMLType[kind].block_size:
        kind = "F16"                    # rows no block type divides, as llama.cpp does
    return kind


def copy_metadata(header: Header, writer: gguf.GGUFWriter) -> None:
    """Every key of header into writer, with its own value types, but those a writer sets
    itself (the architecture, the alignment) and the file type, which names what the new
    file's tensors hold."""
    for key, value in header.metadata.items():
        if key in ("general.architecture", "general.file_type", "general.alignment") or \
                key.startswith("GGUF."):
            continue
        kind, item = header.value_types[key]
        writer.add_key_value(key, value, gguf.GGUFValueType(kind),
                             sub_type=None if item is None else gguf.GGUFValueType(item))


def quantize_file(source, target, type_name: str, progress: bool = True) -> Path:
    if type_name not in MIXTURES:
        raise ValueError(f"Unknown quantization type {type_name!r}; choose one of "
                         f"{', '.join(MIXTURES)}.")
    mixture = MIXTURES[type_name]
    header = Header(source)
    arch = header.metadata.get("general.architecture", "")    # "": none, as the writer takes it
    layers = int(header.metadata.get(f"{arch}.block_count", 0))
    experts = int(header.metadata.get(f"{arch}.expert_count", 0))
    names = {t.name for t in header.tensors}
    ranks = value_ranks(names)
    plan = []
    for info in header.tensors:
        shape = tuple(reversed(info.ne))
        source_type = pyggml.dtypes.type_name(info.type).upper()
        kind = tensor_type(info.name, shape, mixture, layers, "output.weight" in names,
                           experts, source_type, ranks.get(info.name))
        if source_type not in FLOATS and kind != source_type:
            raise ValueError(f"The tensor {info.name} is already {source_type}; quantize a "
                             "file of F32, F16 or BF16 weights.")
        plan.append((info, shape, kind))
    writer = gguf.GGUFWriter(str(target), arch)
    copy_metadata(header, writer)
    writer.add_file_type(mixture.file_type)
    for info, shape, kind in plan:
        ggml_type = pyggml.GGMLType[kind]
        nbytes = ggml_type.row_size(shape[-1]) * int(np.prod(shape[:-1]))
        writer.add_tensor_info(info.name, shape, np.dtype(np.float32), nbytes,
                               raw_dtype=gguf.GGMLQuantizationType(int(ggml_type)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for info, shape, kind in tqdm(plan, desc=f"quantizing to {type_name}", unit="tensor",
                                  disable=not progress):
        if kind in PASS_THROUGH:
            writer.write_tensor_data(np.frombuffer(header.map, dtype=np.uint8,
                                                   count=info.n_bytes, offset=info.offset))
            continue
        values = _values(header, info, shape)
        writer.write_tensor_data(values.astype(np.float32) if kind == "F32" else
                                 pyggml.quants.quantize(values, kind))
    writer.close()
    return Path(target)


def _values(header: Header, info, shape) -> np.ndarray:
    raw = np.frombuffer(header.map, dtype=np.uint8, count=info.n_bytes, offset=info.offset)
    if info.type == pyggml.GGMLType.F32:
        return raw.view(np.float32).reshape(shape)
    return dequantize(raw, pyggml.GGMLType(info.type), shape)
