"""The text models of Qwen-VL checkpoints (Qwen2.5-VL, Qwen3-VL and its MoE): converted to
llama.cpp's qwen2vl / qwen3vl / qwen3vlmoe, with its M-RoPE sections, they give
transformers' logits for a text prompt (the whole multimodal model, no image: every axis of
a text position is the position). Their images: ../vision; a text file alone refuses
them clearly."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
import runner
from runner.convert import convert
from runner.engine.batch import Batch
from runner.models import model_class

from tests.support.architectures import QWEN_VL_ARCHITECTURE_OF, QWEN_VL_OLLAMA_ARCHITECTURE
from tests.support.hf_tiny import SHAPE, tokenizer
from tests.support.parity import PROMPT, executor

# checkpoint kind -> transformers' config and model classes (the GGUF architecture:
# QWEN_VL_ARCHITECTURE_OF)
KINDS = {"qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
         "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
         "qwen3_vl_moe": ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration")}
# head_dim 16: 8 rotated pairs a head, split over time, rows and columns
SECTIONS = {"qwen2_5_vl": [2, 3, 3], "qwen3_vl": [4, 2, 2], "qwen3_vl_moe": [4, 2, 2]}
VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
              spatial_merge_size=2, temporal_patch_size=2)


def checkpoint(kind: str, directory):
    import torch
    import transformers

    config_name, model_name = KINDS[kind]
    tok = tokenizer("qwen2")
    text = dict(SHAPE, vocab_size=len(tok), head_dim=16, tie_word_embeddings=False,
                eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "mrope_section": SECTIONS[kind]})
    vision = dict(VISION, out_hidden_size=SHAPE["hidden_size"])
    if kind == "qwen2_5_vl":
        vision.update(fullatt_block_indexes=[0], window_size=16)
    else:
        text["rope_parameters"]["mrope_interleaved"] = True
        vision.update(deepstack_visual_indexes=[0], num_position_embeddings=64)
    if kind == "qwen3_vl_moe":
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                    decoder_sparse_step=1)
    config = getattr(transformers, config_name)(text_config=text, vision_config=vision)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.copy_(1.0 + 0.3 * torch.randn_like(value))
            elif "experts" in name or "gate" in name:
                value.copy_(0.1 * torch.randn_like(value))
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory, model


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    cache = {}

    def get(kind):
        if kind not in cache:
            directory = tmp_path_factory.mktemp(kind)
            hf, model = checkpoint(kind, directory / "hf")
            cache[kind] = (hf, model, convert(hf, directory / "model.gguf", "f32",
                                              progress=False))
        return cache[kind]

    return get


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_text_model_gives_transformers_logits(made, backend, kind):
    import torch

    hf, model, path = made(kind)
    meta = pyggml.GGUFFile(path).metadata
    arch = QWEN_VL_ARCHITECTURE_OF[kind]
    assert meta["general.architecture"] == arch
    assert list(meta[f"{arch}.rope.dimension_sections"]) == SECTIONS[kind] + [0]
    loaded, run = executor(path, backend)
    assert type(loaded.model) is model_class(arch)
    ids = loaded.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([ids])).logits[0].numpy()
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1e-3
    assert (ours.argmax(-1) == expected.argmax(-1)).all()


def test_a_text_file_refuses_images_clearly(made):
    _, _, path = made("qwen3_vl")
    loaded = runner.load(path, num_ctx=64, threads=2)
    try:
        with pytest.raises(ValueError, match="reads text only"):
            loaded.generate("[img-0]", images=[b"\x89PNG"], stream=False)
    finally:
        loaded.close()


def test_ollamas_qwen25vl_text_reads_as_llama_cpps(made, backend, tmp_path):
    """Ollama's qwen25vl: llama.cpp's qwen2vl text under its own name and M-RoPE key (its
    tower: ../vision/test_ollama_files.py)."""
    from tests.support.gguf_edit import rewrite

    _, _, path = made("qwen2_5_vl")
    meta = pyggml.GGUFFile(path).metadata
    keys = {key: QWEN_VL_OLLAMA_ARCHITECTURE + key[len("qwen2vl"):] for key in meta
            if key.startswith("qwen2vl.")}
    keys["qwen2vl.rope.dimension_sections"] = "qwen25vl.rope.mrope_section"
    single = rewrite(path, tmp_path / "single.gguf", arch=QWEN_VL_OLLAMA_ARCHITECTURE, keys=keys)
    ids = None
    logits = []
    for file in (path, single):
        loaded, run = executor(file, backend)
        ids = ids or loaded.tokenizer.encode(PROMPT, add_special=True)
        logits.append(run.logits(Batch.of_sequence(ids, 0, all_logits=True)))
    np.testing.assert_array_equal(logits[0], logits[1])


def test_a_single_file_with_an_unread_tower_runs_its_text_and_says_why(made, tmp_path):
    """Ollama's qwen3vl files: a tower (v.*, qwen3vl.vision.*) in a layout this runner does
    not read yet; the text runs, an image is refused with the reason."""
    from runner.models.vision import ollama
    from runner.serve.library.entry import SINGLE_FILE_VISION

    from tests.support.gguf_edit import rewrite

    _, _, path = made("qwen3_vl")

    def with_tower(name, data, arrays):
        found = {name: data}
        if name == "output_norm.weight":
            found["v.patch_embd.weight"] = np.zeros((8, 3, 4, 4), np.float32)
        return found

    single = rewrite(path, tmp_path / "single.gguf", values={"qwen3vl.vision.block_count": 1},
                     tensors=with_tower)
    model = runner.load(single, num_ctx=64, threads=2)
    try:
        assert model.generate("Hi", stream=False, num_predict=2, temperature=0)
        with pytest.raises(ValueError, match="layout this runner does not read yet"):
            model.generate("[img-0]", images=[b"\x89PNG"], stream=False)
    finally:
        model.close()
    assert set(SINGLE_FILE_VISION) == set(ollama.LAYOUTS)   # the server's copy of the list


PLAIN = {"qwen2vl": "qwen2", "qwen3vl": "qwen3", "qwen3vlmoe": "qwen3moe"}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_llama_cpp_runs_the_converted_text_model(made, backend, kind, tmp_path):
    """llama.cpp loads our file. Its VL graphs depart from transformers on a text prompt
    (measured 3.8e-3, 1.1e-2 and 1.6e-2 of logit for the three, the first token included,
    where ours is 3e-6 from transformers); the same weights labelled as the plain text
    architecture run bit for bit as ours, so the file's tensors are what llama.cpp reads."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from tests.support.gguf_edit import rewrite

    _, _, path = made(kind)
    loaded, run = executor(path, backend)
    ids = loaded.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    arch = QWEN_VL_ARCHITECTURE_OF[kind]
    plain = rewrite(path, tmp_path / "plain.gguf", arch=PLAIN[arch], keys={
        key: PLAIN[arch] + key[len(arch):] for key in pyggml.GGUFFile(path).metadata
        if key.startswith(arch + ".")})
    for file, bound in ((path, 0.05), (plain, 0.0)):
        llm = llama_cpp.Llama(model_path=str(file), verbose=False, n_threads=2, n_ctx=128,
                              logits_all=True, type_k=0, type_v=0, flash_attn=False)
        llm.eval(ids)
        theirs = np.array(llm.scores[:len(ids)])
        assert np.abs(ours - theirs).max() <= bound, file
