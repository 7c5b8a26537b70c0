"""The official JavaScript clients (`ollama`, `openai` from npm) against a real server: the
JS side is peers/clients.test.mjs, run with node's test runner. Slow (it installs the clients
with npm, which needs the npm registry): `pytest -m slow tests/runner/serve/test_js_clients.py`;
skipped without node and npm."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.server import ServerProcess

HERE = Path(__file__).parent / "peers"
CLIENTS = ("ollama@0.6", "openai@6")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory):
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    work = tmp_path_factory.mktemp("js")
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                           *CLIENTS], cwd=work, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.skip(f"npm could not install the clients: {done.stderr.strip()[-500:]}")
    return work / "node_modules"


def test_the_javascript_clients_work_against_the_server(node_modules, models_dir, tmp_path):
    (tmp_path / "node_modules").symlink_to(node_modules)
    script = tmp_path / "clients.test.mjs"
    shutil.copy(HERE / "clients.test.mjs", script)
    running = ServerProcess(models_dir, tmp_path, RUNNER_NUM_PARALLEL=2)
    try:
        done = subprocess.run(["node", "--test", str(script)], cwd=tmp_path, text=True,
                              capture_output=True, timeout=900,
                              env={**os.environ, "RUNNER_URL": running.url})
    finally:
        assert running.stop() == 0
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# pass 8" in done.stdout and "# fail 0" in done.stdout, done.stdout[-2000:]
