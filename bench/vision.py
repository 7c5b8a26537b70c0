"""Encoding an image and the prefill of its rows: ours beside llama.cpp's libmtmd.

    python bench/vision.py [--tower gemma3|pixtral|qwen2.5vl|qwen3vl] [--threads 2]
                           [--repeat 3]
                           [--layers N]
                           [--flash]

A vision tower at its real size with random F16 weights, written once as an mmproj next to
the store, paired with the real Gemma 3 270M text model (so the projection is 640 wide):
gemma3, SigLIP at 896 px (27 layers 1152 wide with 4304-wide MLPs and 16 heads, pooled to
256 rows); pixtral, Mistral Small 3.1's (24 layers 1024 wide, 4096-wide gated MLPs, 16
heads, patches of 14 merged 2 x 2, images up to 1540 px: the 1024 x 768 image makes 74 x 56
patches, 37 x 28 rows and 27 breaks); qwen2.5vl, Qwen2.5-VL 7B's (32 layers 1280 wide,
3420-wide SwiGLU MLPs, 16 heads, windows of 112 px but in every eighth block, patches of 14
merged 2 x 2: the 1024 x 768 image is resized to 1036 x 756, 74 x 54 patches, 37 x 27 rows;
encode only: its layout's <|vision_start|> is not in Gemma 3's vocabulary, and a prefill
without M-RoPE would not be Qwen's); qwen3vl, Qwen3-VL 8B's (27 layers 1152 wide, 4304-wide
tanh-GELU MLPs, 16 heads, a 48 x 48 learned position table, patches of 16 merged 2 x 2, no
windows, deepstack mergers after blocks 8, 16 and 24: the 1024 x 768 image makes 64 x 48
patches, 32 x 24 rows; encode only, and its mergers project to 160 so that a row and its
three deepstack rows fill Gemma 3's 640, where the real model's 4096 each would add about a
twentieth to the work). Encode: one 1024 x 768 image through the tower and
projector (a new image each time, so no cache hit). Prefill: its rows, with the layout's
tokens around them, in one batch of the text model. Seconds and rows/s, best of --repeat;
llama.cpp through llama-cpp-python (`pip install '.[llamacpp]'`), which decodes the rows
with mtmd_helper_decode_image_chunk.
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

import pyggml
import runner
from runner.convert.mmproj import write_vit
from runner.engine.batch import Batch
from runner.loading import store
from runner.loading.loader import open_model
from runner.models.vision import images
from runner.models.vision.images import CLIP_MEAN, CLIP_STD
from runner.multimodal.encoder import Encoder
from runner.multimodal.media import MediaRow, attach_media, token_ids

TEXT = "gemma3:270m-base"
SIGLIP = dict(hidden_size=1152, intermediate_size=4304, num_attention_heads=16,
              image_size=896, patch_size=14, layer_norm_eps=1e-6,
              hidden_act="gelu_pytorch_tanh")
PIXTRAL = dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
               image_size=1540, patch_size=14, layer_norm_eps=1e-5, hidden_act="silu")
QWEN25 = dict(hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14, depth=32,
              window_size=112)
QWEN3 = dict(hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16, depth=27,
             positions=48 * 48, deepstack=(8, 16, 24))
LAYERS = {"gemma3": 27, "pixtral": 24, "qwen2.5vl": 32, "qwen3vl": 27}
PROJECTOR_TYPES = {"qwen2.5vl": "qwen2.5vl_merger", "qwen3vl": "qwen3vl_merger"}  # else its name
ENCODE_ONLY = {"qwen2.5vl", "qwen3vl"}  # the text model cannot hold their rows (see above)


def mmproj(tower: str, layers: int, text_embd: int) -> Path:
    """An mmproj of the real tower's size, random F16 weights (made once)."""
    path = store.store_dir() / f"bench-{tower}-mmproj-{layers}.gguf"
    if path.exists():
        return path
    rng = np.random.default_rng(0)

    def matrix(*shape):
        return (rng.standard_normal(shape, np.float32) / np.sqrt(shape[-1])).astype(np.float16)

    def vector(n, one=False):
        return (np.ones(n) if one else 0.02 * rng.standard_normal(n)).astype(np.float32)

    partial = path.with_suffix(".part")
    writer = gguf.GGUFWriter(str(partial), "clip")
    writer.add_string(gguf.Keys.Clip.PROJECTOR_TYPE, PROJECTOR_TYPES.get(tower, tower))
    WRITERS[tower](writer, layers, text_embd, matrix, vector)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(path)  # an interrupted run leaves no file a later one would trust
    return path


