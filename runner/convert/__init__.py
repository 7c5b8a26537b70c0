"""Hugging Face checkpoint -> GGUF, as llama.cpp's converter writes it.

    from runner.convert import convert
    convert("path/to/hf_dir", "out.gguf", outtype="f16")

Norms, biases and other 1-D tensors stay F32; matrices take outtype (f32, f16, bf16 or
q8_0). Tensors stream to the file one at a time, with a progress bar.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from .architectures import architecture_of, transform, unwrap_multimodal
from .checkpoint import Checkpoint, CheckpointError, reading
from .experts import fuse_experts
from .sentence import pooling_of
from .hyper import Hyper, write_hparams
from .sizes import check_sizes
from .mmproj import write_mmproj
from .vocab import write_tokenizer
from .writing import FILE_TYPES, OUTTYPES, check_outtype, write_tensors

__all__ = ["convert", "CheckpointError", "OUTTYPES"]

# buffers and heads the runner does not use (llama.cpp's converter skips them too)
SKIPPED = ("rotary_emb.inv_freq", "position_ids", "pooler.", "cls.predictions")
# F32 whatever the output type, as llama.cpp's converter keeps them: token types are read
# as a row and added; an expert router's small errors would flip which experts it picks;
# biases, the experts' (gpt-oss: (experts, rows)) too, as every tensor not named .weight;
# a recurrent layer's convolution kernel (ggml's ssm_conv reads F32); norms, whatever their
# shape (Command R+'s weights per head: ggml's CPU multiplies F32 by no F16)
KEEP_F32 = ("token_types.weight", "ffn_gate_inp.weight", ".bias", "ssm_conv1d.weight",
            "_norm.weight")


def convert(hf_dir, out, outtype: str = "f16", progress: bool = True,
            mmproj=None) -> Path:
    """The text model to out; with mmproj, a multimodal checkpoint's vision tower and
    projector to that file too, as llama.cpp's mmproj files are."""
    check_outtype(outtype)
    if mmproj is not None:
        with reading("config.json"):
            write_mmproj(_read(hf_dir), mmproj, outtype, progress)
    checkpoint = _read(hf_dir)
    out = Path(out)
    with reading("config.json"):
        unwrap_multimodal(checkpoint)
        fuse_experts(checkpoint)
        arch = architecture_of(checkpoint.config)
        if arch.prepare is not None:
            arch.prepare(checkpoint)
        h = arch.hyper_of(checkpoint.config)
        tensors = _tensor_plan(checkpoint, arch, h)
        writer = gguf.GGUFWriter(str(out), arch.name)
        writer.add_name(checkpoint.dir.name)
        writer.add_file_type(FILE_TYPES[outtype])
        write_hparams(writer, h)
        if arch.hparams is not None:
            arch.hparams(writer, checkpoint.config, h, checkpoint.dir)
    with reading("modules.json or a sentence-transformers module's config.json"):
        pooling = pooling_of(checkpoint.dir, arch.pooling)
    if pooling is not None:                  # an embedding model
        writer.add_pooling_type(pooling)
    with reading("A tokenizer file (tokenizer.json, tokenizer_config.json, vocab.txt)"):
        write_tokenizer(writer, checkpoint, h.vocab, arch.space_prefix)
    write_tensors(writer, tensors, outtype, KEEP_F32,
                  lambda name: arch.shape_of(name, h, checkpoint.config), progress)
    return out


def _read(hf_dir) -> Checkpoint:
    """The checkpoint, its config's sizes checked against its tensors (sizes.py) before
    anything is built from them."""
    checkpoint = Checkpoint(hf_dir)
    check_sizes(checkpoint.config, checkpoint.tensors)
    check_sizes(checkpoint.generation, checkpoint.tensors, "generation_config.json")
    return checkpoint


def _tensor_plan(checkpoint: Checkpoint, arch, h: Hyper) -> dict:
    """GGUF name -> (shape, loader of the float32 data), in file order."""
    names = gguf.get_tensor_name_map(arch.arch, h.layers)
    plan = {}
    for entry in checkpoint.tensors.values():
        if any(part in entry.name for part in SKIPPED):
            continue
        pieces = arch.split(entry, checkpoint.config) if arch.split else None
        if pieces is not None:                   # {}: a tensor the GGUF leaves out
            plan.update(pieces)
            continue
        name = names.get_name(entry.name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise CheckpointError(f"The tensor {entry.name} has no GGUF name for {arch.name}.")
        if not name.endswith((".weight", ".bias")):    # a parameter named without .weight
            name += ".weight"
        plan[name] = (entry.shape,
                      lambda entry=entry, name=name: transform(arch, name, entry.load(), h))
    for name, array in arch.extra_of(checkpoint.config, h).items():
        plan[name] = (array.shape, lambda array=array: array)
    if "token_embd.weight" not in plan:
        raise CheckpointError("The checkpoint has no token embeddings.")
    if checkpoint.config.get("tie_word_embeddings") and "output.weight" in plan and \
            _same(checkpoint, plan):
        del plan["output.weight"]                # the runner ties them, as llama.cpp does
    return plan


def _same(checkpoint, plan) -> bool:
    return np.array_equal(plan["output.weight"][1](), plan["token_embd.weight"][1]())

