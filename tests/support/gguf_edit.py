"""Rewriting a GGUF file the way another converter would have written it (the tests' way to
make Ollama's layouts of a model from ours): keys renamed, dropped or given new values,
tensors renamed or replaced; DeepSeek 2's file in Ollama's layout; a file's tensors read back
as bytes; a value of any type (Typed); a tensor's description changed in place (retensor)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from pyggml.gguf_reader import Header


@dataclass(frozen=True)
class Typed:
    """A value for rewrite() written as this GGUF type whatever the file's (a negative int,
    an array of numbers where one belongs)."""
    value: Any
    kind: gguf.GGUFValueType
    sub_type: gguf.GGUFValueType | None = None


def rewrite(source, target, keys=None, values=None, tensors=None, arch=None):
    """keys: old key -> new key (None drops it); values: key -> new value (a key the file
    lacks, or one keys drops, is added anew: ints as uint32, floats as float32, strings,
    bools, lists as arrays; a Typed value as its type);
    tensors: function (name, float32 array) -> {new name: array} (an empty dict drops it);
    arch: a new general.architecture (its keys renamed by the caller). Returns target."""
    keys, values = keys or {}, values or {}
    header = Header(source)
    writer = gguf.GGUFWriter(str(target), arch or header.metadata["general.architecture"])
    for name, value in header.metadata.items():
        if name in ("general.architecture", "general.alignment") or name.startswith("GGUF."):
            continue
        new = keys.get(name, name)
        if new is None:
            continue
        kind, sub = header.value_types[name]
        value = values.get(name, value)
        if isinstance(value, Typed):
            writer.add_key_value(new, value.value, value.kind, sub_type=value.sub_type)
            continue
        writer.add_key_value(new, value, gguf.GGUFValueType(kind),
                             sub_type=None if sub is None else gguf.GGUFValueType(sub))
    added = {bool: gguf.GGUFValueType.BOOL, int: gguf.GGUFValueType.UINT32,
             float: gguf.GGUFValueType.FLOAT32, str: gguf.GGUFValueType.STRING}
    for name, value in values.items():
        if name in header.metadata and keys.get(name, name) is not None:
            continue                                   # written above, with its own type
        if isinstance(value, Typed):
            writer.add_key_value(name, value.value, value.kind, sub_type=value.sub_type)
        elif isinstance(value, list):
            writer.add_array(name, value)
        else:
            writer.add_key_value(name, value, added[type(value)])
    arrays = {t.name: np.array(t.data, dtype=np.float32).reshape(
        tuple(reversed([int(n) for n in t.shape]))) for t in gguf.GGUFReader(str(source)).tensors}
    for name, array in arrays.items():
        for new, data in (tensors(name, array, arrays) if tensors else {name: array}).items():
            writer.add_tensor(new, np.ascontiguousarray(data, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def deepseek2_ollama_layout(source, target):
    """source (a deepseek2 GGUF of ours) as Ollama's converter writes it: kv_b whole,
    head_count_kv the heads, key and value lengths per expanded head, no *_mla keys."""
    meta = Header(source).metadata
    arch = meta["general.architecture"]
    heads = int(meta[f"{arch}.attention.head_count"])
    key, value = (int(meta[f"{arch}.attention.{k}_length_mla"]) for k in ("key", "value"))
    keys = {name: None for name in meta if name.endswith("_mla")}
    values = {f"{arch}.attention.head_count_kv": heads, f"{arch}.attention.key_length": key,
              f"{arch}.attention.value_length": value}

    def expanded(name, array, arrays):
        if name.endswith("attn_v_b.weight"):
            return {}
        if not name.endswith("attn_k_b.weight"):
            return {name: array}
        k = array.transpose(0, 2, 1)                                       # (H, nope, R)
        v = arrays[name.replace("attn_k_b", "attn_v_b")]                   # (H, Dv, R)
        return {name.replace("attn_k_b", "attn_kv_b"):
                np.concatenate([k, v], axis=1).reshape(-1, k.shape[-1])}

    return rewrite(source, target, keys=keys, values=values, tensors=expanded)


def renamed_architecture(source, target, arch: str, values=None, dropped=()):
    """source with its architecture named arch and every key of the old one under the new
    name; values: old key -> new value; dropped: keys (their part after the architecture's
    name) left out. Returns target."""
    meta = Header(source).metadata
    old = meta["general.architecture"]
    keys = {name: None if name[len(old) + 1:] in dropped else arch + name[len(old):]
            for name in meta if name.startswith(old + ".")}
    return rewrite(source, target, keys=keys, values=values, arch=arch)


def glm4moelite_ollama_layout(source, target, latent: bool = True):
    """source (a deepseek2 GGUF of ours, GLM-4.7-Flash's kind) as Ollama's converter wrote
    it, architecture glm4moelite: KV heads the heads, key_length and value_length per head
    and the *_mla keys the latent row's (llama.cpp's meanings swapped); before it split kv_b
    (latent False), kv_b whole and no *_mla keys, as deepseek2_ollama_layout."""
    if not latent:
        expanded = deepseek2_ollama_layout(source, Path(target).with_suffix(".expanded"))
        return renamed_architecture(expanded, target, "glm4moelite")
    meta = Header(source).metadata
    arch = meta["general.architecture"]
    attention = f"{arch}.attention."
    swapped = {f"{attention}{kind}_length{mla}": meta[f"{attention}{kind}_length{other}"]
               for kind in ("key", "value") for mla, other in (("", "_mla"), ("_mla", ""))}
    return renamed_architecture(source, target, "glm4moelite", values={
        **swapped, f"{attention}head_count_kv": meta[f"{attention}head_count"]})


def olmo3_ollama_layout(source, target):
    """source (an olmo2 GGUF of ours with a window: OLMo 3) as Ollama's converter wrote OLMo
    3, architecture olmo3: the same tensors, its keys under that name, without the ones it
    does not write (head sizes, rotated dimensions, the vocabulary's size)."""
    return renamed_architecture(source, target, "olmo3", dropped={
        "attention.key_length", "attention.value_length", "rope.dimension_count",
        "vocab_size"})


def tensors_of(path) -> dict:
    header = Header(path)
    data = np.memmap(path, np.uint8, mode="r")
    return {t.name: bytes(data[t.offset:t.offset + t.n_bytes]) for t in header.tensors}


def retensor(source, target, name: str, n_dims=None, ne=None, offset=None):
    """source with one tensor's description changed in place, byte for byte (a malformed
    file no writer makes): its dimension count, its ne (ggml order, as many as it has) or
    its offset. Returns target."""
    data = bytearray(Path(source).read_bytes())
    encoded = name.encode()
    at = data.index(struct.pack("<Q", len(encoded)) + encoded) + 8 + len(encoded)
    dims = struct.unpack_from("<I", data, at)[0]
    if n_dims is not None:
        struct.pack_into("<I", data, at, n_dims)
    for i, n in enumerate(ne or ()):
        struct.pack_into("<Q", data, at + 4 + 8 * i, n)
    if offset is not None:
        struct.pack_into("<Q", data, at + 4 + 8 * dims + 4, offset)
    Path(target).write_bytes(bytes(data))
    return target