def pixtral_tensors(writer, layers: int, text_embd: int, matrix, vector) -> None:
    d, f, p = PIXTRAL["hidden_size"], PIXTRAL["intermediate_size"], PIXTRAL["patch_size"]
    write_vit(writer, dict(PIXTRAL, num_hidden_layers=layers), text_embd,
              CLIP_MEAN, CLIP_STD)
    writer.add_uint32(gguf.Keys.ClipVision.SPATIAL_MERGE_SIZE, 2)
    writer.add_tensor("v.patch_embd.weight", matrix(d, 3, p, p).reshape(d, 3, p, p))
    writer.add_tensor("v.pre_ln.weight", vector(d, one=True))
    for i in range(layers):
        for name, shape in (("attn_q", (d, d)), ("attn_k", (d, d)), ("attn_v", (d, d)),
                            ("attn_out", (d, d)), ("ffn_gate", (f, d)), ("ffn_up", (f, d)),
                            ("ffn_down", (d, f))):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", matrix(*shape))
        for norm in ("ln1", "ln2"):
            writer.add_tensor(f"v.blk.{i}.{norm}.weight", vector(d, one=True))
    writer.add_tensor("mm.input_norm.weight", vector(d, one=True))
    writer.add_tensor("mm.patch_merger.weight", matrix(d, 4 * d))
    writer.add_tensor("mm.1.weight", matrix(text_embd, d))
    writer.add_tensor("mm.2.weight", matrix(text_embd, text_embd))
    writer.add_tensor("v.token_embd.img_break", vector(text_embd))


def gemma3_tensors(writer, layers: int, text_embd: int, matrix, vector) -> None:
    d, f, p = SIGLIP["hidden_size"], SIGLIP["intermediate_size"], SIGLIP["patch_size"]
    side = SIGLIP["image_size"] // p
    write_vit(writer, dict(SIGLIP, num_hidden_layers=layers), text_embd, (0.5,) * 3,
              (0.5,) * 3)
    writer.add_uint32(gguf.Keys.ClipVision.Projector.SCALE_FACTOR, 4)
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


def qwen25_tensors(writer, layers: int, text_embd: int, matrix, vector) -> None:
    d, f, p = QWEN25["hidden_size"], QWEN25["intermediate_size"], QWEN25["patch_size"]
    write_vit(writer, dict(image_size=560, patch_size=p, hidden_size=d, intermediate_size=f,
                           num_hidden_layers=layers, num_attention_heads=QWEN25["num_heads"],
                           rms_norm_eps=1e-6, hidden_act="silu"), text_embd,
              CLIP_MEAN, CLIP_STD)
    vision = gguf.Keys.ClipVision
    writer.add_uint32(vision.N_WA_PATTERN, 8)
    writer.add_uint32(vision.WINDOW_SIZE, QWEN25["window_size"])
    writer.add_uint32(vision.SPATIAL_MERGE_SIZE, 2)
    for suffix in ("", ".1"):
        writer.add_tensor(f"v.patch_embd.weight{suffix}", matrix(d, 3, p, p).reshape(d, 3, p, p))
    for i in range(layers):
        for name, shape in (("attn_q", (d, d)), ("attn_k", (d, d)), ("attn_v", (d, d)),
                            ("attn_out", (d, d)), ("ffn_gate", (f, d)), ("ffn_up", (f, d)),
                            ("ffn_down", (d, f))):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", matrix(*shape))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", vector(shape[0]))
        for norm in ("ln1", "ln2"):
            writer.add_tensor(f"v.blk.{i}.{norm}.weight", vector(d, one=True))
    writer.add_tensor("v.post_ln.weight", vector(d, one=True))
    writer.add_tensor("mm.0.weight", matrix(4 * d, 4 * d))
    writer.add_tensor("mm.0.bias", vector(4 * d))
    writer.add_tensor("mm.2.weight", matrix(text_embd, 4 * d))
    writer.add_tensor("mm.2.bias", vector(text_embd))


