"""Encoding an image and the prefill of its rows: ours beside llama.cpp's libmtmd.

    python bench/vision.py [--threads 2] [--repeat 3] [--layers 27] [--flash]

Gemma 3's vision tower at its real size (SigLIP at 896 px, 27 layers 1152 wide with
4304-wide MLPs and 16 heads, pooled to 256 rows) with random F16 weights, written once as an
mmproj next to the store, paired with the real Gemma 3 270M text model (so the projection is
640 wide). Encode: one image through the tower and projector (a new image each time, so no
cache hit). Prefill: the 256 rows, between their begin and end tokens, in one batch of the
text model. Seconds and rows/s, best of --repeat; llama.cpp through llama-cpp-python
(`pip install '.[llamacpp]'`), which decodes the rows with mtmd_helper_decode_image_chunk.
"""

from __future__ import annotations

import argparse
import ctypes
import io
import itertools
import time
from pathlib import Path

import gguf
import numpy as np
from engines import mtmd_chunk

import runner
from runner.convert.mmproj import write_vit
from runner.engine.batch import Batch
from runner.loading import store
from runner.multimodal.media import MediaRow, attach_media, token_ids

TEXT = "gemma3:270m"
SIGLIP = dict(hidden_size=1152, intermediate_size=4304, num_attention_heads=16,
              image_size=896, patch_size=14, layer_norm_eps=1e-6,
              hidden_act="gelu_pytorch_tanh")


def mmproj(layers: int, text_embd: int) -> Path:
    """A Gemma 3 mmproj of the real tower's size, random F16 weights (made once)."""
    path = store.store_dir() / f"bench-gemma3-mmproj-{layers}.gguf"
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    d, f, p = SIGLIP["hidden_size"], SIGLIP["intermediate_size"], SIGLIP["patch_size"]
    side = SIGLIP["image_size"] // p
    partial = path.with_suffix(".part")
    writer = gguf.GGUFWriter(str(partial), "clip")
    writer.add_string(gguf.Keys.Clip.PROJECTOR_TYPE, "gemma3")
    write_vit(writer, dict(SIGLIP, num_hidden_layers=layers), text_embd, (0.5,) * 3,
              (0.5,) * 3)
    writer.add_uint32(gguf.Keys.ClipVision.Projector.SCALE_FACTOR, 4)

    def matrix(*shape):
        return (rng.standard_normal(shape, np.float32) / np.sqrt(shape[-1])).astype(np.float16)

    def vector(n, one=False):
        return (np.ones(n) if one else 0.02 * rng.standard_normal(n)).astype(np.float32)

    writer.add_tensor("v.patch_embd.weight", matrix(d, 3, p, p).reshape(d, 3, p, p))
    writer.add_tensor("v.patch_embd.bias", vector(d))
    writer.add_tensor("v.position_embd.weight", matrix(side * side, d).astype(np.float32))
    for i in range(layers):
        for name, shape in (("attn_q", (d, d)), ("attn_k", (d, d)), ("attn_v", (d, d)),
                            ("attn_out", (d, d)), ("ffn_up", (f, d)), ("ffn_down", (d, f))):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", matrix(*shape))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", vector(shape[0]))
        for norm in ("ln1", "ln2"):
            writer.add_tensor(f"v.blk.{i}.{norm}.weight", vector(d, one=True))
            writer.add_tensor(f"v.blk.{i}.{norm}.bias", vector(d))
    writer.add_tensor("v.post_ln.weight", vector(d, one=True))
    writer.add_tensor("v.post_ln.bias", vector(d))
    writer.add_tensor("mm.soft_emb_norm.weight", vector(d, one=True))
    writer.add_tensor("mm.input_projection.weight", matrix(d, text_embd))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(path)  # an interrupted run leaves no file a later one would trust
    return path


def photo(seed: int, width: int = 1024, height: int = 768) -> tuple[bytes, np.ndarray]:
    from PIL import Image

    rgb = np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "PNG")
    return out.getvalue(), rgb


