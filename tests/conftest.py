"""Test options. `pytest --device CUDA0` runs the pyggml op tests through a scheduler on
that device (the CPU still takes what it cannot run)."""


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu",
                     help="device name or type for the op tests (default: cpu)")