def qwen3_tensors(writer, layers: int, text_embd: int, matrix, vector) -> None:
    d, f, p = QWEN3["hidden_size"], QWEN3["intermediate_size"], QWEN3["patch_size"]
    deepstack = [i for i in QWEN3["deepstack"] if i < layers]
    out = text_embd // (1 + len(deepstack))              # the rows side by side fill text_embd
    write_vit(writer, dict(image_size=768, patch_size=p, hidden_size=d, intermediate_size=f,
                           num_hidden_layers=layers, num_attention_heads=QWEN3["num_heads"],
                           layer_norm_eps=1e-6), out, (0.5,) * 3, (0.5,) * 3)
    vision = gguf.Keys.ClipVision
    writer.add_uint32(vision.SPATIAL_MERGE_SIZE, 2)
    writer.add_array(vision.IS_DEEPSTACK_LAYERS, [i in deepstack for i in range(layers)])
    for suffix in ("", ".1"):
        writer.add_tensor(f"v.patch_embd.weight{suffix}", matrix(d, 3, p, p).reshape(d, 3, p, p))
    writer.add_tensor("v.patch_embd.bias", vector(d))
    writer.add_tensor("v.position_embd.weight", matrix(QWEN3["positions"], d).astype(np.float32))
    for i in range(layers):
        for name, shape in (("attn_qkv", (3 * d, d)), ("attn_out", (d, d)), ("ffn_up", (f, d)),
                            ("ffn_down", (d, f))):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", matrix(*shape))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", vector(shape[0]))
        for norm in ("ln1", "ln2"):
            writer.add_tensor(f"v.blk.{i}.{norm}.weight", vector(d, one=True))
            writer.add_tensor(f"v.blk.{i}.{norm}.bias", vector(d))
    mergers = [("v.post_ln", "mm.0", "mm.2", d)] + \
        [(f"v.deepstack.{i}.norm", f"v.deepstack.{i}.fc1", f"v.deepstack.{i}.fc2", 4 * d)
         for i in deepstack]
    for norm, fc1, fc2, width in mergers:
        writer.add_tensor(f"{norm}.weight", vector(width, one=True))
        writer.add_tensor(f"{norm}.bias", vector(width))
        writer.add_tensor(f"{fc1}.weight", matrix(4 * d, 4 * d))
        writer.add_tensor(f"{fc1}.bias", vector(4 * d))
        writer.add_tensor(f"{fc2}.weight", matrix(out, 4 * d))
        writer.add_tensor(f"{fc2}.bias", vector(out))


WRITERS = {"gemma3": gemma3_tensors, "pixtral": pixtral_tensors, "qwen2.5vl": qwen25_tensors,
           "qwen3vl": qwen3_tensors}


def photo(seed: int, width: int = 1024, height: int = 768) -> tuple[bytes, np.ndarray]:
    from PIL import Image

    rgb = np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "PNG")
    return out.getvalue(), rgb


