"""gpt-oss beyond the common parity tests: checkpoints that hold their experts in MXFP4 (as
the released ones do) convert without a round trip to float, ggml reads back exactly the
weights the blocks encode, and the model computes transformers' logits from those weights
(its experts' matrix products quantize activations to Q8_0: within 3e-2 here). Their
quantization and llama.cpp's reading of the file are in test_llamacpp_parity.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pyggml
from runner.convert import CheckpointError, convert
from runner.convert.checkpoint import Checkpoint
from runner.engine.batch import Batch

from tests.support.architectures import GPT_OSS_OLLAMA_ARCHITECTURE
from tests.support.gguf_edit import rewrite
from tests.support.hf_released import mxfp4_checkpoints
from tests.support.hf_tiny import checkpoint
from tests.support.parity import PROMPT, executor, reference


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gpt_oss")
    mxfp4, decoded = mxfp4_checkpoints(directory)
    return {"mxfp4": convert(mxfp4, directory / "mxfp4.gguf", "f32", progress=False),
            "decoded": convert(decoded, directory / "decoded.gguf", "f32", progress=False),
            "hf": decoded}


def test_mxfp4_experts_pass_through_and_read_back_exactly(converted):
    with pyggml.GGUFFile(converted["mxfp4"]) as packed, \
            pyggml.GGUFFile(converted["decoded"]) as plain:
        experts = [name for name in packed.tensors_info if name.endswith("_exps.weight")]
        assert len(experts) == 3 * 4                   # gate, up, down in each of 4 layers
        for name in experts:
            info, shape = packed.tensors_info[name], packed.tensor_shape(name)
            assert packed.tensor_type(name) == pyggml.GGMLType.MXFP4, name
            assert shape == plain.tensor_shape(name), name
            raw = packed.data[info.offset:info.offset + pyggml.GGMLType.MXFP4.row_size(
                int(np.prod(shape)))]
            np.testing.assert_array_equal(
                pyggml.dequantize(raw, pyggml.GGMLType.MXFP4, shape), plain.read(name),
                err_msg=name)


def test_mxfp4_logits_match_transformers_on_the_weights_they_encode(converted, backend):
    model, run = executor(converted["mxfp4"], backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    expected = reference(converted["hf"], ids)
    assert np.abs(ours - expected).max() < 3e-2
    assert (ours.argmax(1) == expected.argmax(1)).mean() > 0.9


def test_mxfp4_blocks_without_their_scales_are_refused(tmp_path):
    from safetensors.numpy import save_file

    mxfp4, _ = mxfp4_checkpoints(tmp_path)
    tensors = {name: entry.load() for name, entry in Checkpoint(mxfp4).tensors.items()}
    del tensors["model.layers.0.mlp.experts.down_proj_scales"]
    save_file(tensors, str(mxfp4 / "model.safetensors"))
    with pytest.raises(CheckpointError, match="down_proj lacks its scales"):
        convert(mxfp4, tmp_path / "bad.gguf", "f32", progress=False)


def test_a_config_llama_cpp_cannot_run_is_refused(tmp_path):
    hf = checkpoint("gpt_oss", tmp_path / "hf", swiglu_limit=5.0)
    with pytest.raises(CheckpointError, match="alpha or limit"):
        convert(hf, tmp_path / "x.gguf", "f32", progress=False)
    config = json.loads((hf / "config.json").read_text())
    config.update(swiglu_limit=7.0, layer_types=["full_attention"] * 4)
    (hf / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="layer pattern"):
        convert(hf, tmp_path / "y.gguf", "f32", progress=False)


def test_quantize_keeps_the_mxfp4_experts(converted, backend, tmp_path):
    from runner.convert.quantize import quantize_file

    quantized = quantize_file(converted["mxfp4"], tmp_path / "q.gguf", "Q8_0", progress=False)
    with pyggml.GGUFFile(converted["mxfp4"]) as source, pyggml.GGUFFile(quantized) as result:
        for name, info in result.tensors_info.items():
            before = source.tensors_info[name]
            if name.endswith("_exps.weight"):
                assert result.tensor_type(name) == pyggml.GGMLType.MXFP4, name
                assert bytes(result.data[info.offset:info.offset + info.n_bytes]) == \
                    bytes(source.data[before.offset:before.offset + before.n_bytes]), name
            elif name.endswith("attn_q.weight"):
                assert result.tensor_type(name) == pyggml.GGMLType.Q8_0
    model, run = executor(quantized, backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    expected = reference(converted["hf"], ids)      # the rest in Q8_0 moves a tiny model's
    assert np.corrcoef(ours.ravel(), expected.ravel())[0, 1] > 0.99          # logits by 0.3


# gpt-oss's released rope_scaling (and head size): YaRN 32x over 4096 positions, its
# correction range not rounded to whole dimensions (truncate false)
RELEASED_YARN = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                 "truncate": False, "rope_theta": 150000.0,
                 "original_max_position_embeddings": 4096}


def test_the_released_yarn_converts_as_llama_cpp_converts_it(tmp_path, backend):
    """truncate false converts to the file truncate true gives (llama.cpp's converter does
    not read it; ggml always rounds the correction range, here dimensions 8.1-17.4 of 32 to
    8-18): the logits are transformers' with truncate true, and differ from its own by the
    rounding (docs/models.md: measured 1.2e-3 and 2.2e-3 here, up to 0.6 over 4,000
    tokens)."""
    shape = dict(head_dim=64, max_position_embeddings=131072)
    released = checkpoint("gpt_oss", tmp_path / "released", rope_parameters=RELEASED_YARN,
                          **shape)
    rounded = checkpoint("gpt_oss", tmp_path / "rounded", **shape,
                         rope_parameters=dict(RELEASED_YARN, truncate=True))
    paths = [convert(hf, tmp_path / f"{hf.name}.gguf", "f32", progress=False)
             for hf in (released, rounded)]
    with pyggml.GGUFFile(paths[0]) as ours, pyggml.GGUFFile(paths[1]) as theirs:
        named = {"general.name"}                        # the checkpoints' folders' names
        assert {k: v for k, v in ours.metadata.items() if k not in named} == \
            {k: v for k, v in theirs.metadata.items() if k not in named}
    model, run = executor(paths[0], backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - reference(rounded, ids)).max() < 1e-5
    assert 1e-4 < np.abs(ours - reference(released, ids)).max() < 5e-3


def ollama_layout():
    """Our tensors as Ollama's converter writes OpenAI's own checkpoints: Q, K and V in one
    attn_qkv (weight and bias); as its older files name them, attn_out, attn_sinks and
    ffn_norm."""
    def rename(name, array, arrays):
        if ".attn_q." in name:
            part = name.split(".attn_q.")
            stacked = np.concatenate([arrays[f"{part[0]}.attn_{x}.{part[1]}"]
                                      for x in "qkv"], axis=0)
            return {f"{part[0]}.attn_qkv.{part[1]}": stacked}
        if ".attn_k." in name or ".attn_v." in name:
            return {}
        return {name.replace("attn_output", "attn_out").replace("attn_sinks.weight", "attn_sinks")
                .replace("post_attention_norm", "ffn_norm"): array}
    return rename


def test_ollamas_layout_reads_alike(converted, backend, tmp_path):
    plain = converted["decoded"]
    with pyggml.GGUFFile(plain) as f:
        keys = {k: "gptoss" + k[len("gpt-oss"):] for k in f.metadata if k.startswith("gpt-oss.")}
    ollama = rewrite(plain, tmp_path / "ollama.gguf", keys=keys, arch=GPT_OSS_OLLAMA_ARCHITECTURE,
                     tensors=ollama_layout())
    with pyggml.GGUFFile(ollama) as f:
        assert "blk.0.attn_qkv.weight" in f.tensors_info and "blk.0.attn_sinks" in f.tensors_info
    logits = []
    for path in (plain, ollama):
        model, run = executor(path, backend)
        ids = model.tokenizer.encode(PROMPT, add_special=True)
        logits.append(run.logits(Batch.of_sequence(ids, 0, all_logits=True)))
    assert np.abs(logits[0] - logits[1]).max() < 1e-5


@pytest.mark.server
def test_mxfp4_experts_compute_on_an_rpc_server_as_on_the_cpu(converted):
    """Every layer on a ggml RPC server (the placement path a GPU takes): the MXFP4 experts
    reach its device as blocks and give the CPU's logits, bit for bit."""
    import runner

    from tests.support.rpc_servers import rpc_server

    logits = {}
    with rpc_server(threads=2) as server:
        for where, devices in (("cpu", dict(num_gpu=0)),
                               ("rpc", dict(rpc=[server.endpoint], num_gpu=-1))):
            model = runner.load(converted["mxfp4"], num_ctx=64, repack=False, threads=2,
                                **devices)
            try:
                names = {d.name[:3] for d in model.placement.layers}
                assert names == ({"CPU"} if where == "cpu" else {"RPC"})
                assert model.placement.memory["blk.0.ffn_down_exps.weight"].device_name[:3] \
                    == names.pop()
                ids = model.tokenize(PROMPT, add_special=True)
                logits[where] = model.executor.logits(Batch.of_sequence(ids, 0,
                                                                        all_logits=True))
            finally:
                model.close()
    np.testing.assert_array_equal(logits["rpc"], logits["cpu"])
