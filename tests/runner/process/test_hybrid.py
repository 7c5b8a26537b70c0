"""A runner on a hybrid model (a tiny Qwen 3.5, converted here): /load's Checkpoints field
sizes the recurrent states (fit counts them), a number out of range is refused, and a number
that does not fit in memory is refused at load with a sentence that says what they take; a
second turn resumes from a checkpoint and the done line says how much it reused."""

from __future__ import annotations

import pytest

from runner.convert import convert

from tests.support.hf_tiny import checkpoint
from tests.support.runner_process import RunnerProcess

# DeltaNet states at a real model's head shape (32 value heads of 128 x 128: 2 MiB a layer),
# in a model otherwise tiny
BIG_STATES = dict(linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                  linear_value_head_dim=128)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory, workdir):
    work = tmp_path_factory.mktemp("hybrid")
    path = convert(checkpoint("qwen3_5", work / "hf", **BIG_STATES), work / "qwen35.gguf",
                   "f32", progress=False)
    runner = RunnerProcess(path, workdir, "--no-load")
    yield runner
    runner.stop()


def load(runner, operation, **fields):
    return runner.client.post("/load", json={"Operation": operation, "KvSize": 512,
                                             "FlashAttention": False, **fields})


def cache_bytes(report: dict) -> int:
    return sum(report["Memory"]["CPU"]["Cache"])


def test_checkpoints_size_the_states_fit_counts(hybrid):
    few, more = load(hybrid, 0, Checkpoints=0).json(), load(hybrid, 0, Checkpoints=8).json()
    assert few["Success"] and more["Success"]
    state = 6 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 4   # 6 DeltaNet layers
    assert cache_bytes(more) - cache_bytes(few) >= 8 * state


@pytest.mark.parametrize("value", [-1, 65, "many"])
def test_a_checkpoint_count_out_of_range_is_refused(hybrid, value):
    refused = load(hybrid, 0, Checkpoints=value)
    assert refused.status_code == 400 and "Checkpoints" in refused.json()["error"]


def test_checkpoints_that_do_not_fit_are_refused_at_load_saying_what_they_take(hybrid):
    # 64 checkpoints for each of 63 sequences: 12 MiB a state, about 48 GiB
    refused = load(hybrid, 1, Checkpoints=64, Parallel=63, KvSize=63 * 8).json()
    assert not refused["Success"]
    assert "64 checkpoints of the recurrent states per sequence take" in refused["error"]
    assert hybrid.health()["status"] == 2                        # nothing was loaded


def test_a_second_turn_reuses_the_first_through_a_checkpoint(hybrid):
    assert load(hybrid, 2, Checkpoints=2).json()["Success"]
    hybrid.wait_status(0)
    first_prompt = "<|im_start|>user\nHello there, how are you today?<|im_end|>\n" \
                   "<|im_start|>assistant\n<think>\n"
    first = hybrid.complete(first_prompt, Options={"temperature": 0, "num_predict": 4})
    reply = "".join(line.get("content", "") for line in first)
    second_prompt = first_prompt + reply + "<|im_end|>\n<|im_start|>user\nAnd?<|im_end|>\n" \
        "<|im_start|>assistant\n<think>\n"
    second = hybrid.complete(second_prompt, Options={"temperature": 0, "num_predict": 2})
    done, evaluated = second[-1], first[-1]["prompt_eval_count"]
    assert done["done"]
    tokens = [hybrid.client.post("/tokenize", json={"content": text}).json()["tokens"]
              for text in (first_prompt, second_prompt)]
    shared = next(i for i, (a, b) in enumerate(zip(*tokens)) if a != b) \
        if tokens[0] != tokens[1][:len(tokens[0])] else len(tokens[0])
    assert shared == len(tokens[0]) == evaluated
    # at worst from the checkpoint before the generation prompt's "<think>\n" (the reply,
    # detokenized and tokenized again, may differ from the tokens sampled)
    assert evaluated - 2 <= done["prompt_cached_count"] < done["prompt_eval_count"]
