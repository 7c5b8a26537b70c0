"""Test options. `pytest --device CUDA0` runs the pyggml op tests on that device: their
operands live in its memory, so each op runs there unless the device declines it (then the
CPU takes it, and the run ends with a list of the declined ops). `--rpc HOST:PORT` first adds
an RPC server's devices (RPC0, ...), which `--device` can then name."""


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
