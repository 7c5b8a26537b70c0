"""The command line's grammar: each command's arguments, and the one-line list that
`python -m runner` alone prints. The commands themselves are main.py's, given by name."""

from __future__ import annotations

import argparse
from typing import Callable

from ..loading import store
from ..loading.devices import add_device_flags


def parser(handlers: dict[str, Callable]) -> argparse.ArgumentParser:
    """The command line, each command calling handlers[its name] with its arguments."""
    top = argparse.ArgumentParser(prog="python -m runner", description="A local LLM runner.")
    sub = top.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve Ollama's API and OpenAI's (port 11434)")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1, or RUNNER_HOST)")
    serve.add_argument("--port", type=int, help="port (default 11434, or RUNNER_HOST's)")
    serve.set_defaults(run=handlers["serve"])
    pull = sub.add_parser("pull", help="download a model into the store")
    pull.add_argument("model", help=f"{', '.join(store.CATALOG)} (the package registry), "
                      "[HOST/][NAMESPACE/]MODEL[:TAG] (Ollama's registry) or "
                      "hf.co/USER/REPO[:QUANT] (Hugging Face)")
    pull.add_argument("--insecure", action="store_true",
                      help="allow a registry over plain HTTP (http://HOST/...)")
    pull.set_defaults(run=handlers["pull"])
    run = sub.add_parser("run", help="generate from a prompt, or chat without one")
    run.add_argument("model", help="a model name or a GGUF path")
    run.add_argument("prompt", nargs="?")
    run.add_argument("--raw", action="store_true", help="no chat template")
    run.add_argument("--image", action="append", default=[], metavar="PATH",
                     help="an image or sound file for the prompt (repeat for more; the first "
                     "turn's when chatting)")
    run.add_argument("--mmproj", help="the model's vision projector (an mmproj GGUF), when "
                     "running in process")
    run.add_argument("--temperature", type=float)
    run.add_argument("--seed", type=int)
    run.add_argument("--num-predict", dest="num_predict", type=int)
    run.add_argument("--top-k", dest="top_k", type=int)
    run.add_argument("--top-p", dest="top_p", type=float)
    run.add_argument("--ctx-size", dest="ctx_size", type=int)
    run.add_argument("--local", action="store_true",
                     help="run in this process even when a server is running")
    run.add_argument("--threads", type=int)
    run.add_argument("--no-pull", action="store_true",
                     help="do not pull a missing model (default: pull it, as ollama run does)")
    add_device_flags(run)
    run.set_defaults(run=handlers["run"])
    transcribe = sub.add_parser("transcribe", help="speech to text, with a model that hears")
    transcribe.add_argument("model", help="a model name or a GGUF path")
    transcribe.add_argument("file", help="a sound file (WAV, FLAC or Ogg)")
    transcribe.add_argument("--language", help="the language spoken (default: unsaid)")
    transcribe.add_argument("--mmproj", help="the model's projector (an mmproj GGUF with an "
                            "audio encoder)")
    transcribe.add_argument("--ctx-size", dest="ctx_size", type=int)
    transcribe.add_argument("--threads", type=int)
    transcribe.add_argument("--no-pull", action="store_true",
                            help="do not pull a missing model")
    add_device_flags(transcribe)
    transcribe.set_defaults(run=handlers["transcribe"])
    for name, help_text in (("list", "the models this machine has"),
                            ("ps", "the models a running server has loaded")):
        sub.add_parser(name, help=help_text).set_defaults(run=handlers[name])
    stop = sub.add_parser("stop", help="unload a model from a running server")
    stop.add_argument("model")
    stop.set_defaults(run=handlers["stop"])
    rm = sub.add_parser("rm", help="delete a model")
    rm.add_argument("model")
    rm.set_defaults(run=handlers["rm"])
    cp = sub.add_parser("cp", help="copy a model under another name")
    cp.add_argument("source")
    cp.add_argument("destination")
    cp.set_defaults(run=handlers["cp"])
    from .bench import add_parser as add_bench

    add_bench(sub)
    tokenize = sub.add_parser("tokenize", help="print the token ids of stdin as JSON")
    tokenize.add_argument("model")
    tokenize.add_argument("--no-parse-special", action="store_true",
                          help="treat special tokens written in the text as plain text")
    tokenize.set_defaults(run=handlers["tokenize"])
    show = sub.add_parser("show", help="describe a model")
    show.add_argument("model")
    show.add_argument("--template", action="store_true", help="print the chat template")
    show.set_defaults(run=handlers["show"])
    convert = sub.add_parser("convert", help="a Hugging Face checkpoint directory to GGUF")
    convert.add_argument("checkpoint", help="directory with config.json, safetensors, "
                         "tokenizer.json")
    convert.add_argument("-o", "--output", help="GGUF file to write (default: next to it)")
    convert.add_argument("--outtype", choices=("f32", "f16", "bf16", "q8_0"), default="f16")
    convert.add_argument("--mmproj", help="also write the vision (and audio) towers and "
                         "projectors of a multimodal checkpoint to this GGUF (llama.cpp's "
                         "mmproj format)")
    convert.set_defaults(run=handlers["convert"])
    quantize = sub.add_parser("quantize", help="a smaller GGUF, with llama.cpp's mixtures")
    quantize.add_argument("source", help="a GGUF of F32/F16/BF16 weights (or a model name)")
    quantize.add_argument("target")
    quantize.add_argument("--type", required=True, type=str.upper,
                          help="the mixture: Q4_K_M, Q8_0 ... (convert/quantize.py's MIXTURES; "
                               "another is refused with their list)")
    quantize.set_defaults(run=handlers["quantize"])
    return top


def commands(top: argparse.ArgumentParser) -> str:
    """One line per command, for `python -m runner` alone."""
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    lines = [f"usage: {top.prog} COMMAND [options]    ({top.description})", ""]
    lines += [f"  {action.dest:<10}{action.help}" for action in sub._choices_actions]
    lines += [f"  {'--model':<10}serve one model over the runner protocol (the subprocess a "
              "server drives; --model NAME --help)", "",
              f"`{top.prog} COMMAND --help` gives a command's options."]
    return "\n".join(lines)
