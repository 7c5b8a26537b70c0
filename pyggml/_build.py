"""Generate the C source of pyggml._ggml with cffi (API mode, out of line).

Run by CMakeLists.txt: `python pyggml/_build.py OUTPUT.c`; CMake compiles the result and
links it against ggml. The cdefs are hand-written, one file per ggml header, in cdefs/.

Every declaration in cdefs/ggml_ops.h also gets a guarded wrapper, safe_<name>: it sets a
thread-local jump point, and pyggml's abort hook jumps back to it when a GGML_ASSERT fails
inside the call, so a bad shape becomes an exception with ggml's own message instead of a
dead process. Only calls into ggml.c (plain C, no destructors to skip) are guarded.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import cffi

CDEFS = Path(__file__).resolve().parent / "cdefs"
HEADERS = ["ggml.h", "ggml-backend.h", "ggml-alloc.h", "ggml-cpu.h"]
GUARDED = "ggml_ops.h"
SHIM = "shim.h"

PRELUDE = r"""
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

static _Thread_local jmp_buf * pyggml_jump_target = NULL;
static _Thread_local char pyggml_message[2048];
static _Thread_local int pyggml_failed = 0;

static void pyggml_on_abort(const char * message) {
    jmp_buf * target = pyggml_jump_target;
    if (target != NULL) {
        snprintf(pyggml_message, sizeof(pyggml_message), "%s", message);
        pyggml_failed = 1;
        pyggml_jump_target = NULL;
        longjmp(*target, 1);
    }
    fprintf(stderr, "%s\n", message);  /* not inside a guarded call: ggml aborts as usual */
}

static void pyggml_install_abort_hook(void) {
    ggml_set_abort_callback(pyggml_on_abort);
}

static int pyggml_strided(const struct ggml_tensor * t) {
    return t != NULL && t->nb[0] != ggml_type_size(t->type);
}

static void pyggml_refuse(const char * message) {
    snprintf(pyggml_message, sizeof(pyggml_message), "%s", message);
    pyggml_failed = 1;
}

/* The operands of a graph's first n nodes, kept (restore 0) or put back (restore 1): saved
   holds n x GGML_MAX_SRC pointers. ggml's scheduler points a node's operands at the copies it
   makes between backends; put back, the graph can be split and allocated again. */
static void pyggml_graph_operands(struct ggml_cgraph * graph, int n, struct ggml_tensor ** saved,
                                  int restore) {
    for (int i = 0; i < n; i++) {
        struct ggml_tensor * node = ggml_graph_node(graph, i);
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            if (restore) {
                node->src[j] = saved[i * GGML_MAX_SRC + j];
            } else {
                saved[i * GGML_MAX_SRC + j] = node->src[j];
            }
        }
    }
}

static int pyggml_max_src(void) {
    return GGML_MAX_SRC;
}

/* Forget where ctx's tensors live, except in the buffers kept (its own): compute memory
   another graph's allocation may have reused since (ggml would take them for placed). */
static void pyggml_detach(struct ggml_context * ctx, struct ggml_backend_buffer ** kept,
                          int n_kept) {
    for (struct ggml_tensor * t = ggml_get_first_tensor(ctx); t != NULL;
         t = ggml_get_next_tensor(ctx, t)) {
        int keep = t->buffer == NULL;
        for (int k = 0; k < n_kept && !keep; k++) {
            keep = t->buffer == kept[k];
        }
        if (!keep) {
            t->buffer = NULL;
            t->data = NULL;
        }
    }
}

static const char * pyggml_take_error(void) {
    if (!pyggml_failed) {
        return NULL;
    }
    pyggml_failed = 0;
    return pyggml_message;
}
"""

# A scheduler's compute thread in C (pyggml/worker.py)
COMPUTE_THREAD = (CDEFS / "compute_thread.c").read_text()

WRAPPER = """
static {ret} safe_{name}({params}) {{
{layout_checks}    jmp_buf here;
    jmp_buf * volatile outer = pyggml_jump_target;
    {result_decl}
    pyggml_jump_target = &here;
    if (setjmp(here) == 0) {{
        {call}
    }}
    pyggml_jump_target = outer;
    return {result};
}}
"""

LAYOUT_CHECK = """    if (pyggml_strided({arg})) {{
        pyggml_refuse("the operand '{arg}' is a transposed view (its last dimension is strided), "
                      "which ggml's CPU kernels reject at compute time; cont() it first");
        return 0;
    }}
"""
ANY_LAYOUT = "/* ANY_LAYOUT */"

DECLARATION = re.compile(r"^(?P<ret>[\w\s\*]+?)\s*\b(?P<name>ggml_\w+)\((?P<params>.*)\);$")


def strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def argument_name(param: str) -> str:
    return re.sub(r"\[.*\]$", "", param.strip()).split()[-1].lstrip("*")


def guarded_wrappers(text: str) -> tuple[str, str]:
    """Return (cdef declarations, C definitions) of the safe_ wrappers."""
    cdefs, sources = [], []
    for line in re.sub(r"/\*(?! ANY_LAYOUT).*?\*/", "", text, flags=re.S).splitlines():
        any_layout = ANY_LAYOUT in line
        line = line.replace(ANY_LAYOUT, "").strip()
        if not line:
            continue
        match = DECLARATION.match(line)
        if match is None:
            raise SystemExit(f"{GUARDED}: cannot read the declaration {line!r}")
        ret, name, params = match["ret"].strip(), match["name"], match["params"]
        args = ", ".join(argument_name(p) for p in params.split(","))
        tensors = [argument_name(p) for p in params.split(",") if "struct ggml_tensor" in p]
        checks = "" if any_layout else "".join(LAYOUT_CHECK.format(arg=a) for a in tensors)
        if ret == "void":
            wrapper_ret, result_decl, call, result = ("int", "volatile int ok = 0;",
                                                      f"{name}({args}); ok = 1;", "ok")
        else:
            wrapper_ret, result_decl, call, result = (
                ret, f"{ret} volatile result = 0;", f"result = {name}({args});", "result")
        cdefs.append(f"{wrapper_ret} safe_{name}({params});")
        sources.append(WRAPPER.format(ret=wrapper_ret, name=name, params=params,
                                      layout_checks=checks,
                                      result_decl=result_decl, call=call, result=result))
    return "\n".join(cdefs), "".join(sources)


def builder() -> cffi.FFI:
    ffi = cffi.FFI()
    for header in HEADERS:
        ffi.cdef(strip_comments((CDEFS / header).read_text()))
    guarded_cdefs, guarded_source = guarded_wrappers((CDEFS / GUARDED).read_text())
    ffi.cdef(guarded_cdefs)
    ffi.cdef((CDEFS / SHIM).read_text())
    ffi.set_source("pyggml._ggml", PRELUDE + COMPUTE_THREAD + guarded_source)
    return ffi


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: _build.py OUTPUT.c", file=sys.stderr)
        return 2
    builder().emit_c_code(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
