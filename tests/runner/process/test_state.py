"""The runner's load state in process: health while loading, fit against what commit
allocates, close."""

from __future__ import annotations

import pytest

from runner.process.state import Layout, RunnerState, Status


def test_health_shows_loading_progress_then_ready(model_paths):
    state = RunnerState(model_paths["smollm2"])
    assert state.health() == (Status.LAUNCHED, 0.0)
    seen = []

    def advance(done, total):
        RunnerState._advance(state, done, total)
        seen.append(state.health())

    state._advance = advance
    layout = Layout(parallel=2, ctx_size=1024, batch_size=128)
    fitted = state.fit(layout)
    assert state.model is None                         # fit allocates nothing
    loaded = state.commit(layout)
    assert seen and all(status == Status.LOADING for status, _ in seen)
    progress = [p for _, p in seen]
    assert progress == sorted(progress) and progress[-1] == 1.0
    assert state.health() == (Status.READY, 1.0)
    assert loaded["CPU"]["Cache"] == fitted["CPU"]["Cache"]
    assert loaded["CPU"]["Weights"] == fitted["CPU"]["Weights"]
    assert state.engine.context == 512
    state.close()
    assert state.health()[0] == Status.LAUNCHED and state.model is None


def test_layers_that_share_a_cache_hold_none(tmp_path):
    from runner.convert import convert

    from tests.support.hf_tiny import checkpoint

    path = convert(checkpoint("gemma4", tmp_path / "hf"), tmp_path / "gemma4.gguf", "f32",
                   progress=False)
    state, layout = RunnerState(path), Layout(ctx_size=256, batch_size=64)
    fitted = state.fit(layout)["CPU"]["Cache"]
    assert len(fitted) == 7 and all(fitted[:4]) and fitted[4:] == [0, 0, 0]
    assert fitted[3] == 2 * fitted[0]             # the full layer's heads are twice as wide
    assert state.commit(layout)["CPU"]["Cache"] == fitted
    state.close()


@pytest.mark.parametrize("changes,message", [
    (dict(flash_attn="maybe"), "auto, on or off"),
    (dict(parallel=0), "parallel"),
    (dict(parallel=8, ctx_size=4), "cannot be shared"),
    (dict(kv_cache_type="q8_0", flash_attn="off"), "needs flash attention"),
    (dict(batch_size=0), "batch size"),
])
def test_bad_layouts_are_refused(model_paths, changes, message):
    with pytest.raises(ValueError, match=message):
        RunnerState(model_paths["smollm2"]).fit(Layout(**changes))
