"""The memory a model's projectors take: their weights, all on the output layer's device
(where the runner puts them), and each encoder's compute memory for its largest image or clip
(each encoder has its own scheduler). Counted as weights of the output layer and as graph
memory of the devices, so fit, the memory report and num_gpu=-1's measure all see them.
"""

from __future__ import annotations

from contextlib import ExitStack

import pyggml

from .encoder import Encoder


def add_measured(footprint, projectors: dict, tensors: dict, placement, backends,
                 flash: bool = False) -> None:
    """Add to footprint what the projectors would take under placement (their encoders
    with flash attention or not), measured without allocating (zero-size buffers stand in
    for their weights)."""
    if not projectors:
        return
    memory = placement.layers[-1].buffer_type()
    _add_weights(footprint, memory, tensors)
    with ExitStack() as stack:
        stack.enter_context(pyggml.Buffer.dummy(memory, list(tensors.values()))).mark_weights()
        for projector in projectors.values():
            scheduler = stack.enter_context(
                pyggml.Scheduler(backends.ordered(placement.devices)))
            encoder = Encoder(projector, scheduler, flash=flash)
            stack.callback(encoder.close)
            for backend, size in scheduler.reserve_size(encoder.worst_case()).items():
                _add_graph(footprint, backend.device.name, size)


def add_allocated(footprint, encoders: dict, tensors: dict, placement) -> None:
    """Add to footprint what the loaded projectors hold: their weights and each encoder's
    reserved compute memory."""
    if not encoders:
        return
    _add_weights(footprint, placement.layers[-1].buffer_type(), tensors)
    for encoder in encoders.values():
        for backend in encoder.scheduler.backends:
            _add_graph(footprint, backend.device.name, encoder.scheduler.buffer_size(backend))


def _add_weights(footprint, memory, tensors: dict) -> None:
    size = sum(memory.alloc_size(t) for t in tensors.values())
    if memory == pyggml.cpu_device().buffer_type():
        footprint.mapped += size                   # they map the projector's file
    footprint.add(footprint.weights, memory.device_name, footprint.layers, size)


def _add_graph(footprint, device: str, size: int) -> None:
    footprint.graph[device] = footprint.graph.get(device, 0) + size
