"""`python -m pyggml`: what this build of ggml offers (backends, devices, features)."""

import json
from importlib import resources

from . import system_info

print(system_info())
info = json.loads(resources.files("pyggml").joinpath("build_info.json").read_text())
tree = info.get("ggml_tree") or {}
print(f"ggml tree sha256 {tree.get('tree_sha256', 'unknown (local tree)')}, "
      f"patches: {', '.join(tree.get('recipe', {}).get('patches', {})) or 'none'}")
