"""Shared fixtures: one CPU scheduler, and a helper that computes a graph from numpy inputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import pyggml


@dataclass
class Raw:
    """An input given as raw bytes of a ggml type (quantized weights), numpy-order shape."""
    ggml_type: str
    data: np.ndarray
    shape: tuple


@pytest.fixture(scope="session")
def sched(request):
    device = pyggml.device(request.config.getoption("--device"))
    backends = [pyggml.cpu_backend(threads=2)]
    if device.type != "cpu":
        backends.insert(0, device.open())
    with pyggml.Scheduler(backends) as scheduler:
        yield scheduler


@pytest.fixture(scope="session")
def same_kernels(sched) -> bool:
    """Whether the ops run on the CPU, whose fused and separate kernels share their math
    (bit-equal); another device's may differ in the last bits (CUDA's fused GEGLU)."""
    return sched.backends[0].is_cpu


# Tolerances of float32 products on devices whose default precision is not float32 all
# through: Vulkan's matrix kernels read their operands as float16 (GGML_PREC_DEFAULT, which
# llama.cpp's own op tests allow for)
PRODUCT_TOLERANCE = {"Vulkan": {"rtol": 2e-3, "atol": 2e-2}}


@pytest.fixture(scope="session")
def product_tolerance(sched) -> dict:
    """assert_allclose's rtol and atol for a float32 product on the device under test."""
    return PRODUCT_TOLERANCE.get(sched.backends[0].device.backend, {"rtol": 1e-4, "atol": 1e-4})


NOT_COMPUTED = {"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}


@pytest.fixture
def compute(sched, request):
    """compute(build, *inputs) -> numpy copies of build(*input_tensors)'s outputs.

    Inputs are numpy arrays (exact dtype) or Raw; build returns a Tensor or a tuple of them.
    On another device than the CPU the inputs live in its memory, so the ops run there; an op
    the device declines runs on the CPU and is counted for the session's summary.
    """
    device = sched.backends[0]
    declined = request.config.declined_ops

    def run(build, *inputs):
        with pyggml.Context() as ctx, pyggml.Context(max_tensors=64, graphs=0) as storage:
            specs = [(value.ggml_type, value.shape, value.data) if isinstance(value, Raw) else
                     (pyggml.dtypes.ggml_type_of(value.dtype), value.shape, value)
                     for value in inputs]
            if device.is_cpu:
                tensors = [ctx.new_tensor(kind, shape).set_input() for kind, shape, _ in specs]
                feeds = {t: data for t, (_, _, data) in zip(tensors, specs)}
            else:
                held = [storage.new_tensor(kind, shape) for kind, shape, _ in specs]
                if held:
                    storage.allocate(device)
                for tensor, (_, _, data) in zip(held, specs):
                    tensor.set(data)
                tensors, feeds = [ctx.bind(t) for t in held], {}
            outputs = build(*tensors)
            single = isinstance(outputs, pyggml.Tensor)
            outputs = (outputs,) if single else tuple(outputs)
            for out in outputs:
                out.set_output()
            graph = ctx.graph(*outputs)
            sched.compute(graph, feeds)
            if not device.is_cpu:
                for node in graph.nodes():
                    if node.op not in NOT_COMPUTED and sched.backend_of(node) is not device:
                        key = f"{node.op} ({node.dtype.name})"
                        declined[key] = declined.get(key, 0) + 1
            results = [out.numpy(copy=True) for out in outputs]
        return results[0] if single else results

    return run


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)
