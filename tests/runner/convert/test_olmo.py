"""OLMo 3 beyond the common parity tests: its sliding layers as layer_types names them,
written one bool a layer and read as llama.cpp's olmo2 reads them; Ollama's files (their
architecture olmo3, olmo2's keys under that name) read as the same model."""

from __future__ import annotations

import numpy as np

import pyggml
from runner.convert import convert
from runner.engine.batch import Batch
from runner.models import model_class

from tests.support.architectures import OLMO3_OLLAMA_ARCHITECTURE
from tests.support.gguf_edit import olmo3_ollama_layout
from tests.support.hf_tiny import OLMO3_YARN, checkpoint
from tests.support.parity import PROMPT, executor, reference

SLIDING, FULL = "sliding_attention", "full_attention"


def test_the_sliding_layers_are_those_layer_types_names(tmp_path, backend):
    """Not three of every four: the first and last layers global, the two between sliding
    (a window of 8 over a prompt longer than it)."""
    kinds = [FULL, SLIDING, SLIDING, FULL]
    hf = checkpoint("olmo3", tmp_path / "hf", layer_types=kinds)
    path = convert(hf, tmp_path / "olmo3.gguf", "f32", progress=False)
    with pyggml.GGUFFile(path) as f:
        assert f.metadata["olmo2.attention.sliding_window_pattern"] == \
            [kind == SLIDING for kind in kinds]
    model, run = executor(path, backend)
    assert [model.model.config.window_of(i) for i in range(4)] == [None, 8, 8, None]
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    assert len(ids) > 8
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - reference(hf, ids)).max() < 1e-3


def test_ollamas_olmo3_files_read_as_the_same_model(tmp_path, backend):
    """OLMo 3 with YaRN on its global layers, written as Ollama wrote it: our file's logits
    to the bit."""
    hf = checkpoint("olmo3", tmp_path / "hf", **OLMO3_YARN)
    ours = convert(hf, tmp_path / "ours.gguf", "f32", progress=False)
    ollama = olmo3_ollama_layout(ours, tmp_path / "ollama.gguf")
    logits = []
    for path in (ours, ollama):
        model, run = executor(path, backend)
        ids = model.tokenizer.encode(PROMPT, add_special=True)
        logits.append(run.logits(Batch.of_sequence(ids, 0, all_logits=True)))
    assert model.metadata["general.architecture"] == OLMO3_OLLAMA_ARCHITECTURE
    assert type(model.model) is model_class(OLMO3_OLLAMA_ARCHITECTURE)
    assert model.model.config.rope.ext_factor and not model.metadata.get("olmo3.vocab_size")
    assert np.array_equal(logits[0], logits[1])
