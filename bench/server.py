"""The runner over HTTP: single-stream decode and prefill speed, time to first token, and
aggregate generation speed at --parallel 1, 2, 4, 8 with four times as many clients, with
and without building the next batch's graph during the current compute (--no-overlap).
llama.cpp (llama-cpp-python, `pip install '.[llamacpp]'`) runs the same prompt tokens in
process, without HTTP, side by side when it is installed.

    python bench/server.py [--model smollm2:135m] [--threads 2] [--repeat 3]

Figures are the best of --repeat runs (these machines are shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from runner.loading import store

WORDS = ("river mountain quiet table orange window silver music paper garden winter "
         "engine yellow forest market planet candle bridge ocean valley").split()


class Runner:
    def __init__(self, model, threads, *flags):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "--model", str(model), "--port", "0",
             "--threads", str(threads), *flags], cwd=tempfile.gettempdir(),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = "http://" + self.proc.stdout.readline().split()[-1]
        self.client = httpx.Client(base_url=self.url, timeout=600)
        while self.client.get("/health").json()["status"] != 0:
            time.sleep(0.1)

    def complete(self, prompt, num_predict, client=None) -> tuple[dict, float]:
        """(final line, seconds to the first content line)."""
        start, first = time.perf_counter(), None
        body = {"Prompt": prompt, "Options": {"temperature": 0, "num_predict": num_predict}}
        with (client or self.client).stream("POST", "/completion", json=body) as response:
            for line in response.iter_lines():
                event = json.loads(line)
                if first is None and "content" in event:
                    first = time.perf_counter() - start
                if event.get("done"):
                    return event, first
        raise RuntimeError(f"The stream ended without a final line: {event}")

    def tokens(self, text) -> list[int]:
        return self.client.post("/tokenize", json={"content": text}).json()["tokens"]

    def close(self):
        self.client.close()
        self.proc.terminate()
        self.proc.wait()


def prompt_text(rng, run, words) -> str:
    return f"Note {run}: " + " ".join(rng.choice(WORDS, words))


def single_stream(runner, rng, args) -> dict:
    best = {"decode": 0.0, "prefill": 0.0, "ttft": float("inf")}
    for run in range(args.repeat):
        done, ttft = runner.complete(prompt_text(rng, run, args.prompt_words), args.generate)
        best["decode"] = max(best["decode"], done["eval_count"] / done["eval_duration"] * 1e9)
        best["prefill"] = max(best["prefill"], done["prompt_eval_count"] /
                              done["prompt_eval_duration"] * 1e9)
        best["ttft"] = min(best["ttft"], ttft)
    best["prompt_tokens"] = done["prompt_eval_count"]
    return best


def aggregate(runner, parallel, rng, args) -> float:
    clients = 4 * parallel
    prompts = [prompt_text(rng, i, 12) for i in range(clients)]
    with httpx.Client(base_url=runner.url, timeout=600,
                      limits=httpx.Limits(max_connections=clients)) as client, \
            ThreadPoolExecutor(clients) as pool:
        start = time.perf_counter()
        results = list(pool.map(lambda p: runner.complete(p, args.aggregate_tokens, client),
                                prompts))
        wall = time.perf_counter() - start
    return sum(done["eval_count"] for done, _ in results) / wall


class LlamaCpp:
    """llama.cpp in process (no HTTP): the same prompt tokens, greedy, flash attention."""

    def __init__(self, path, args):
        import llama_cpp
        from llama_cpp import Llama, _internals

        self.lib, self.args = llama_cpp, args
        self.llm = Llama(model_path=str(path), n_ctx=4096, n_threads=args.threads,
                         n_batch=512, flash_attn=True, verbose=False)
        self.vocab = self.llm.n_vocab()
        params = self.llm.context_params          # a second context for batches of sequences
        params.n_seq_max, params.kv_unified = 8, True
        self.batched = _internals.LlamaContext(model=self.llm._model, params=params,
                                               verbose=False)
        self.batch = llama_cpp.llama_batch_init(512, 0, 8)

    def _argmax(self) -> int:
        ptr = self.lib.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(self.vocab,))))

    def single_stream(self, prompt) -> dict:
        llm = self.llm
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        token = self._argmax()
        first = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(self.args.generate):
            llm.eval([token])
            token = self._argmax()
        return {"decode": self.args.generate / (time.perf_counter() - start),
                "prefill": len(prompt) / first, "ttft": first}

    def _decode(self, tokens, positions, seqs) -> None:
        batch = self.batch
        batch.n_tokens = len(tokens)
        for i, (token, position, seq) in enumerate(zip(tokens, positions, seqs)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
            batch.seq_id[i][0], batch.logits[i] = seq, 1
        if self.lib.llama_decode(self.batched.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def step_time(self, n: int, steps: int = 20) -> float:
        """Seconds per decode step of n sequences, one token each."""
        memory = self.lib.llama_get_memory(self.batched.ctx)
        for seq in range(n):
            self.lib.llama_memory_seq_rm(memory, seq, 0, -1)
            self._decode(list(range(100, 130)), list(range(30)), [seq] * 30)
        start = time.perf_counter()
        for i in range(steps):
            self._decode([5] * n, [30 + i] * n, list(range(n)))
        return (time.perf_counter() - start) / steps


def our_step_time(model, n: int, steps: int = 20) -> float:
    """The same for our executor (in process, no HTTP, no sampling)."""
    from runner.engine.batch import Batch

    executor = model.executor
    for seq in range(n):
        model.kv.remove(seq)
        executor.logits(Batch.of_sequence(list(range(100, 130)), 0, seq))
    start = time.perf_counter()
    for i in range(steps):
        executor.logits(Batch([5] * n, [30 + i] * n, list(range(n)), outputs=list(range(n))))
    return (time.perf_counter() - start) / steps


def best(runs: list[dict]) -> dict:
    return {"decode": max(r["decode"] for r in runs), "prefill": max(r["prefill"] for r in runs),
            "ttft": min(r["ttft"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--prompt-words", type=int, default=480)
    parser.add_argument("--generate", type=int, default=128)
    parser.add_argument("--aggregate-tokens", type=int, default=64)
    args = parser.parse_args()
    path = store.pull(args.model, progress=False)
    try:
        reference = LlamaCpp(path, args)
    except ImportError:
        reference = None

    print(f"single stream ({args.model}, {args.threads} threads, flash attention; best of "
          f"{args.repeat}, runs alternating)")
    print(f"{'':<24}{'decode tok/s':>13}{'prefill tok/s':>15}{'first token ms':>16}")
    runners = {"ours (HTTP)": Runner(path, args.threads),
               "ours (HTTP), no overlap": Runner(path, args.threads, "--no-overlap")}
    runs = {name: [] for name in [*runners, "llama.cpp (in process)"]}
    rng = np.random.default_rng(0)
    for run in range(args.repeat):
        text = prompt_text(rng, run, args.prompt_words)
        for name, runner in runners.items():
            done, ttft = runner.complete(text, args.generate)
            runs[name].append({"decode": done["eval_count"] / done["eval_duration"] * 1e9,
                               "prefill": done["prompt_eval_count"] /
                               done["prompt_eval_duration"] * 1e9, "ttft": ttft})
        if reference:
            runs["llama.cpp (in process)"].append(
                reference.single_stream(runners["ours (HTTP)"].tokens(text)))
    for runner in runners.values():
        runner.close()
    rows = {name: best(r) for name, r in runs.items() if r}
    for name, r in rows.items():
        print(f"{name:<24}{r['decode']:>13.1f}{r['prefill']:>15.0f}{r['ttft'] * 1e3:>16.0f}")
    if reference:
        ours, ref = rows["ours (HTTP)"], rows["llama.cpp (in process)"]
        print(f"{'ratio ours/llama.cpp':<24}{ours['decode'] / ref['decode']:>13.2f}"
              f"{ours['prefill'] / ref['prefill']:>15.2f}{ref['ttft'] / ours['ttft']:>16.2f}")

    print(f"\naggregate over HTTP ({args.aggregate_tokens} tokens per client, 4 x parallel "
          "clients)")
    print(f"{'parallel':<10}{'tok/s':>9}{'x parallel 1':>14}{'no overlap':>12}")
    single = None
    for parallel in (1, 2, 4, 8):
        speeds = []
        for overlap in (True, False):
            flags = ("--parallel", str(parallel), "--ctx-size", str(512 * parallel))
            runner = Runner(path, args.threads, *flags, *(() if overlap else ("--no-overlap",)))
            speeds.append(max(aggregate(runner, parallel, np.random.default_rng(2), args)
                              for _ in range(max(1, args.repeat // 2))))
            runner.close()
        single = single or speeds[0]
        print(f"{parallel:<10}{speeds[0]:>9.1f}{speeds[0] / single:>14.2f}{speeds[1]:>12.1f}")

    print("\nthe ceiling: one decode step of n sequences, in process (tokens/s; x: over n=1)")
    import runner as engine_api
    model = engine_api.load(path, num_ctx=512, parallel=8, threads=args.threads,
                            flash_attn=True)
    print(f"{'n':<6}{'ours':>9}{'x':>7}{'llama.cpp':>11}{'x':>7}")
    base = {}
    for n in (1, 2, 4, 8):
        ours = n / min(our_step_time(model, n) for _ in range(3))
        ref = n / min(reference.step_time(n) for _ in range(3)) if reference else None
        base.setdefault("ours", ours)
        base.setdefault("ref", ref)
        ref_text = f"{ref:>11.0f}{ref / base['ref']:>7.2f}" if ref else f"{'-':>11}{'-':>7}"
        print(f"{n:<6}{ours:>9.0f}{ours / base['ours']:>7.2f}{ref_text}")
    model.close()


if __name__ == "__main__":
    main()
