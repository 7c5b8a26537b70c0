"""One model loads with the same options whichever entry point starts it: the Python API,
`run`, the runner subprocess (its flags, and /load without them) and the server."""

from __future__ import annotations

from runner import defaults
from runner.api import LoadOptions
from runner.serve.service.options import Settings
from runner.process.main import parser
from runner.process.state import Layout


def test_the_runner_with_no_flags_loads_as_the_python_api_does():
    args = parser().parse_args(["--model", "m.gguf"])
    layout = Layout(parallel=args.parallel, batch_size=args.batch_size,
                    flash_attn=args.flash_attn, kv_cache_type=args.kv_cache_type)
    assert layout.load_options() == LoadOptions()
    assert Layout().load_options() == LoadOptions()          # /load with no fields


def test_the_server_starts_runners_with_the_same_defaults(monkeypatch):
    for name in ("RUNNER_CONTEXT_LENGTH", "RUNNER_FLASH_ATTENTION", "RUNNER_KV_CACHE_TYPE",
                 "RUNNER_NUM_PARALLEL"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_environment()
    api = LoadOptions()
    assert (settings.context_length, settings.kv_cache_type, settings.num_parallel) == \
        (api.num_ctx, api.kv_cache_type, api.parallel)
    assert Layout(flash_attn=settings.flash_attention).flash is api.flash_attn


def test_flash_attention_is_on_by_default_but_for_an_f32_cache():
    assert LoadOptions().flash_attn is True
    assert LoadOptions(kv_cache_type="f32").flash_attn is False     # exact comparisons
    assert Layout(flash_attn="auto").flash is True
    assert Layout(flash_attn="auto", kv_cache_type="f32").flash is False
    assert Layout(flash_attn="off").flash is False
    assert defaults.flash_attention("on", "q8_0") is True
