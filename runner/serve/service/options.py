"""Request options as Ollama layers them, keep_alive durations, and the server's settings.

Options: Ollama's defaults, then the model's parameters (its manifest), then the request's
`options`. Unknown names are logged and ignored, as Ollama does (its Python client sends a
whole Options model). The options that shape a loaded model (num_ctx, num_batch, num_gpu,
main_gpu, use_mmap, num_thread) pick or load a runner; the rest go with the completion.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field, fields

from ... import defaults
from ...engine.options import GenerateOptions
from ...sample import SamplingOptions

log = logging.getLogger("runner.serve")

DEFAULTS = {"num_predict": -1, "num_keep": 4, "temperature": 0.8, "top_k": 40, "top_p": 0.9,
            "min_p": 0.0, "repeat_last_n": 64, "repeat_penalty": 1.0, "presence_penalty": 0.0,
            "frequency_penalty": 0.0, "seed": -1, "stop": []}
LOAD_OPTIONS = ("num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread")
# accepted from clients and without effect here (samplers and switches this engine lacks)
INERT = {"typical_p", "mirostat", "mirostat_tau", "mirostat_eta", "penalize_newline",
         "tfs_z", "low_vram", "f16_kv", "vocab_only", "logits_all", "numa", "use_mlock"}
GENERATION = {f.name for f in fields(SamplingOptions)} | {f.name for f in fields(GenerateOptions)}
TYPES = {"num_ctx": int, "num_batch": int, "num_gpu": int, "main_gpu": int, "num_thread": int,
         "use_mmap": bool}


def env_duration(name: str, default: float) -> float:
    """A duration from the environment: a Go duration ("5m") or, as Ollama reads its own,
    a number of seconds."""
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        return keep_alive_seconds(float(value), name)
    except ValueError:
        return keep_alive_seconds(value, name)


@dataclass(frozen=True)
class Settings:
    """The server's limits, from the environment (Ollama's names with RUNNER_)."""
    num_parallel: int = defaults.PARALLEL
    max_loaded_models: int = 3
    max_queue: int = 512
    keep_alive: float = 300.0
    context_length: int = defaults.CONTEXT
    flash_attention: str = "auto"          # defaults.flash_attention
    kv_cache_type: str = defaults.KV_CACHE_TYPE
    multiuser_cache: bool = False          # runners fork the best cached prefix into a slot
    max_body: int = 64 << 20                                 # bytes of a JSON request body
    stall_timeout: float = 60.0          # a runner with work that answers nothing this long
    runner_flags: tuple[str, ...] = field(default=())      # e.g. ("--rpc", "host:port")

    @classmethod
    def from_environment(cls) -> "Settings":
        def number(name: str, default: int) -> int:
            value = os.environ.get(name, "")
            try:
                return int(value) if value else default
            except ValueError:
                raise ValueError(f"{name} must be an integer, not {value!r}.") from None

        flash = os.environ.get("RUNNER_FLASH_ATTENTION", "")
        return cls(num_parallel=max(1, number("RUNNER_NUM_PARALLEL", defaults.PARALLEL)),
                   max_loaded_models=max(1, number("RUNNER_MAX_LOADED_MODELS", 3)),
                   max_queue=max(1, number("RUNNER_MAX_QUEUE", 512)),
                   keep_alive=env_duration("RUNNER_KEEP_ALIVE", 300.0),
                   context_length=max(16, number("RUNNER_CONTEXT_LENGTH", defaults.CONTEXT)),
                   flash_attention={"1": "on", "true": "on", "0": "off", "false": "off"}.get(
                       flash.lower(), "auto"),
                   kv_cache_type=os.environ.get("RUNNER_KV_CACHE_TYPE") or defaults.KV_CACHE_TYPE,
                   multiuser_cache=os.environ.get("RUNNER_MULTIUSER_CACHE", "").lower() in
                   ("1", "true", "yes", "on"),
                   max_body=max(1024, number("RUNNER_MAX_BODY", 64 << 20)),
                   stall_timeout=max(1.0, env_duration("RUNNER_STALL_TIMEOUT", 60.0)))


@dataclass(frozen=True)
class LoadChoice:
    """What a runner is loaded with: a request whose choice differs needs a reload."""
    num_ctx: int
    num_batch: int = 512
    num_gpu: int = -1
    main_gpu: int | None = None
    num_thread: int | None = None


def layered(model_parameters: dict, request: dict | None) -> tuple[dict, dict, dict]:
    """(generation options for the runner, the load choice, all options as used), from
    Ollama's defaults, the model's parameters and the request's options."""
    if request is not None and not isinstance(request, dict):
        raise ValueError("options must be an object.")
    merged = dict(DEFAULTS)
    for layer in (model_parameters or {}, request or {}):
        merged.update({k: v for k, v in layer.items() if v is not None})
    generation, load = {}, {}
    for name, value in merged.items():
        if name in GENERATION:
            generation[name] = value
        elif name in LOAD_OPTIONS:
            kind = TYPES[name]
            if kind is int and (isinstance(value, bool) or not isinstance(value, (int, float))
                                or value != int(value)):
                raise ValueError(f'option "{name}" must be of type integer')
            load[name] = kind(value)
        elif name not in INERT:
            log.warning("Ignoring the unknown option %r.", name)
    return generation, load, merged


