"""Layers on other devices: both real models with every layer, and with half of them, on a
real ggml RPC server on loopback (the path a GPU takes: weights, cache and compute in another
device's memory, activations copied between devices), against the CPU alone.

The CPU runs without repacked weights here: an RPC server's memory is not host memory, so it
computes with the plain layouts, and the two must agree to the bit."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
import runner
from pyggml.gguf_weights import repacked_layout
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import CausalCache
from runner.loading.devices import Backends
from runner.loading.placement import Placer

from tests.support.rpc_servers import rpc_server

from ..conftest import MODELS

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def server():
    with rpc_server(threads=2) as running:
        yield running


@pytest.fixture(scope="module")
def on_cpu(model_paths):
    """Greedy text and prompt logits of each model on the CPU alone."""
    found = {}
    for key in MODELS:
        model = runner.load(model_paths[key], num_ctx=128, repack=False, threads=2,
                            flash_attn=False)
        found[key] = greedy(model), prompt_logits(model)
        model.close()
    return found


def greedy(model, prompt: str = PROMPT, n: int = 24) -> str:
    return model.generate(prompt, stream=False, temperature=0, num_predict=n)


def prompt_logits(model) -> np.ndarray:
    """All logits of the prompt, through a second executor on the model's own devices (with
    backends of its own: the model's batch loop may still be computing a dropped step)."""
    tokens = model.tokenize(PROMPT, add_special=True)
    shapes = model.loaded.model.cache_layers()
    backends = Backends(threads=2)
    kv = CausalCache(shapes, 64, [backends[d] for d in model.placement.layers[:len(shapes)]])
    with pyggml.Scheduler(backends.ordered(model.placement.devices)) as scheduler:
        logits = Executor(model.loaded.model, kv, scheduler).logits(
            Batch.of_sequence(tokens, 0, all_logits=True))
    kv.close()
    backends.close()
    return logits


@pytest.mark.parametrize("share", ["all", "half"])
@pytest.mark.parametrize("key", MODELS)
def test_layers_on_an_rpc_server_compute_what_the_cpu_computes(model_paths, server, on_cpu,
                                                               key, share):
    layers = runner.api.open_model(model_paths[key]).model.config.layers
    num_gpu = -1 if share == "all" else layers // 2
    model = runner.load(model_paths[key], num_ctx=128, repack=False, threads=2,
                        rpc=[server.endpoint], num_gpu=num_gpu, flash_attn=False)
    try:
        names = [d.name for d in model.placement.layers]
        remote = [name for name in names if name.startswith("RPC")]
        offloaded = layers if share == "all" else layers // 2
        assert len(remote) == offloaded + 1                   # the output layer goes too
        assert names[:layers - offloaded] == ["CPU"] * (layers - offloaded)
        assert model.placement.memory["token_embd.weight"].device_name == "CPU"
        assert model.placement.memory["output.weight"].device_name == names[-1]
        text, logits = on_cpu[key]
        assert greedy(model) == text
        np.testing.assert_array_equal(prompt_logits(model), logits)
    finally:
        model.close()


def test_the_device_that_holds_the_logits_picks_greedy_tokens(model_paths, server, on_cpu):
    """With the output layer remote, each graph also takes the argmax there, and the 64
    largest logits where a sampler asks: a greedy step reads one int32 per sequence, a top-k
    sampled one 64 ids and logits; the tokens are the CPU's (which reads all the logits)."""
    model = runner.load(model_paths["smollm2"], num_ctx=128, repack=False, threads=2,
                        rpc=[server.endpoint], num_gpu=-1, flash_attn=False)
    try:
        assert model.executor.choose_on_device
        tokens = model.tokenize(PROMPT, add_special=True)
        executor = model.executor
        model.engine.stop()                      # the executor is this test's alone now
        step = executor.build(Batch.of_sequence(tokens, 0, all_logits=True))
        executor.launch(step)
        logits = executor.finish(step)
        np.testing.assert_array_equal(step.choices.numpy(), np.argmax(logits, axis=-1))
        np.testing.assert_array_equal(logits, on_cpu["smollm2"][1])
        model.kv.remove(0)
        step = executor.build(Batch.of_sequence(tokens, 0, all_logits=True), candidates=True)
        executor.launch(step)
        ids, values = executor.finish(step, read="candidates")
        assert ids.shape == values.shape == (len(tokens), 64)
        for row, found, their in zip(logits, ids, values):
            assert set(found) == set(np.argpartition(row, -64)[-64:])
            np.testing.assert_array_equal(their, row[found])
    finally:
        model.close()
    sampled = {}
    for where, devices in (("cpu", dict(num_gpu=0)), ("rpc", dict(rpc=[server.endpoint]))):
        model = runner.load(model_paths["smollm2"], num_ctx=128, repack=False, threads=2,
                            **devices, flash_attn=False)
        try:
            assert model.executor.choose_on_device == (where == "rpc")
            sampled[where] = model.generate(PROMPT, stream=False, temperature=0.8, seed=7,
                                            num_predict=16)
        finally:
            model.close()
    assert sampled["rpc"] == sampled["cpu"]


