"""`python -m runner` run as a user runs it: a subprocess, from a directory outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def cli(*args, stdin: str = "", env=None):
    # from a neutral directory: in a checkout, `python -m` would import the source tree
    return subprocess.run([sys.executable, "-m", "runner", *args], input=stdin, text=True,
                          capture_output=True, timeout=300, cwd=tempfile.gettempdir(),
                          env={**os.environ, **(env or {})})
