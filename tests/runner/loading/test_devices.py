"""Which layers go to which accelerator, over fake device lists with given memory figures."""

from __future__ import annotations

import pytest

import pyggml
from runner.loading.devices import (
    HEADROOM,
    DeviceOptions,
    listed_layers,
    offload,
    parse_tensor_split,
    split_layers,
)

GiB = 1 << 30


def gpu(index: int, free_gib: float, name: str | None = None) -> pyggml.Device:
    return pyggml.Device(index=index, name=name or f"CUDA{index}", description="fake",
                         type="gpu", backend="CUDA", memory_free=int(free_gib * GiB),
                         memory_total=int(free_gib * GiB))


def test_the_last_layers_go_to_the_accelerator():
    assert split_layers(6, 2, [1.0]) == [None] * 4 + [0, 0]
    assert split_layers(6, 0, [1.0]) == [None] * 6
    assert split_layers(6, 99, [1.0]) == [0] * 6            # more than there are: all


def test_several_accelerators_share_in_proportion_and_main_takes_the_rest():
    assert split_layers(10, 10, [3, 1]) == [0] * 8 + [1] * 2      # 7.5 / 2.5: rest to 0
    assert split_layers(10, 10, [3, 1], main=1) == [0] * 7 + [1] * 3
    assert split_layers(10, 9, [1, 1, 1]) == [None] + [0] * 3 + [1] * 3 + [2] * 3
    assert split_layers(5, 5, [1, 1], main=1) == [0, 0, 1, 1, 1]
    assert split_layers(4, 4, [0, 1]) == [1] * 4                 # a zero share takes none


def test_offload_splits_by_free_memory_unless_told():
    gpus = [gpu(0, 30), gpu(1, 10)]
    assert offload(8, gpus, DeviceOptions(num_gpu=8)) == [0] * 6 + [1] * 2
    assert offload(8, gpus, DeviceOptions(num_gpu=8, tensor_split=(1, 1))) == [0] * 4 + [1] * 4
    assert offload(8, gpus, DeviceOptions(num_gpu=4, tensor_split=(1, 3), main_gpu=1)) == \
        [None] * 4 + [0] + [1] * 3
    assert offload(8, [], DeviceOptions()) == [None] * 8               # no accelerator
    assert offload(8, gpus, DeviceOptions(num_gpu=0)) == [None] * 8


def test_num_gpu_minus_one_offloads_what_fits():
    gpus = [gpu(0, 2), gpu(1, 1)]
    per_layer = 256 << 20

    def need(plan):
        sizes = {}
        for index in plan:
            if index is not None:
                sizes[index] = sizes.get(index, 0) + per_layer
        return sizes

    # 2 GiB less the headroom holds 6 layers of 256 MiB, 1 GiB less it holds 2; by free
    # memory the split is 2:1: 8 layers give 6 and 2 (the rest to the main GPU), 9 give 6 and 3
    plan = offload(30, gpus, DeviceOptions(), need)
    counts = {i: plan.count(i) for i in (0, 1)}
    assert counts[1] * per_layer + HEADROOM <= gpus[1].memory_free
    assert counts[0] * per_layer + HEADROOM <= gpus[0].memory_free
    assert plan[:30 - counts[0] - counts[1]] == [None] * (30 - counts[0] - counts[1])
    assert counts == {0: 6, 1: 2}
    assert offload(30, [gpu(0, 0.25)], DeviceOptions(), need) == [None] * 30   # none fits
    assert offload(4, [gpu(0, 80)], DeviceOptions(), need) == [0] * 4           # all fit


def test_bad_device_options_are_refused_with_a_sentence():
    with pytest.raises(ValueError, match="num_gpu must be -1"):
        DeviceOptions(num_gpu=-2)
    with pytest.raises(ValueError, match="main_gpu must be the index"):
        DeviceOptions(main_gpu=-1)
    with pytest.raises(ValueError, match="tensor_split must be non-negative"):
        DeviceOptions(tensor_split=(0, 0))
    with pytest.raises(ValueError, match="tensor_split must be non-negative"):
        DeviceOptions(tensor_split=(1, float("nan")))
    with pytest.raises(ValueError, match="host:port"):
        DeviceOptions(rpc=("nowhere",))
    with pytest.raises(ValueError, match="main_gpu 2 names no accelerator"):
        offload(4, [gpu(0, 8)], DeviceOptions(num_gpu=2, main_gpu=2))
    with pytest.raises(ValueError, match="3 proportions for 2 accelerators"):
        offload(4, [gpu(0, 8), gpu(1, 8)], DeviceOptions(num_gpu=2, tensor_split=(1, 1, 1)))
    with pytest.raises(ValueError, match="comma-separated"):
        parse_tensor_split("3;1")
    assert parse_tensor_split("3,1") == (3.0, 1.0) and DeviceOptions(rpc="h:1").rpc == ("h:1",)


def test_listed_layers_follow_gpu_layers_as_a_driver_sends_them():
    cpu = pyggml.cpu_device()
    found = [gpu(0, 8), gpu(1, 8), cpu]
    devices = listed_layers({"0": (2, 3), "CUDA1": (4,)}, 4, found)
    assert [d.name for d in devices] == ["CPU", "CPU", "CUDA0", "CUDA0", "CUDA1"]  # 4: output
    with pytest.raises(ValueError, match="device 'CUDA7', which is not here"):
        listed_layers({"CUDA7": (1,)}, 4, found)
    with pytest.raises(ValueError, match="layers 0 to 4"):
        listed_layers({"0": (5,)}, 4, found)
    with pytest.raises(ValueError, match="both CUDA0 and CUDA1"):
        listed_layers({"0": (1,), "1": (1,)}, 4, found)
