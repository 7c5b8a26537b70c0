"""A conversion or a quantization (`python -m runner convert|quantize ...`) in a child process
of its own, bounded three ways: its memory (the child sets RLIMIT_DATA on itself before it
imports anything: past it, an allocation fails and the command ends with a sentence), its
time (killed past its deadline), and its caller (killed when the task awaiting it is
cancelled: the client who asked for it left). The server never loads ggml (test_manage.py),
and a failure is the child's last `error:` line, a sentence.

    await run_bounded(["convert", folder, "-o", out], bounds_for(input_bytes))

The child's side: `python -m runner.serve.library.child MEMORY_BYTES COMMAND ARGS...`."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import signal
import sys
from collections import deque
from dataclasses import dataclass

# what a conversion or quantization may cost: a fixed part, and a part that grows with its
# input (a converter holds a tensor as float32 and its encoding at once; a model's largest
# tensor, its embeddings, can be half the model)
MEMORY_BASE, MEMORY_PER_INPUT_BYTE = 2 * 2**30, 4
SECONDS_BASE, SECONDS_PER_GIB = 600.0, 60.0
TAIL_LINES = 40                     # of the child's stderr, kept for its error
WORK = {"convert": "conversion", "quantize": "quantization"}      # what a command does
# the child multiplies no matrices: OpenBLAS on one thread, not buffers for every core
# reserved against its memory bound (32 MiB a core)
CHILD_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Bounds:
    memory: int                     # bytes of private memory (RLIMIT_DATA)
    seconds: float


def bounds_for(input_bytes: int) -> Bounds:
    """The bounds of a child whose input (checkpoint or GGUF) holds input_bytes."""
    return Bounds(MEMORY_BASE + MEMORY_PER_INPUT_BYTE * input_bytes,
                  SECONDS_BASE + SECONDS_PER_GIB * input_bytes / 2**30)


class ChildFailed(ValueError):
    """The child ended without doing its work; the message is a sentence saying why."""


async def run_bounded(command: list[str], bounds: Bounds) -> None:
    """Run the runner command (convert or quantize) in a bounded child; ChildFailed, a
    sentence, if it fails or passes its time. Cancelled, it kills the child first."""
    what = WORK[command[0]]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", __name__, str(bounds.memory), *command, cwd="/",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, **CHILD_ENVIRONMENT})
    assert process.stderr is not None
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    reading = asyncio.ensure_future(_keep_tail(process.stderr, tail))
    try:
        status = await asyncio.wait_for(process.wait(), bounds.seconds)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise ChildFailed(f"The {what} took longer than its bound of {bounds.seconds:.0f} s "
                          "and was stopped.") from None
    except BaseException:                  # cancelled: its client left
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        raise
    finally:
        reading.cancel()
    await asyncio.gather(reading, return_exceptions=True)
    if status != 0:
        raise ChildFailed(_failure(status, list(tail), what))


async def _keep_tail(stream: asyncio.StreamReader, tail: deque) -> None:
    """The stream's last lines (progress bars redraw with carriage returns: each redraw is
    a line), read as they come so that the child never blocks on a full pipe."""
    pending = b""
    while chunk := await stream.read(65536):
        *lines, pending = (pending + chunk).replace(b"\r", b"\n").split(b"\n")
        tail.extend(line.decode(errors="replace") for line in lines if line.strip())
        pending = pending[-65536:]
    if pending.strip():
        tail.append(pending.decode(errors="replace"))


def _failure(status: int, tail: list[str], what: str) -> str:
    """A sentence for a child's failure: its own error line, else what ended it."""
    last = tail[-1].strip() if tail else ""
    if last.startswith("error: "):
        return last[len("error: "):]
    if status < 0:
        name = signal.Signals(-status).name if -status in signal.valid_signals() \
            else str(-status)
        return f"The {what} was ended by the signal {name}."
    return f"The {what} failed on an error it has no sentence for: " \
           f"{last or f'exit status {status}'}."


def main(argv: list[str]) -> int:
    """The child: bound its private memory, then run the runner command; an allocation
    past the bound is a sentence."""
    memory, command = int(argv[0]), argv[1:]
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    try:
        from ...cli.main import main as command_line

        return command_line(command)
    except (MemoryError, OSError) as error:
        if isinstance(error, OSError) and error.errno != errno.ENOMEM:
            raise                   # an allocation the system refused reads as ENOMEM
        print(f"error: The {WORK.get(command[0], command[0])} needed more memory than its "
              f"bound of {memory >> 20} MiB.", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
