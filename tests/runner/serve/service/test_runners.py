"""The server's runners answer only the server: each gets a secret in its environment (never
on its command line) and refuses requests without it, so another local process cannot load,
unload or drive a model behind the server's back."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.server import generate


def listening_ports(pid: int) -> list[int]:
    """The TCP ports a process listens on, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = str(fd.readlink()) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:              # LISTEN
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_a_runner_refuses_requests_without_the_servers_secret(server):
    assert generate(server).status_code == 200
    pids = server.runner_pids()
    assert pids
    for pid in pids:
        assert "RUNNER_SECRET" not in Path(f"/proc/{pid}/cmdline").read_text()
        (port,) = listening_ports(pid)
        for method, path, body in (("POST", "/load", {"Operation": 3}), ("GET", "/health", None),
                                   ("POST", "/completion", {"prompt": "Hi"})):
            answer = httpx.request(method, f"http://127.0.0.1:{port}{path}", json=body)
            assert answer.status_code == 401 and "secret" in answer.json()["error"]
            forged = httpx.request(method, f"http://127.0.0.1:{port}{path}", json=body,
                                   headers={"Authorization": "Bearer guess"})
            assert forged.status_code == 401
    again = generate(server)
    assert again.status_code == 200 and again.json()["done"]
