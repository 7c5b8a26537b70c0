"""Where a graph's compute time goes, node by node and by operation.

A Profiler asks ggml's scheduler (its eval callback) to show it every node, so the scheduler
computes each node as a graph of its own and synchronizes after it; the time from the ask to
the answer is that node's. Computing node by node adds each op's thread wake-up and barrier,
which a whole-graph compute also pays once per op, so the sum is close to, and a little above,
the graph's time. Two engines measured this way (bench/profile.py does so with llama.cpp's
graph on the same file) show by operation where one spends more.

    with Profiler(scheduler) as profiler:
        scheduler.compute(graph, inputs)
    print(profiler.table())
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ._lib import ffi, lib
from .dtypes import type_name


@dataclass(frozen=True)
class NodeTime:
    name: str
    op: str                 # with the first operand's type for products: MUL_MAT(q4_1)
    shape: tuple[int, ...]  # numpy order
    seconds: float


def describe_node(raw) -> tuple[str, str, tuple[int, ...]]:
    """(name, op key, numpy shape) of a ggml_tensor pointer, any library's of this version."""
    op = ffi.string(lib.ggml_op_desc(raw)).decode()
    if op.startswith("MUL_MAT") and raw.src[0] != ffi.NULL:
        op += f"({type_name(raw.src[0].type)})"
    shape = tuple(raw.ne[i] for i in range(max(1, lib.ggml_n_dims(raw)) - 1, -1, -1))
    return ffi.string(raw.name).decode(errors="replace"), op, shape


class NodeClock:
    """Turns the ask/answer pairs of an eval callback into NodeTimes."""

    def __init__(self):
        self.nodes: list[NodeTime] = []
        self._start = 0

    def on_eval(self, raw, ask: bool) -> bool:
        now = time.perf_counter_ns()
        if ask:
            self._start = now
        else:
            self.nodes.append(NodeTime(*describe_node(raw), (now - self._start) / 1e9))
        return True

    def clear(self) -> None:
        self.nodes.clear()


class Profiler(NodeClock):
    """Times every node of the graphs a scheduler computes while it is active."""

    def __init__(self, scheduler):
        super().__init__()
        self.scheduler = scheduler
        self._handle = ffi.new_handle(self)

    def __enter__(self) -> "Profiler":
        lib.ggml_backend_sched_set_eval_callback(self.scheduler.ptr, lib.pyggml_on_eval,
                                                 self._handle)
        return self

    def __exit__(self, *exc) -> None:
        lib.ggml_backend_sched_set_eval_callback(self.scheduler.ptr, ffi.NULL, ffi.NULL)

    def table(self, top: int = 10) -> str:
        return table(self.nodes, top)


@ffi.def_extern()
def pyggml_on_eval(raw, ask, user_data):
    return ffi.from_handle(user_data).on_eval(raw, ask)


def by_op(nodes: list[NodeTime]) -> dict[str, tuple[int, float]]:
    """{op: (count, seconds)}, the most time first."""
    totals: defaultdict[str, list[Any]] = defaultdict(lambda: [0, 0.0])   # [count, seconds]
    for node in nodes:
        totals[node.op][0] += 1
        totals[node.op][1] += node.seconds
    return dict(sorted(((op, tuple(v)) for op, v in totals.items()), key=lambda kv: -kv[1][1]))


def table(nodes: list[NodeTime], top: int = 10) -> str:
    """Time per operation, then the slowest nodes."""
    total = sum(n.seconds for n in nodes) or 1e-12
    lines = [f"{'operation':<24}{'nodes':>7}{'ms':>10}{'share':>8}"]
    for op, (count, seconds) in by_op(nodes).items():
        lines.append(f"{op:<24}{count:>7}{seconds * 1e3:>10.3f}{seconds / total:>8.1%}")
    lines.append(f"{'all':<24}{len(nodes):>7}{total * 1e3:>10.3f}")
    lines.append("")
    lines.append(f"{'slowest nodes':<40}{'operation':<24}{'shape':<20}{'ms':>8}")
    for node in sorted(nodes, key=lambda n: -n.seconds)[:top]:
        lines.append(f"{node.name[:39]:<40}{node.op:<24}{str(node.shape):<20}"
                     f"{node.seconds * 1e3:>8.3f}")
    return "\n".join(lines)
