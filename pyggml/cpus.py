"""How many CPU threads a computation should use.

ggml's CPU threads wait for each other at every operation of a graph by spinning, so a pool
with more threads than the CPUs it can actually run on waits a scheduler time slice at each
of hundreds of barriers: measured on a 2-CPU machine, 3 threads decoded at 0.2 tokens/s
against 120 with 2 (24 with patch 0006, which makes a spinning thread yield now and then).
The CPUs a process can use are its affinity mask, and fewer where a container's CPU quota
(cgroup v2 cpu.max, v1 cpu.cfs_quota_us) allows less time than that.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

log = logging.getLogger("pyggml")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def available_cpus() -> int:
    """The CPUs this process may use at once: its affinity mask, bounded by a CPU quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    cpus = cpus or os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cpus, math.ceil(quota))) if quota else cpus


def default_threads() -> int:
    """The physical cores this process may run on, as llama.cpp counts them (a second
    hyperthread of a core adds little to ggml's compute-bound kernels and slows the others),
    at most the CPUs a quota allows."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not cpus:
        return available_cpus()
    cores = set()
    for cpu in cpus:
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            cores.add(siblings.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return min(len(cores), available_cpus())


def usable_threads(threads: int) -> int:
    """threads, or the CPUs available when it is more (with a warning saying why)."""
    cpus = available_cpus()
    if threads <= cpus:
        return threads
    log.warning("%d CPU threads were asked for, but this process can run on %d CPUs at once; "
                "using %d (more threads than CPUs makes ggml's threads wait for each other "
                "at every operation).", threads, cpus, cpus)
    return cpus


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup"),
                     ) -> float | None:
    """CPUs' worth of time per period that this process's cgroup allows, or None (no quota,
    or no cgroup file system)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        path = path.lstrip("/")
        if controllers == "":                                    # cgroup v2
            quota = _read_quota(root / path / "cpu.max", root / "cpu.max")
        elif "cpu" in controllers.split(","):                    # cgroup v1
            quota = _read_quota(*(root / mount / inside / "cpu.cfs_quota_us"
                                  for mount in (controllers, "cpu") for inside in (path, "")))
        else:
            continue
        if quota is not None:
            return quota
    return None


def _read_quota(*candidates: Path) -> float | None:
    """'max 100000' or '50000 100000' (v2), or a v1 quota file with cpu.cfs_period_us
    beside it ('-1': none)."""
    for file in candidates:
        try:
            text = file.read_text().split()
            if file.name == "cpu.cfs_quota_us":
                text.append((file.parent / "cpu.cfs_period_us").read_text().strip())
        except OSError:
            continue
        quota, period = text[0], text[1] if len(text) > 1 else "100000"
        if quota in ("max", "-1") or not quota.lstrip("-").isdigit() or int(period) <= 0:
            return None
        return int(quota) / int(period)
    return None
