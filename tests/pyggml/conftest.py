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


@pytest.fixture
def compute(sched):
    """compute(build, *inputs) -> numpy copies of build(*input_tensors)'s outputs.

    Inputs are numpy arrays (exact dtype) or Raw; build returns a Tensor or a tuple of them.
    """

    def run(build, *inputs):
        with pyggml.Context() as ctx:
            tensors, feeds = [], {}
            for value in inputs:
                if isinstance(value, Raw):
                    tensor = ctx.new_tensor(value.ggml_type, value.shape).set_input()
                    feeds[tensor] = value.data
                else:
                    tensor = ctx.new_tensor(pyggml.dtypes.ggml_type_of(value.dtype),
                                            value.shape).set_input()
                    feeds[tensor] = value
                tensors.append(tensor)
            outputs = build(*tensors)
            single = isinstance(outputs, pyggml.Tensor)
            outputs = (outputs,) if single else tuple(outputs)
            for out in outputs:
                out.set_output()
            sched.compute(ctx.graph(*outputs), feeds)
            results = [out.numpy(copy=True) for out in outputs]
        return results[0] if single else results

    return run


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)
