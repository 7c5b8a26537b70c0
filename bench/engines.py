"""Ours and llama.cpp behind one small interface, for the benchmarks that time single graph
computes (profile.py, threads.py): on the CPU, or with every layer on device (a GPU's
name, as `python -m pyggml` lists it). decode(tokens, start) evaluates tokens at
positions start... of sequence 0 and computes the last one's logits; forget(start) drops the
cache from start on. profile=True: profiler() can time nodes (llama.cpp then calls back
for every node of every step, which slows it, so time whole steps with profile=False).
llama.cpp comes from llama-cpp-python (`pip install '.[llamacpp]'`), the same ggml
version, so its graph nodes read with pyggml's cffi."""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue

import numpy as np

import pyggml
from pyggml.profile import NodeClock, Profiler
from runner.api import split_options
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.engine.request import Request
from runner.kvcache import new_cache
from runner.loading import store
from runner.loading.loader import open_model
from runner.loading.placement import Placer


def model_path(name: str):
    return store.pull(name, progress=False) if name in store.CATALOG else store.resolve(name)


def mtmd_chunk(mctx, bitmap, kind: int):
    """llama.cpp's mtmd: a prompt of just the default marker with bitmap tokenized, and its
    chunk of kind (MTMD_INPUT_CHUNK_TYPE_IMAGE or _AUDIO). Returns (chunks, chunk); free
    chunks with mtmd_input_chunks_free."""
    import llama_cpp.mtmd_cpp as M

    chunks = M.mtmd_input_chunks_init()
    marker = M.mtmd_default_marker()
    text = M.mtmd_input_text(marker, len(marker), False, True)
    M.mtmd_tokenize(mctx, chunks, ctypes.byref(text), (M.mtmd_bitmap_p_ctypes * 1)(bitmap), 1)
    found = [M.mtmd_input_chunks_get(chunks, i) for i in range(M.mtmd_input_chunks_size(chunks))]
    return chunks, next(c for c in found if M.mtmd_input_chunk_get_type(c) == kind)


def greedy(model, prompt: list[int], n: int) -> dict:
    """One greedy request of n tokens (num_predict) through a loaded model's batch loop; its
    final event (counts and durations)."""
    sampling, limits = split_options({"temperature": 0, "num_predict": n, "stop": []})
    events = queue.Queue()
    model.engine.submit(Request(prompt, events.put, sampling, limits))
    while not (done := events.get()).get("done"):
        if "error" in done:
            raise RuntimeError(f"The request failed: {done['error']}")
    return done