def ours_encode(text: Path, projector: Path, args) -> tuple[float, float, int]:
    """The tower alone (through the encoder, as the runner runs it): no prefill."""
    loaded = open_model(text, projector=projector)
    cpu = pyggml.cpu_backend(threads=args.threads)
    loaded.load_projector(cpu.device)
    tower = loaded.projectors["image"]
    encoder = Encoder(tower, pyggml.Scheduler([cpu]), flash=args.flash)
    best = np.inf
    try:
        for attempt in range(args.repeat + 1):               # the first warms up
            data, _ = photo(attempt)
            pixels = tower.preprocess(images.decode(data))
            start = time.perf_counter()
            rows = encoder.encode(b"%d" % attempt, pixels).shape[0]
            if attempt:
                best = min(best, time.perf_counter() - start)
    finally:
        encoder.close()
        loaded.close()
    return best, np.nan, rows


def ours(text: Path, projector: Path, args) -> tuple[float, float, int]:
    if args.tower in ENCODE_ONLY:
        return ours_encode(text, projector, args)
    model = runner.load(text, projector=projector, threads=args.threads, num_ctx=4096,
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
        rows = sum(isinstance(t, MediaRow) for t in items)
    finally:
        model.close()
    return best[0], best[1], rows


def llama_cpp_mtmd(text: Path, projector: Path, args) -> tuple[float, float, int]:
    import llama_cpp as L
    import llama_cpp.mtmd_cpp as M

    L.llama_backend_init()
    quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(
        lambda level, text, user: None)
    L.llama_log_set(quiet, None)
    model = L.llama_model_load_from_file(str(text).encode(), L.llama_model_default_params())
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 2048, 2048, 2048
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
            rows = M.mtmd_input_chunk_get_n_tokens(chunk)
            if args.tower not in ENCODE_ONLY:
                M.mtmd_helper_decode_image_chunk(mctx, ctx, chunk, embd, 0, 0, 2048,
                                                 ctypes.byref(new_past),
                                                 M.mtmd_helper_post_decode_callback(), None)
            prefill = time.perf_counter() - start if args.tower not in ENCODE_ONLY else np.inf
            L.llama_memory_seq_rm(L.llama_get_memory(ctx), 0, 0, -1)
            M.mtmd_input_chunks_free(chunks)
            M.mtmd_bitmap_free(bitmap)
            if attempt:
                best = [min(best[0], encode), min(best[1], prefill)]
    finally:
        M.mtmd_free(mctx)
        L.llama_free(ctx)
        L.llama_model_free(model)
    return best[0], best[1], rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tower", choices=sorted(WRITERS), default="gemma3")
    parser.add_argument("--layers", type=int, help="default: the real tower's")
    parser.add_argument("--flash", action="store_true")
    args = parser.parse_args()
    text = store.pull(TEXT, progress=False)
    layers = args.layers or LAYERS[args.tower]
    projector = mmproj(args.tower, layers, 640)
    rows = [("ours", *ours(text, projector, args))]
    try:
        import llama_cpp  # noqa: F401
        rows.append(("llama.cpp", *llama_cpp_mtmd(text, projector, args)))
    except ImportError:
        print("(llama-cpp-python is not installed: ours alone)")
    print(f"{args.tower} vision, {layers} layers, a 1024 x 768 image; {TEXT}; "
          f"{args.threads} threads, flash attention {'on' if args.flash else 'off'}")
    print(f"{'engine':<10} {'rows':>5} {'encode s':>9} {'prefill s':>10} {'prefill rows/s':>15}")
    for name, encode, prefill, n in rows:
        timed = np.isfinite(prefill)
        print(f"{name:<10} {n:>5} {encode:>9.3f} {f'{prefill:.3f}' if timed else '-':>10} "
              f"{f'{n / prefill:.1f}' if timed else '-':>15}")
    if len(rows) == 2:
        prefills = rows[1][2] / rows[0][2] if np.isfinite(rows[0][2]) else np.nan
        print(f"{'ratio':<10} {rows[1][1] / rows[0][1]:>9.2f} "
              f"{f'{prefills:.2f}' if np.isfinite(prefills) else '-':>10}"
              "   (llama.cpp time / ours: above 1, ours is faster)")


if __name__ == "__main__":
    main()
