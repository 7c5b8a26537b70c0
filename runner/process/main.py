"""`python -m runner --model NAME_OR_PATH [--port N] ...`: the runner subprocess.

It listens on 127.0.0.1 only and prints `runner listening on 127.0.0.1:PORT` on stdout once
the port is bound (--port 0 picks a free one), then loads the model (unless --no-load: a
driver then POSTs /load). SIGTERM is graceful: no new requests, in-flight streams get
--grace seconds to finish and are then ended with an error line, and the process exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading

import uvicorn

import pyggml

from .. import defaults
from ..kvcache.causal import CACHE_TYPES
from ..loading import store
from ..loading.devices import accelerators, add_device_flags, device_options
from .app import create_app
from .state import Layout, RunnerState

log = logging.getLogger("runner.process")
# seconds past --grace after which a runner told to stop exits whether or not it has stopped
EXIT_MARGIN = 10.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runner --model MODEL",
                                description="Serve one model over the runner protocol.")
    p.add_argument("--model", required=True, help="a pulled model name or a GGUF path")
    p.add_argument("--mmproj", help="the model's vision projector (llama.cpp's mmproj GGUF)")
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    p.add_argument("--parallel", type=int, default=defaults.PARALLEL,
                   help="sequences served at once")
    p.add_argument("--ctx-size", type=int, help="KV cache cells in all, shared by the "
                   f"parallel sequences (default {defaults.CONTEXT} per sequence)")
    p.add_argument("--batch-size", type=int, default=defaults.BATCH)
    p.add_argument("--threads", type=int)
    p.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--kv-cache-type", choices=tuple(CACHE_TYPES),
                   default=defaults.KV_CACHE_TYPE)
    p.add_argument("--multiuser-cache", action="store_true",
                   help="fork the best cached prefix into the least recently used slot")
    p.add_argument("--swa-full", action="store_true",
                   help="sliding-window layers keep the whole context, not only their window "
                        "(more memory; any cached prefix can be resumed)")
    p.add_argument("--checkpoints", type=int, default=None, metavar="N",
                   help="recurrent states a sequence keeps to resume a later prompt from "
                        "(hybrid models; default: up to 4, within the KV cache's bytes)")
    p.add_argument("--no-shift", action="store_true",
                   help="a full context ends the generation (reason length) by default")
    p.add_argument("--no-overlap", action="store_true",
                   help="do not build the next batch's graph while one computes (nor "
                        "queue greedy steps behind it on the CPU)")
    add_device_flags(p)
    p.add_argument("--no-load", action="store_true", help="wait for POST /load")
    p.add_argument("--no-pull", action="store_true",
                   help="a model name that is not in the store is an error (default: pull it)")
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds in-flight streams get to finish after SIGTERM")
    return p


class Server(uvicorn.Server):
    """uvicorn, with a drain of the engine when a signal asks the process to stop."""

    def __init__(self, config: uvicorn.Config, state: RunnerState, grace: float):
        super().__init__(config)
        self.state, self.grace = state, grace

    def handle_exit(self, sig, frame) -> None:
        engine = self.state.engine
        if not self.should_exit:
            _exit_after(self.grace + EXIT_MARGIN)
        if not self.should_exit and engine is not None:
            log.info("Stopping: in-flight requests have %.0f s to finish.", self.grace)
            engine.drain()
            timer = threading.Timer(self.grace, engine.end_active,
                                    ("The runner is shutting down; the generation was cut "
                                     "short.",))
            timer.daemon = True
            timer.start()
        super().handle_exit(sig, frame)


def _exit_after(seconds: float) -> None:
    """Exit after seconds, stopped or not: a runner whose batch loop never returns (a graph
    stuck in ggml, a device that stopped answering mid-compute) cannot finish its shutdown,
    which waits for that loop, and would outlive its server (SIGTERM is also what it gets
    when the server dies)."""
    def leave() -> None:
        log.error("The runner did not stop within %.0f s of being told to; it exits now.",
                  seconds)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(seconds, leave)
    timer.daemon = True
    timer.start()


def _commit(state: RunnerState, layout: Layout) -> None:
    try:
        state.commit(layout)
        log.info("Model loaded: %s", state.path)
    except Exception:                              # noqa: BLE001 - health reports it
        pass


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        layout = Layout(parallel=args.parallel, batch_size=args.batch_size,
                        ctx_size=args.ctx_size or 4096 * args.parallel, threads=args.threads,
                        flash_attn=args.flash_attn, kv_cache_type=args.kv_cache_type,
                        multiuser_cache=args.multiuser_cache, overlap=not args.no_overlap,
                        swa_full=args.swa_full, checkpoints=args.checkpoints,
                        devices=device_options(args))
        layout.check()
        state = RunnerState(args.model, pull=not args.no_pull, projector=args.mmproj)
        accelerators(layout.devices)          # the RPC servers' devices join /info now
    except (ValueError, FileNotFoundError, store.StoreError, pyggml.GGMLError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    state.layout, state.shift_default = layout, not args.no_shift
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", args.port))
        sock.listen(128)          # connections queue from now on, before uvicorn serves
    except OSError as error:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {error}", file=sys.stderr)
        return 1
    print(f"runner listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
    app = create_app(state, os.environ.pop("RUNNER_SECRET", None))
    config = uvicorn.Config(app, log_config=None, access_log=False,
                            timeout_graceful_shutdown=int(args.grace) + 5)
    server = Server(config, state, args.grace)
    if not args.no_load:
        threading.Thread(target=_commit, args=(state, layout), daemon=True).start()
    # uvicorn raises the signal again once it has shut down gracefully: let that be a no-op
    # so the process exits 0
    signal.signal(signal.SIGTERM, lambda *_: None)
    server.run(sockets=[sock])
    state.close()
    return 0
