"""Ollama's single-file Gemma 4 with both towers inside (audio under gemma4.audio.* keys and
Ollama's six names of its own): written here from our model and mmproj, then loaded without
a projector, it hears and sees exactly as the pair does."""

from __future__ import annotations

import gguf
import numpy as np

import runner

from tests.support import hf_audio
from tests.support.hf_vision import png
from tests.support.ollama_files import single_file

# llama.cpp's audio name -> Ollama's (the runner maps them back)
TO_OLLAMA = {"attn_pre_norm": "ln1", "attn_post_norm": "ln2", "ln2": "layer_pre_norm",
             "attn_k_rel": "linear_pos"}
TOP = {"a.pre_encode.out.": "mm.a.fc.", "a.input_projection.": "a.pre_encode.out."}


def ollama_name(name: str, family: str) -> str:
    parts = name.split(".")
    if name.startswith("a.blk.") and parts[3] in TO_OLLAMA:
        return ".".join(parts[:3] + [TO_OLLAMA[parts[3]]] + parts[4:])
    for ours, theirs in TOP.items():
        if name.startswith(ours):
            return theirs + name[len(ours):]
    return name


def test_a_single_file_hears_and_sees_as_the_pair(audio_model, loaded, tmp_path):
    path = single_file(audio_model["model"], audio_model["mmproj"], tmp_path / "single.gguf",
                       "gemma4", rename=ollama_name)
    names = {t.name for t in gguf.GGUFReader(path).tensors}
    assert "a.blk.0.linear_pos.weight" in names and "mm.a.fc.bias" in names
    single = runner.load(path, num_ctx=2048, threads=2, kv_cache_type="f32")
    try:
        assert set(single.multimodal.encoders) == {"image", "audio"}
        clip = hf_audio.wav(hf_audio.tone(2.0, 16000, seed=20), 16000)
        ours, = single.multimodal.media(clip)
        pair, = loaded.multimodal.media(clip)
        assert np.array_equal(ours.embedding(), pair.embedding())
        image = png(5, 20, 12)
        assert np.array_equal(single.multimodal.media(image)[0].embedding(),
                              loaded.multimodal.media(image)[0].embedding())
    finally:
        single.close()