@pytest.mark.parametrize("num_gpu", [15, -1])
def test_parallel_slots_and_a_context_shift_on_a_split_model(model_paths, server, num_gpu):
    """Two sequences in one batch, each shifting its full context twice over, with half the
    layers remote (and all of them: steps chained between shifts): the same tokens as on the
    CPU alone, batched the same way."""
    prompts = ["1, 2, 3, 4, 5, 6, 7, 8,", "Once upon a time, in a land far away,"]
    options = dict(num_ctx=64, parallel=2, flash_attn=True, repack=False, threads=2)
    texts = {}
    for where, devices in (("cpu", dict(num_gpu=0)),
                           ("split", dict(rpc=[server.endpoint], num_gpu=num_gpu))):
        model = runner.load(model_paths["smollm2"], **options, **devices)
        try:
            texts[where] = model.generate_batch(prompts, temperature=0, num_predict=150)
        finally:
            model.close()
    assert texts["split"] == texts["cpu"]
    numbers = [int(n) for n in texts["split"][0].replace(",", " ").split() if n.isdigit()]
    assert len(numbers) > 30 and numbers[:3] == [9, 10, 11]     # counted on through the shifts


def test_lookups_stay_on_the_cpu_in_plain_memory(model_paths):
    """Placement follows the model's own use of each weight: a table read by get_rows stays
    out of repacked layouts, whatever its name, and the blocks' matrices take them."""
    loaded = runner.api.open_model(model_paths["gemma3"])
    cpu = pyggml.cpu_device()
    with Placer(loaded.model, loaded.tensors, embeddings=False) as placer:
        placement = placer.place([cpu] * (loaded.model.config.layers + 1), repack=True)
        assert [use.op for use in placer.uses["token_embd.weight"]] == ["GET_ROWS"]
        assert placement.kind["token_embd.weight"] == "input"
        assert placement.memory["token_embd.weight"] == cpu.buffer_type()
        repacked = {n for n, m in placement.memory.items() if m != cpu.buffer_type()}
        # which types ggml repacks depends on the CPU (none without AVX2 on x86)
        if any(repacked_layout(cpu, tensor) for name, tensor in loaded.tensors.items()
               if name.startswith("blk.")):
            assert repacked
        assert all(n.startswith("blk.") for n in repacked)
        assert all(placer.uses[n] and {u.op for u in placer.uses[n]} == {"MUL_MAT"}
                   for n in repacked)
    loaded.file.close()


def test_an_f16_berts_tables_stay_in_plain_memory(tmp_path):
    """The abort seen on an AMX machine: BERT's position and token-type tables in a repacked
    layout, which get_rows and views cannot read. Placement follows their use, not names."""
    from runner.convert import convert

    from tests.support.hf_tiny import bert_checkpoint

    path = convert(bert_checkpoint(tmp_path / "bert", "mean"), tmp_path / "b.gguf", "f16",
                   progress=False)
    loaded = runner.api.open_model(path)
    cpu = pyggml.cpu_device()
    with Placer(loaded.model, loaded.tensors, embeddings=True) as placer:
        placement = placer.place([cpu] * (loaded.model.config.layers + 1), repack=True)
        for name in ("token_embd.weight", "position_embd.weight", "token_types.weight"):
            assert placement.memory[name] == cpu.buffer_type(), name
            assert placement.kind[name] == ("output" if name in placer.viewed else "input")
        assert "token_types.weight" in placer.viewed
        assert "output.weight" not in loaded.tensors          # the tie BERT never reads
    loaded.file.close()


def test_window_caches_of_different_sizes_on_two_devices(model_paths, server):
    """Gemma 3 with half its layers remote: each device keeps its sliding layers' window
    pools (512 + a batch of 64, padded: 768 cells) beside its global layers' 2048, and a
    prompt that wraps the pools twice gives the CPU's tokens."""
    prompt = " ".join(f"{word} {i}," for i, word in enumerate(["apple", "river", "stone"] * 100))
    options = dict(num_ctx=2048, batch_size=64, repack=False, threads=2)
    texts = {}
    for where, devices in (("cpu", dict(num_gpu=0)),
                           ("split", dict(rpc=[server.endpoint], num_gpu=9))):
        model = runner.load(model_paths["gemma3"], **options, **devices)
        try:
            assert len(model.tokenize(prompt, add_special=True)) > 1536
            sizes = {(d.name[:3], t.shape[0]) for d, t in zip(model.placement.layers, model.kv.k)}
            assert sizes == ({("CPU", 768), ("CPU", 2048)} if where == "cpu" else
                             {("CPU", 768), ("CPU", 2048), ("RPC", 768), ("RPC", 2048)})
            texts[where] = greedy(model, prompt, 16)
        finally:
            model.close()
    assert texts["split"] == texts["cpu"]
