"""Device memory: buffer types, buffers, allocation (pyggml/memory.py)."""

import numpy as np
import pytest

import pyggml
from pyggml.errors import GGMLError


def test_buffers_report_size_and_host():
    with pyggml.Context() as ctx:
        ctx.new_tensor("F32", (256,))
        buffer = ctx.allocate(pyggml.cpu_backend(threads=1))
        assert buffer.size >= 1024 and buffer.is_host and buffer.name
        buffer.clear(0)


def test_a_device_names_the_same_memory_by_equal_buffer_types():
    # loading groups tensors by buffer type: two lookups of one memory must be one key
    first, second = pyggml.cpu_device().buffer_type(), pyggml.cpu_device().buffer_type()
    assert first == second and hash(first) == hash(second) and len({first, second}) == 1
    assert first.is_host and first.device_name == "CPU" and first.alignment >= 1
    assert first.max_size > 0 and "CPU" in repr(first)


def test_allocated_tensors_hold_data_until_their_buffer_closes():
    memory = pyggml.cpu_device().buffer_type()
    with pyggml.Context(graphs=0) as storage:
        weight = storage.new_tensor("F32", (4, 8))
        [buffer] = pyggml.allocate(memory, [weight])
        assert buffer.size >= memory.alloc_size(weight) == 4 * 8 * 4
        weight.set(np.arange(32, dtype=np.float32).reshape(4, 8))
        assert weight.numpy()[3, 7] == 31
        buffer.close()
        buffer.close()                                  # closing twice is harmless
        with pytest.raises(GGMLError, match="has no memory"):
            weight.numpy()
        with pytest.raises(GGMLError, match="buffer was closed"):
            buffer.size
