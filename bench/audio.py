"""The real-time factor of Gemma 4's audio encoder: 30 s of audio through the conformer and
the embedder at Gemma 4 E2B's audio dimensions (12 layers 1024 wide, 8 heads, 1536-wide
output) with random weights (F16 matrices, F32 convolutions, as llama.cpp's converter types
them), projected to the real Gemma 3 270M's width (640) so that llama.cpp's mtmd has a text
model to pair it with (E2B's own is 1536 wide: one 1536 x 640 matrix of the 12-layer tower
differs).

    python bench/audio.py [--threads 2] [--repeat 3] [--seconds 30] [--flash]

Prints seconds per encode (best of --repeat, after a warm-up with another clip) and the
real-time factor (encode time / audio duration: below 1 is faster than real time), ours and
llama.cpp's (through llama-cpp-python, `pip install '.[llamacpp]'`, where installed). The
log-mel front ends are timed apart (ours in numpy; llama.cpp's runs as it tokenizes).
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path

import gguf
import numpy as np
from engines import mtmd_chunk

import pyggml
from runner.loading import store
from runner.models.audio import gemma4a, melspec
from runner.models.base import Weights
from runner.multimodal.encoder import Encoder
from runner.multimodal.media import digest_of

TEXT = "gemma3:270m-base"
E2B = dict(embd=1024, layers=12, heads=8, output=1536, text=640, channels=(128, 32),
           kernel=5)


def mmproj() -> Path:
    """A gemma4a mmproj of E2B's audio size, random weights (made once)."""
    path = store.store_dir() / f"bench-gemma4a-mmproj-{E2B['text']}.gguf"
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    d, ffn = E2B["embd"], 4 * E2B["embd"]
    c0, c1 = E2B["channels"]

    def matrix(*shape, dtype=np.float16):
        return (rng.standard_normal(shape, np.float32) / np.sqrt(shape[-1])).astype(dtype)

    def norm(n):
        return (1.0 + 0.05 * rng.standard_normal(n)).astype(np.float32)

    partial = path.with_suffix(".part")
    writer = gguf.GGUFWriter(str(partial), "clip")
    A = gguf.Keys.ClipAudio
    writer.add_bool(gguf.Keys.Clip.HAS_AUDIO_ENCODER, True)
    writer.add_string(A.PROJECTOR_TYPE, "gemma4a")
    for key, value in ((A.EMBEDDING_LENGTH, d), (A.FEED_FORWARD_LENGTH, ffn),
                       (A.BLOCK_COUNT, E2B["layers"]), (A.Attention.HEAD_COUNT, E2B["heads"]),
                       (A.NUM_MEL_BINS, 128), (A.PROJECTION_DIM, E2B["text"])):
        writer.add_uint32(key, value)
    writer.add_float32(A.Attention.LAYERNORM_EPS, 1e-6)
    writer.add_tensor("a.conv1d.0.weight", matrix(c0, 1, 3, 3, dtype=np.float32))
    writer.add_tensor("a.conv1d.0.norm.weight", norm(c0))
    writer.add_tensor("a.conv1d.1.weight", matrix(c1, c0, 3, 3, dtype=np.float32))
    writer.add_tensor("a.conv1d.1.norm.weight", norm(c1))
    writer.add_tensor("a.input_projection.weight", matrix(d, 32 * c1, dtype=np.float32))
    for i in range(E2B["layers"]):
        shapes = {"ffn_up": (ffn, d), "ffn_down": (d, ffn), "ffn_up_1": (ffn, d),
                  "ffn_down_1": (d, ffn), "attn_q": (d, d), "attn_k": (d, d),
                  "attn_v": (d, d), "attn_out": (d, d), "attn_k_rel": (d, d),
                  "conv_pw1": (2 * d, d), "conv_pw2": (d, d)}
        for name, shape in shapes.items():
            writer.add_tensor(f"a.blk.{i}.{name}.weight", matrix(*shape))
        for name in ("ffn_norm", "ffn_post_norm", "attn_pre_norm", "attn_post_norm",
                     "conv_norm", "norm_conv", "ffn_norm_1", "ffn_post_norm_1", "ln2"):
            writer.add_tensor(f"a.blk.{i}.{name}.weight", norm(d))
        writer.add_tensor(f"a.blk.{i}.per_dim_scale.weight", norm(d // E2B["heads"]))
        writer.add_tensor(f"a.blk.{i}.conv_dw.weight",
                          matrix(d, E2B["kernel"], dtype=np.float32))
    writer.add_tensor("a.pre_encode.out.weight", matrix(E2B["output"], d))
    writer.add_tensor("a.pre_encode.out.bias", np.zeros(E2B["output"], np.float32))
    writer.add_tensor("mm.a.input_projection.weight", matrix(E2B["text"], E2B["output"]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(path)
    return path


def speechlike(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * melspec.RATE)) / melspec.RATE
    return (0.3 * np.sin(2 * np.pi * 180 * t * (1 + 0.1 * np.sin(3 * t))) +
            0.05 * rng.standard_normal(t.shape)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--flash", action="store_true",
                        help="llama.cpp's encoder with flash attention (ours has no fused "
                             "form of its blocked attention)")
    args = parser.parse_args()
    gguf_file = pyggml.GGUFFile(mmproj())
    weights = Weights(gguf_file.tensors(), reader=gguf_file.read)
    projector = gemma4a.Gemma4Audio.from_metadata(gguf_file.metadata, weights)
    device = pyggml.cpu_device()
    taken = {name: t for name, t in weights.tensors.items() if name in weights.taken}
    memory = device.buffer_type()
    gguf_file.place(taken, lambda name: memory)
    backend = device.open(args.threads)
    scheduler = pyggml.Scheduler([backend])
    encoder = Encoder(projector, scheduler)
    scheduler.reserve(encoder.worst_case())
    mel, encode = [], []
    for attempt in range(args.repeat + 1):                   # the first warms up
        samples = speechlike(args.seconds, attempt)
        start = time.perf_counter()
        pixels = projector.preprocess(samples)
        mel.append(time.perf_counter() - start)
        start = time.perf_counter()
        rows = encoder.encode(digest_of(samples.tobytes()), pixels)
        encode.append(time.perf_counter() - start)
    best_mel, best = min(mel[1:] or mel), min(encode[1:] or encode)
    print(f"Gemma 4 audio encoder, E2B dimensions, {args.seconds:g} s -> {rows.shape[0]} rows;"
          f" {args.threads} threads")
    print(f"{'stage':<22}{'seconds':>9}{'real-time factor':>18}")
    print(f"{'log-mel (numpy)':<22}{best_mel:>9.3f}{best_mel / args.seconds:>18.3f}")
    print(f"{'conformer + embedder':<22}{best:>9.3f}{best / args.seconds:>18.3f}")
    encoder.close()
    scheduler.close()
    backend.close()
    gguf_file.close()
    try:
        theirs = llama_cpp_encode(args)
    except ImportError:
        print("llama.cpp: llama-cpp-python is not installed (pip install '.[llamacpp]')")
        return
    print(f"{'llama.cpp conformer':<22}{theirs:>9.3f}{theirs / args.seconds:>18.3f}")
    print(f"ratio (llama.cpp's encode time / ours): {theirs / best:.2f}")


def llama_cpp_encode(args) -> float:
    """Best seconds of llama.cpp's mtmd encoding the same clips (its front end runs when the
    clip is tokenized, before the timing)."""
    import llama_cpp as L
    import llama_cpp.mtmd_cpp as M

    L.llama_backend_init()
    quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(
        lambda level, text, user: None)
    L.llama_log_set(quiet, None)
    model = L.llama_model_load_from_file(str(store.resolve(TEXT, pull_missing=True)).encode(),
                                         L.llama_model_default_params())
    params = M.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.print_timings = False, args.threads, False
    params.flash_attn_type = 1 if args.flash else 0
    ctx = M.mtmd_init_from_file(str(mmproj()).encode(), model, params)
    best = np.inf
    try:
        for attempt in range(args.repeat + 1):
            samples = speechlike(args.seconds, attempt)
            bitmap = M.mtmd_bitmap_init_from_audio(
                samples.size, (ctypes.c_float * samples.size).from_buffer_copy(samples.tobytes()))
            chunks, chunk = mtmd_chunk(ctx, bitmap, M.MTMD_INPUT_CHUNK_TYPE_AUDIO)
            start = time.perf_counter()
            M.mtmd_encode_chunk(ctx, chunk)
            if attempt:
                best = min(best, time.perf_counter() - start)
            M.mtmd_input_chunks_free(chunks)
            M.mtmd_bitmap_free(bitmap)
    finally:
        M.mtmd_free(ctx)
        L.llama_model_free(model)
    return best


if __name__ == "__main__":
    main()
