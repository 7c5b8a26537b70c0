"""ggml's RPC backend: the devices of other machines, reached over TCP.

`connect("host:port")` asks a server (`python -m pyggml rpc-server`, or llama.cpp's
rpc-server: the protocol is ggml's) for its devices and adds them to `devices()`. They take
tensors and compute like local GPUs; a scheduler moves activations between machines.

The protocol has no authentication and no encryption: serve on loopback or a trusted network.
A server serves one client at a time. An unreachable server is a GGMLError within seconds;
a server that goes away later makes the computes that need it fail (Backend.failure() says
why), never the process.
"""

from __future__ import annotations

import socket
import threading

from ._lib import ffi, lib
from .backend import Device, device_at, rpc_function
from .cpus import default_threads, usable_threads
from .errors import GGMLError

DEFAULT_PORT = 50052
_connected: dict[str, list[int]] = {}        # endpoint -> indices of its devices
_lock = threading.Lock()


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """'host:port' -> (host, port), with a full-sentence error for anything else."""
    host, sep, port = str(endpoint).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"An RPC endpoint is host:port (for example 192.168.1.7:{DEFAULT_PORT}),"
                         f" not {endpoint!r}.")
    return host, int(port)


def connect(endpoint: str) -> list[Device]:
    """The devices of the RPC server at endpoint, added to devices() on first contact."""
    host, port = parse_endpoint(endpoint)
    endpoint = f"{host}:{port}"
    with _lock:
        if endpoint not in _connected:
            add_server = rpc_function("ggml_backend_rpc_add_server",
                                      "ggml_backend_rpc_add_server_t")
            reg = add_server(endpoint.encode())
            if reg == ffi.NULL:
                raise GGMLError(f"The RPC server at {endpoint} cannot be reached: nothing answered "
                                "within 5 seconds, the connection was refused, or the server is "
                                "busy with another client. Start one there with: python -m "
                                f"pyggml rpc-server --host {host} --port {port}")
            lib.ggml_backend_register(reg)
            added = {lib.ggml_backend_reg_dev_get(reg, i)
                     for i in range(lib.ggml_backend_reg_dev_count(reg))}
            _connected[endpoint] = [i for i in range(lib.ggml_backend_dev_count())
                                    if lib.ggml_backend_dev_get(i) in added]
        indices = _connected[endpoint]
    return [device_at(i) for i in indices]


def serve(device: Device, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          threads: int | None = None) -> None:
    """Serve device to RPC clients on host:port until the process ends (blocks; one client at
    a time, as ggml's server does)."""
    try:
        address = socket.gethostbyname(host)          # ggml's server binds IPv4 literals only
    except OSError as error:
        raise ValueError(f"Cannot resolve the host {host!r} to bind: {error}.") from None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as error:
            raise GGMLError(f"Cannot listen on {address}:{port}: {error.strerror}.") from None
    start = rpc_function("ggml_backend_rpc_start_server", "ggml_backend_rpc_start_server_t")
    chosen = ffi.new("struct ggml_backend_device *[1]", [device.ptr])
    threads = usable_threads(threads) if threads else default_threads()
    start(f"{address}:{port}".encode(), ffi.NULL, threads, 1, chosen)
    raise GGMLError(f"The RPC server on {address}:{port} stopped (see the log above).")