def ours(text: Path, projector: Path, args) -> tuple[float, float]:
    model = runner.load(text, projector=projector, threads=args.threads, num_ctx=1024,
                        flash_attn=args.flash)
    multimodal, best = model.multimodal, [np.inf, np.inf]
    try:
        for attempt in range(args.repeat + 1):               # the first warms up
            data, _ = photo(attempt)
            media, = multimodal.media(data)
            start = time.perf_counter()
            media.embedding()
            encode = time.perf_counter() - start
            items = multimodal.before["image"] + media.items() + multimodal.after["image"]
            n = len(items)
            batch = Batch(token_ids(items), np.arange(n), np.zeros(n))
            attach_media(batch, items, itertools.count())
            start = time.perf_counter()
            model.executor.logits(batch)
            prefill = time.perf_counter() - start
            model.kv.remove(0)
            model.executor.forget()
            if attempt:
                best = [min(best[0], encode), min(best[1], prefill)]
        assert sum(isinstance(t, MediaRow) for t in items) == 256
    finally:
        model.close()
    return best[0], best[1]


def llama_cpp_mtmd(text: Path, projector: Path, args) -> tuple[float, float]:
    import llama_cpp as L
    import llama_cpp.mtmd_cpp as M

    L.llama_backend_init()
    quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(
        lambda level, text, user: None)
    L.llama_log_set(quiet, None)
    model = L.llama_model_load_from_file(str(text).encode(), L.llama_model_default_params())
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 1024, 512, 512
    params.n_threads = params.n_threads_batch = args.threads
    params.flash_attn_type = 1 if args.flash else 0
    ctx = L.llama_init_from_model(model, params)
    mparams = M.mtmd_context_params_default()
    mparams.use_gpu, mparams.n_threads, mparams.print_timings = False, args.threads, False
    mparams.flash_attn_type = 1 if args.flash else 0
    mctx = M.mtmd_init_from_file(str(projector).encode(), model, mparams)
    best = [np.inf, np.inf]
    try:
        for attempt in range(args.repeat + 1):
            _, rgb = photo(attempt)
            height, width, _ = rgb.shape
            bitmap = M.mtmd_bitmap_init(width, height, (ctypes.c_uint8 * rgb.size)
                                        .from_buffer_copy(rgb.tobytes()))
            chunks, chunk = mtmd_chunk(mctx, bitmap, M.MTMD_INPUT_CHUNK_TYPE_IMAGE)
            start = time.perf_counter()
            M.mtmd_encode_chunk(mctx, chunk)
            encode = time.perf_counter() - start
            embd = M.mtmd_get_output_embd(mctx)
            new_past = L.llama_pos(0)
            start = time.perf_counter()
            M.mtmd_helper_decode_image_chunk(mctx, ctx, chunk, embd, 0, 0, 512,
                                             ctypes.byref(new_past),
                                             M.mtmd_helper_post_decode_callback(), None)
            prefill = time.perf_counter() - start
            L.llama_memory_seq_rm(L.llama_get_memory(ctx), 0, 0, -1)
            M.mtmd_input_chunks_free(chunks)
            M.mtmd_bitmap_free(bitmap)
            if attempt:
                best = [min(best[0], encode), min(best[1], prefill)]
    finally:
        M.mtmd_free(mctx)
        L.llama_free(ctx)
        L.llama_model_free(model)
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", type=int, default=27)
    parser.add_argument("--flash", action="store_true")
    args = parser.parse_args()
    text = store.pull(TEXT, progress=False)
    projector = mmproj(args.layers, 640)
    rows = [("ours", *ours(text, projector, args))]
    try:
        import llama_cpp  # noqa: F401
        rows.append(("llama.cpp", *llama_cpp_mtmd(text, projector, args)))
    except ImportError:
        print("(llama-cpp-python is not installed: ours alone)")
    print(f"Gemma 3 vision, {args.layers} layers, 896 px -> 256 rows; {TEXT}; "
          f"{args.threads} threads, flash attention {'on' if args.flash else 'off'}")
    print(f"{'engine':<10} {'encode s':>9} {'prefill s':>10} {'prefill rows/s':>15}")
    for name, encode, prefill in rows:
        print(f"{name:<10} {encode:>9.3f} {prefill:>10.3f} {258 / prefill:>15.1f}")
    if len(rows) == 2:
        print(f"{'ratio':<10} {rows[1][1] / rows[0][1]:>9.2f} {rows[1][2] / rows[0][2]:>10.2f}"
              "   (llama.cpp time / ours: above 1, ours is faster)")


if __name__ == "__main__":
    main()
