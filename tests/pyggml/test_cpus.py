import logging
import os
import time

import numpy as np
import pytest

import pyggml
from pyggml import cpus


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_cgroup_v2_quota_is_read_from_the_process_cgroup(tmp_path):
    proc = write(tmp_path / "proc", "0::/user.slice/job\n")
    write(tmp_path / "fs/user.slice/job/cpu.max", "150000 100000\n")
    assert cpus.cgroup_cpu_quota(tmp_path / "fs", proc) == 1.5
    write(tmp_path / "fs/user.slice/job/cpu.max", "max 100000\n")
    assert cpus.cgroup_cpu_quota(tmp_path / "fs", proc) is None


def test_inside_a_container_the_v2_quota_is_at_the_root(tmp_path):
    proc = write(tmp_path / "proc", "0::/docker/abc\n")        # the host's path, not mounted
    write(tmp_path / "fs/cpu.max", "200000 100000\n")
    assert cpus.cgroup_cpu_quota(tmp_path / "fs", proc) == 2.0


def test_a_cgroup_v1_quota_needs_its_period(tmp_path):
    proc = write(tmp_path / "proc", "4:memory:/x\n2:cpu,cpuacct:/x\n")
    write(tmp_path / "fs/cpu,cpuacct/x/cpu.cfs_quota_us", "50000\n")
    write(tmp_path / "fs/cpu,cpuacct/x/cpu.cfs_period_us", "100000\n")
    assert cpus.cgroup_cpu_quota(tmp_path / "fs", proc) == 0.5
    write(tmp_path / "fs/cpu,cpuacct/x/cpu.cfs_quota_us", "-1\n")
    assert cpus.cgroup_cpu_quota(tmp_path / "fs", proc) is None


def test_no_cgroup_file_system_means_no_quota(tmp_path):
    assert cpus.cgroup_cpu_quota(tmp_path / "fs", tmp_path / "missing") is None
    proc = write(tmp_path / "proc", "0::/\n")
    assert cpus.cgroup_cpu_quota(tmp_path / "fs", proc) is None


def test_the_cpu_counts_fit_this_process():
    affinity = len(os.sched_getaffinity(0))
    assert 1 <= cpus.default_threads() <= cpus.available_cpus() <= affinity


def test_more_threads_than_cpus_are_cut_to_the_cpus_with_a_warning(caplog):
    available = cpus.available_cpus()
    with caplog.at_level(logging.WARNING, logger="pyggml"):
        backend = pyggml.cpu_backend(threads=available + 3)
    assert backend.threads == available
    assert f"{available + 3} CPU threads were asked for" in caplog.text
    backend.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pyggml"):
        assert cpus.usable_threads(available) == available
    assert not caplog.text


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_a_thread_count_is_a_positive_integer(threads):
    with pytest.raises(ValueError, match="positive integer"):
        pyggml.cpu_backend().set_threads(threads)


def test_a_pool_larger_than_the_cpus_does_not_stall(monkeypatch):
    """Patch 0006: threads waiting at a barrier yield, so a preempted thread of the pool gets
    a CPU. Unpatched, on a 2-CPU machine, each of the 500 products below waited a scheduler
    time slice (4.0 s in all); patched, the graph takes 0.05 s."""
    monkeypatch.setattr(pyggml.backend, "usable_threads", lambda threads: threads)
    threads, width = cpus.available_cpus() + 1, 512
    with pyggml.Scheduler([pyggml.cpu_backend(threads=threads)]) as sched, \
            pyggml.Context(max_tensors=512, graph_size=512) as ctx:
        x = ctx.new_tensor("F32", (width,)).set_input()
        identity = ctx.new_tensor("F32", (width, width)).set_input()
        y = x
        for _ in range(500):
            y = identity.mul_mat(y)                       # (width,)
        graph = ctx.graph(y.set_output())
        sched.alloc(graph)
        x.set(np.arange(width, dtype=np.float32))
        identity.set(np.eye(width, dtype=np.float32))
        start = time.perf_counter()
        sched.compute(graph)
        elapsed = time.perf_counter() - start
        np.testing.assert_array_equal(y.numpy().ravel(), np.arange(width, dtype=np.float32))
    assert elapsed < 1.5, f"{threads} threads on {threads - 1} CPUs took {elapsed:.1f} s"
