"""Real ggml RPC servers for tests: `python -m pyggml rpc-server` on a free loopback port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RPCServer:
    def __init__(self, threads: int = 1, *flags: str):
        self.port = int(flags[flags.index("--port") + 1]) if "--port" in flags else free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="rpc-server-", suffix=".log")
        # started outside the source tree, so that the installed package runs
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyggml", "rpc-server", "--threads", str(threads),
             *(flags if "--port" in flags else ("--port", str(self.port), *flags))],
            cwd=tempfile.gettempdir(), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not self._listening():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"The RPC server did not start:\n{self.output()}")
            time.sleep(0.05)

    def _listening(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def rpc_server(threads: int = 1, *flags: str):
    server = RPCServer(threads, *flags)
    try:
        yield server
    finally:
        server.kill()
        server.log.close()