def token_ids(path, n: int, seed: int = 0) -> list[int]:
    """n random token ids that the model's vocabulary holds (100 to 10000 where it is that
    large), the same for both engines."""
    with pyggml.GGUFFile(path) as f:
        vocab = len(f.metadata["tokenizer.ggml.tokens"])
    return np.random.default_rng(seed).integers(min(100, vocab // 2), min(10000, vocab),
                                                n).tolist()


class Ours:
    name = "ours"

    @staticmethod
    def available() -> bool:
        return True

    def __init__(self, path, threads: int, flash: bool, repack: bool, cells: int,
                 device: str | None = None, profile: bool = False, inline: bool = False):
        self.loaded = open_model(path)
        self.backend = pyggml.cpu_backend(threads)
        self.accelerator = pyggml.device(device).open() if device else None
        where = self.accelerator or self.backend
        layers = [where.device] * (self.loaded.model.config.layers + 1)
        with Placer(self.loaded.model, self.loaded.tensors, embeddings=False) as placer:
            self.loaded.load(placer.place(layers, repack))
        self.kv = new_cache(self.loaded.model.cache_layers(), cells, where, flash=flash)
        # inline: computed on the calling thread, not the scheduler's compute thread
        self.scheduler = pyggml.Scheduler([b for b in (self.accelerator, self.backend) if b],
                                          inline=inline)
        self.executor = Executor(self.loaded.model, self.kv, self.scheduler)

    def decode(self, tokens, start: int) -> None:
        # into one array, as llama.cpp keeps its logits in one buffer
        self.executor.logits(Batch.of_sequence(tokens, start), reuse=True)

    def forget(self, start: int) -> None:
        self.kv.remove(0, start)

    def profiler(self):
        return Profiler(self.scheduler)

    def close(self) -> None:
        self.scheduler.close()
        self.kv.close()
        self.loaded.file.close()
        self.backend.close()
        if self.accelerator:
            self.accelerator.close()


class LlamaCpp:
    name = "llama.cpp"

    @staticmethod
    def available() -> bool:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            return False
        return True

    def __init__(self, path, threads: int, flash: bool, repack: bool, cells: int,
                 device: str | None = None, profile: bool = False):
        import llama_cpp as L

        self.L, self.profile = L, profile
        self._saved = None          # (position, sequence state) that forget() goes back to
        L.llama_backend_init()
        self._quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(
            lambda level, text, user: None)
        L.llama_log_set(self._quiet, None)
        model_params = L.llama_model_default_params()
        model_params.n_gpu_layers = 999 if device else 0
        model_params.use_extra_bufts = repack
        self.model = L.llama_model_load_from_file(str(path).encode(), model_params)
        self.clock, self.watching = NodeClock(), False

        @L.ggml_backend_sched_eval_callback
        def on_eval(tensor, ask, _):
            if not self.watching:
                return False                             # the whole graph at once
            return self.clock.on_eval(pyggml._ggml.ffi.cast("struct ggml_tensor *", tensor), ask)

        self._on_eval = on_eval
        params = L.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = cells, 512, 512
        params.n_threads = params.n_threads_batch = threads
        if profile:       # the scheduler then calls Python for every node (900 a SmolLM2 step)
            params.cb_eval, params.cb_eval_user_data = on_eval, None
        params.flash_attn_type = 1 if flash else 0
        self.ctx = L.llama_init_from_model(self.model, params)
        self.memory = L.llama_get_memory(self.ctx)

    def decode(self, tokens, start: int) -> None:
        L = self.L
        if start and self._saved is None:
            self._saved = (start, self._state())
        batch = L.llama_batch_init(len(tokens), 0, 1)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        status = L.llama_decode(self.ctx, batch)
        L.llama_batch_free(batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed ({status})")

    def forget(self, start: int) -> None:
        """Positions start.. gone; a recurrent memory, which drops no range, takes back the
        sequence's state saved where the first batch after the prompt began."""
        L = self.L
        if L.llama_memory_seq_rm(self.memory, 0, start, -1):
            return
        saved_at, data = self._saved
        if saved_at != start:
            raise RuntimeError(f"No saved state at position {start} to go back to.")
        L.llama_memory_seq_rm(self.memory, 0, -1, -1)
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if L.llama_state_seq_set_data(self.ctx, buffer, len(data), 0) == 0:
            raise RuntimeError("llama.cpp refused the saved state.")

    def _state(self) -> bytes:
        size = self.L.llama_state_seq_get_size(self.ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = self.L.llama_state_seq_get_data(self.ctx, buffer, size, 0)
        return bytes(buffer[:written])

    @contextlib.contextmanager
    def profiler(self):
        if not self.profile:
            raise RuntimeError("This llama.cpp context was made without profile=True: it "
                               "calls back for no node.")
        self.watching = True
        try:
            yield self.clock
        finally:
            self.watching = False

    def close(self) -> None:
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model)


def engines() -> list[type]:
    """Ours, and llama.cpp where it is installed (BENCH_ENGINES=ours leaves it out)."""
    wanted = os.environ.get("BENCH_ENGINES", "ours,llama.cpp").split(",")
    return [cls for cls in (Ours, LlamaCpp) if cls.name in wanted and cls.available()]
