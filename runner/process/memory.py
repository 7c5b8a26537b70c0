"""The protocol's memory report: what a layout takes per device and per layer.

Every figure comes from ggml for the real placement (loading/fit.py measures it): weights and
KV cache from the allocation sizes of the memory each tensor is placed in, the compute graph
of a full batch from the scheduler. Before loading (fit, alloc) nothing is allocated to
measure them; after commit they are read off the model's allocations.
"""

from __future__ import annotations

import pyggml

from ..loading.fit import Footprint


def memory_report(footprint: Footprint) -> dict:
    """{"InputWeights", "CPU": {...}, "GPUs": [{...}], "Total"}: each device's weights and cache
    per layer (the blocks, then the output layer) and its compute graph."""
    devices = {d.name: d for d in pyggml.devices()}
    names = sorted(set(footprint.weights) | set(footprint.cache) | set(footprint.graph),
                   key=lambda name: devices[name].index if name in devices else 1 << 30)
    empty = [0] * (footprint.layers + 1)

    def entry(name: str) -> dict:
        device = devices.get(name)
        return {"Name": name, "ID": str(device.index) if device else name,
                "Backend": device.backend if device else "",
                "Weights": footprint.weights.get(name, empty),
                "Cache": footprint.cache.get(name, empty),
                "Graph": footprint.graph.get(name, 0)}

    cpu = pyggml.cpu_device().name
    return {"InputWeights": footprint.inputs, "CPU": entry(cpu),
            "GPUs": [entry(name) for name in names if name != cpu],
            "Total": footprint.inputs + sum(footprint.total(name) for name in names)}


def shortfalls(footprint: Footprint) -> list[str]:
    """What does not fit: a phrase per device whose free memory is short of its need (the
    CPU's weights that map the model file take none)."""
    problems = []
    for device in pyggml.devices():
        need = footprint.total(device.name) + (footprint.inputs - footprint.mapped
                                               if device.is_cpu else 0)
        if need > device.memory_free:
            problems.append(f"{device.name} needs {need / 2**20:.0f} MiB but has "
                            f"{device.memory_free / 2**20:.0f} MiB free")
    return problems
