"""Test options. `pytest --device CUDA0` runs the pyggml op tests on that device: their
operands live in its memory, so each op runs there unless the device declines it (then the
CPU takes it, and the run ends with a list of the declined ops). `--rpc HOST:PORT` first adds
an RPC server's devices (RPC0, ...), which `--device` can then name.

Tiers: a test that reads one of the real model files (through the fixtures that pull them)
is marked `real_model`; one that starts a server, a runner process or an RPC server (through
the fixtures that start them) is marked `server`; a few that compute a large reference are
marked `heavy` where they are defined. The quick tier is none of these:
`pytest -m "not slow and not real_model and not server and not heavy"`."""

import pytest

REAL_MODEL_FIXTURES = {"model_paths", "loaded"}
SERVER_FIXTURES = {"server", "served", "models_dir", "ollama_client", "openai_client"}


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu",
                     help="device name or type for the op tests (default: cpu)")
    parser.addoption("--rpc", action="append", default=[],
                     help="an RPC server (host:port) whose devices join the device list")


def pytest_configure(config):
    import pyggml

    for endpoint in config.getoption("--rpc"):
        pyggml.rpc.connect(endpoint)
    config.declined_ops = {}


def pytest_terminal_summary(terminalreporter, config):
    declined = getattr(config, "declined_ops", {})
    if declined:
        terminalreporter.section(f"ops {config.getoption('--device')} declined (run on the CPU)")
        for op, count in sorted(declined.items()):
            terminalreporter.write_line(f"{op}: {count}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & REAL_MODEL_FIXTURES:
            item.add_marker(pytest.mark.real_model)
        if used & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
