"""The families that landed since the GPU machine last saw the runner, once each with every
layer on a GPU beside the CPU (the GPU issue's "once each" list): Qwen 3.5 and 3.5 MoE (gated
DeltaNet: SSM_CONV, GATED_DELTA_NET and the recurrent states on CUDA), gpt-oss with its
experts in MXFP4, and an image through the splice (Gemma 3's SigLIP).

Tiny random checkpoints (the tests' own builders), converted here, where transformers makes
them; their files (5 MiB) are small enough to travel beside the CUDA build. The DeltaNets
take the real head size (128), the one CUDA's kernel runs for the released models, and
Q4_K_M weights (hidden 256), as users run them; the others are f32 (gpt-oss's experts stay
MXFP4).

Random weights make these tiny models ill-conditioned: quantizing the activations for a
product (Q8_K on the CPU, Q8_1 on CUDA) moves a Q4_K_M file's first log-probability by up
to 0.2, and its first token where the CPU's margin is 0.6 (H200, 2026-11-28: so did the
CPU's own Q4_K_M against the same weights in f32, by 0.08). So each quantized file is also
compared with its weights dequantized to f32, made there: that comparison shows faults.

    python bench/device/families.py make .device/families      # here, about a minute
    python bench/device/families.py check .device/families     # there (bench/offload.py's
                                                                # table, per family)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "bench"))                # offload.py (after the stdlib: profile.py)

MANIFEST = "families.json"
# the DeltaNets at the released models' head size, wide enough for K-quants, and small
# enough to travel beside the CUDA build (three DeltaNet layers and an attention layer)
DELTANET = dict(hidden_size=256, intermediate_size=256, num_hidden_layers=4,
                linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=1,
                linear_num_value_heads=2, head_dim=64)
IMAGE_PROMPT = "Say what [img-0] shows, in a few words."


def make(directory: Path) -> None:
    """The tiny files and an image, with a manifest: [{name, model, projector?, image?}]."""
    sys.path.insert(0, str(ROOT))      # the tests' builders (check imports the installed build)
    from runner.convert import convert
    from runner.convert.quantize import quantize_file
    from tests.support import hf_vision
    from tests.support.hf_released import mxfp4_checkpoints
    from tests.support.hf_tiny import checkpoint

    directory.mkdir(parents=True, exist_ok=True)
    work = directory / "work"
    entries = []
    for kind in ("qwen3_5", "qwen3_5_moe"):     # Qwen3-Next's ops are these; it would not travel
        hf = checkpoint(kind, work / kind, **DELTANET)
        f32 = convert(hf, work / f"{kind}-f32.gguf", "f32", progress=False)
        model = quantize_file(f32, directory / f"{kind}-Q4_K_M.gguf", "Q4_K_M", progress=False)
        entries.append({"name": f"{kind} Q4_K_M", "model": Path(model).name,
                        "quantized": True})
    mxfp4, _ = mxfp4_checkpoints(work / "gpt_oss")
    convert(mxfp4, directory / "gpt_oss-mxfp4.gguf", "f32", progress=False)
    entries.append({"name": "gpt-oss MXFP4", "model": "gpt_oss-mxfp4.gguf",
                    "prompt": 32})                       # its context is 64
    (directory / "image.png").write_bytes(hf_vision.png(7, 48, 64))
    for kind in ("gemma3",):       # Qwen 3.5's tower too would not travel beside the build
        hf = getattr(hf_vision, kind)(work / f"{kind}-vision")
        convert(hf, directory / f"{kind}-vision.gguf", "f32", progress=False,
                mmproj=directory / f"{kind}-mmproj.gguf")
        entries.append({"name": f"{kind} image", "model": f"{kind}-vision.gguf",
                        "projector": f"{kind}-mmproj.gguf", "image": "image.png"})
    (directory / MANIFEST).write_text(json.dumps(entries, indent=1))
    import shutil
    shutil.rmtree(work)


def check(directory: Path, threads: int, prompt: int, generate: int) -> None:
    """Per family, flash attention off then on: every layer on the CPU, then half and all of
    them on the first GPU; a quantized file again with its weights dequantized to f32 ("name
    f32", made once), where neither device quantizes the activations (see the module's
    note)."""
    import tempfile

    import offload

    with tempfile.TemporaryDirectory() as scratch:
        runs = []                                  # (name, model, prompt length, extra)
        for entry in json.loads((directory / MANIFEST).read_text()):
            extra = {key: directory / entry[key] for key in ("projector", "image")
                     if key in entry}
            model, length = directory / entry["model"], min(prompt, entry.get("prompt", prompt))
            runs.append((entry["name"], model, length, extra))
            if entry.get("quantized"):
                runs.append((f"{entry['name']} f32",
                             dequantized(model, Path(scratch) / f"{model.stem}-f32.gguf"),
                             length, extra))
        for flash in (False, True):
            print(f"flash attention {'on' if flash else 'off'}")
            print(offload.HEADER)
            for name, path, length, extra in runs:
                try:
                    offload.compare_placements(path, name, length, generate, threads, flash,
                                               {}, image_prompt=IMAGE_PROMPT, **extra)
                except Exception as error:         # one family's fault: the next still runs
                    print(f"{name}: failed: {type(error).__name__}: {error}", flush=True)


def dequantized(source: Path, target: Path) -> Path:
    """source with every tensor in float32 (the values its quantized blocks encode)."""
    import gguf
    import numpy as np
    from gguf.quants import dequantize

    from pyggml.gguf_reader import Header
    from runner.convert.quantize import copy_metadata

    header = Header(source)
    writer = gguf.GGUFWriter(str(target), header.metadata["general.architecture"])
    copy_metadata(header, writer)
    for tensor in gguf.GGUFReader(source).tensors:
        shape = tuple(reversed([int(n) for n in tensor.shape]))
        values = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, np.ascontiguousarray(values.reshape(shape)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("make", "check"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=100)
    parser.add_argument("--generate", type=int, default=16)
    args = parser.parse_args()
    if args.action == "make":
        make(args.directory)
    else:
        check(args.directory, args.threads, args.prompt, args.generate)


if __name__ == "__main__":
    main()
