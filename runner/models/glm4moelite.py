"""GLM-4.7-Flash as Ollama's converter wrote it (architecture glm4moelite): DeepSeek 2's
model (deepseek2.py) under another name, its keys under that name, read as llama.cpp reads
those files through Ollama's compatibility layer.

Files written since Ollama split kv_b into k_b and v_b hold the key and value lengths with
llama.cpp's meanings swapped: attention.key_length and value_length per head, the *_mla
keys the latent row's (rank + rotated, rank), and the KV heads as the heads. Read swapped
back, with one KV head: the latent form. Earlier files hold kv_b whole and no *_mla keys,
which is deepseek2's expanded form as it stands."""

from __future__ import annotations

from .base import ATTENTION, Metadata
from .contract import register
from .deepseek2 import Deepseek2, Deepseek2Config

ARCH = "glm4moelite"
# each per-head length and the latent row's, whose meanings Ollama's files swap
SWAPPED = ((ATTENTION.KEY_LENGTH, ATTENTION.KEY_LENGTH_MLA),
           (ATTENTION.VALUE_LENGTH, ATTENTION.VALUE_LENGTH_MLA))


def as_llama_cpp_reads(meta: dict) -> dict:
    """meta with the lengths Ollama's latent files swap swapped back (each checked under
    the name the file gives it) and one KV head; an expanded file's as it is."""
    m = Metadata(meta, ARCH)
    if not all(m.has(mla) for _, mla in SWAPPED):
        return meta
    read = dict(meta)
    for per_head, latent in SWAPPED:
        read[m.name(per_head)], read[m.name(latent)] = m.require(latent), m.require(per_head)
    read[m.name(ATTENTION.HEAD_COUNT_KV)] = 1
    return read


@register(ARCH)
class Glm4MoeLite(Deepseek2):
    @classmethod
    def config_of(cls, meta: dict):
        return Deepseek2Config.from_metadata(as_llama_cpp_reads(meta), ARCH)
