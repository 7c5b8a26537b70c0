"""llama.cpp's multimodal library (libmtmd, through llama-cpp-python) on our files: it
loads a model and its mmproj, and encodes an image (or a clip of audio) to the rows its
decoder would read."""

from __future__ import annotations

import ctypes

import numpy as np


def mtmd_rows(model_path, mmproj_path, rgb: np.ndarray) -> np.ndarray:
    """float32 (rows, embd): libmtmd's embedding of the image rgb (H, W, 3) uint8, or of
    the audio rgb (samples,) float32 at 16 kHz (embd: the model's input width, Qwen3-VL's
    deepstack embeddings included)."""
    import llama_cpp
    import llama_cpp.mtmd_cpp as mtmd

    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(),
                                                 llama_cpp.llama_model_default_params())
    if not model:
        raise RuntimeError(f"llama.cpp did not load {model_path}.")
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.print_timings = False, 2, False
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED     # F32 attention, as ours
    ctx = mtmd.mtmd_init_from_file(str(mmproj_path).encode(), model, params)
    if not ctx:
        llama_cpp.llama_model_free(model)
        raise RuntimeError(f"llama.cpp's mtmd did not load {mmproj_path}.")
    if rgb.ndim == 1:
        samples = np.ascontiguousarray(rgb, np.float32)
        data = (ctypes.c_float * samples.size).from_buffer_copy(samples.tobytes())
        bitmap = mtmd.mtmd_bitmap_init_from_audio(samples.size, data)
        wanted = mtmd.MTMD_INPUT_CHUNK_TYPE_AUDIO
    else:
        height, width, _ = rgb.shape
        data = (ctypes.c_uint8 * rgb.size).from_buffer_copy(np.ascontiguousarray(rgb).tobytes())
        bitmap = mtmd.mtmd_bitmap_init(width, height, data)
        wanted = mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE
    chunks = mtmd.mtmd_input_chunks_init()
    try:
        marker = mtmd.mtmd_default_marker()
        text = mtmd.mtmd_input_text(marker, len(marker), False, True)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        if mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1) != 0:
            raise RuntimeError("mtmd_tokenize failed.")
        embd = llama_cpp.llama_model_n_embd_inp(model)
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) != wanted:
                continue
            if mtmd.mtmd_encode_chunk(ctx, chunk) != 0:
                raise RuntimeError("mtmd_encode_chunk failed.")
            rows = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
            out = mtmd.mtmd_get_output_embd(ctx)
            return np.ctypeslib.as_array(out, shape=(rows * embd,)).reshape(rows, embd).copy()
        raise RuntimeError("mtmd made no image or audio chunk.")
    finally:
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)
        mtmd.mtmd_free(ctx)
        llama_cpp.llama_model_free(model)
