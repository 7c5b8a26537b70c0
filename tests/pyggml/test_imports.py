"""pyggml reads bottom-up: its modules import each other without a cycle (type-only imports
under TYPE_CHECKING aside), and importing the package loads nothing until a name is used."""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pyggml

PACKAGE = Path(pyggml.__file__).parent


def imported(path: Path) -> set[str]:
    """The pyggml modules path imports anywhere (functions too), but for type checking."""
    found = set()

    def visit(node):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def test_the_modules_import_each_other_without_a_cycle():
    graph = {path.stem: imported(path) - {"_ggml"} for path in PACKAGE.glob("*.py")
             if path.stem not in ("__init__", "__main__", "_build")}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        raise AssertionError(f"pyggml's modules import each other in a cycle: "
                             f"{cycle.args[1]}") from None
    assert order.index("_lib") < order.index("tensor") < order.index("context")


def test_reading_a_gguf_header_or_catching_its_errors_does_not_load_ggml():
    script = ("import sys, pyggml, pyggml.gguf_reader\n"
              "print(sorted(m for m in sys.modules if m.startswith('pyggml')))\n"
              "print(pyggml.GGMLError.__name__, 'pyggml._ggml' in sys.modules)\n"
              "print(len(pyggml.devices()) > 0, 'pyggml._ggml' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['pyggml', 'pyggml.gguf_reader']", "GGMLError False",
                                        "True True"]