def load_choice(load: dict, settings: Settings, context_length: int) -> LoadChoice:
    num_ctx = load.get("num_ctx") or settings.context_length
    if num_ctx < 1:
        raise ValueError(f'option "num_ctx" must be positive, not {num_ctx}')
    return LoadChoice(num_ctx=min(num_ctx, context_length),
                      num_batch=max(1, load.get("num_batch") or 512),
                      num_gpu=load.get("num_gpu", -1), main_gpu=load.get("main_gpu"),
                      num_thread=load.get("num_thread") or None)


DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
LONGEST = (2**63 - 1) / 1e9   # Go's longest duration (292 years): anything longer is for ever
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive_seconds(value, what: str = "keep_alive") -> float:
    """Seconds a model stays loaded: a number of seconds, or a Go duration string ("5m",
    "1h30m", "0"); negative: for ever (math.inf)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number of seconds or a duration like \"5m\".")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number of seconds.")
        return math.inf if value < 0 or value > LONGEST else float(value)
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a number of seconds or a duration like \"5m\".")
    text = value.strip()
    if text in ("0", ""):
        return 0.0
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = DURATION.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        raise ValueError(f"time: invalid duration {value!r} for {what} (use a number of "
                         'seconds or a duration like "5m", "1h30m")')
    seconds = sum(float(n) * UNITS[u] for n, u in parts)
    return math.inf if sign < 0 or seconds > LONGEST else seconds


def think_level(think) -> str | None:
    """Ollama's think: None (not said), "off", or a level (true is "medium")."""
    if think is None:
        return None
    if think is True:
        return "medium"
    if think is False:
        return "off"
    if isinstance(think, str) and think in ("low", "medium", "high", "max"):
        return think
    raise ValueError(f'think must be true, false, "low", "medium", "high" or "max", '
                     f"not {think!r}")


# a reasoning effort as a thinking budget (tokens; sample/budget.py), as LiteLLM turns
# OpenAI's efforts into Anthropic's budget_tokens: the efforts above high (xhigh, max,
# ultra) and an effort not said leave the thinking unbounded; none turns it off
EFFORT_BUDGETS = {"minimal": 128, "low": 1024, "medium": 2048, "high": 4096}


def effort_budget(effort: str | None) -> int | None:
    """The thinking budget a client's reasoning effort asks for (None: no bound)."""
    return EFFORT_BUDGETS.get(effort) if effort else None


DEFAULT_PORT = 11434          # Ollama's, so that its clients find the server


def address(text: str | None) -> tuple[str, int]:
    """host and port from RUNNER_HOST's forms: host, host:port, :port, http(s)://host:port."""
    if not text:
        return "127.0.0.1", DEFAULT_PORT
    text = text.split("://", 1)[-1].rstrip("/")
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if port and not port.isdigit():
        raise ValueError(f"RUNNER_HOST must be host:port, not {text!r}.")
    return host or "127.0.0.1", int(port) if port else DEFAULT_PORT
