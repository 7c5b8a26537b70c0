"""`python -m pyggml [info | rpc-server ...]`: what this build offers; serve a device."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from importlib import resources

from . import GGMLError, devices, rpc, system_info

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def cmd_info(args) -> int:
    print(system_info())
    info = json.loads(resources.files("pyggml").joinpath("build_info.json").read_text())
    tree = info.get("ggml_tree") or {}
    print(f"ggml tree sha256 {tree.get('tree_sha256', 'unknown (local tree)')}, "
          f"patches: {', '.join(tree.get('recipe', {}).get('patches', {})) or 'none'}")
    return 0


def served_device(name: str | None):
    """The named device, or as llama.cpp's rpc-server picks: the first GPU, else the CPU."""
    found = devices()
    if name is not None:
        for device in found:
            if device.name == name:
                return device
        raise ValueError(f"No device named {name!r}; this machine has "
                         f"{', '.join(d.name for d in found)}.")
    return next((d for d in found if d.type in ("gpu", "igpu")), found[-1] if found else None)


def cmd_rpc_server(args) -> int:
    device = served_device(args.device)
    if args.host not in LOOPBACK:
        print(f"WARNING: serving on {args.host}, not loopback. The RPC protocol has no "
              "authentication and no encryption: anyone who can reach this port can run code "
              "on this device and read its memory. Use it on a trusted network only.",
              file=sys.stderr, flush=True)
    print(f"pyggml rpc-server: {device.name} ({device.description}) on "
          f"{args.host}:{args.port}", flush=True)
    # the server loop blocks in C; serving from a daemon thread keeps Ctrl-C and SIGTERM prompt
    failed: list[Exception] = []

    def run():
        try:
            rpc.serve(device, args.host, args.port, args.threads)
        except (GGMLError, ValueError) as error:
            failed.append(error)

    thread = threading.Thread(target=run, name="rpc-server", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        return 0
    if failed:
        raise failed[0]
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m pyggml", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command")
    sub.add_parser("info", help="backends, devices, CPU features, the ggml tree (default)")
    server = sub.add_parser("rpc-server", help="serve a device of this machine to ggml RPC "
                            "clients (runner --rpc HOST:PORT)")
    server.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default loopback; the protocol has no "
                        "authentication)")
    server.add_argument("--port", type=int, default=rpc.DEFAULT_PORT)
    server.add_argument("--device", help="device name (default: the first GPU, else the CPU)")
    server.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    return top


COMMANDS = {None: cmd_info, "info": cmd_info, "rpc-server": cmd_rpc_server}


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (GGMLError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
