"""Where a recurrent model's prompt is cut so that its state there is kept (a checkpoint):
a recurrence resumes only at a position it kept a state of, and a state exists only where
a batch ended (kvcache/states.py).

A prompt's batches end, beside where the batch size ends them, and the state is kept:
- at each of its last MARKS special tokens among its last TAIL (before the generation
  prompt: "<|im_start|>assistant\\n<think>\\n" ends a prompt, and the next turn's template
  writes the reply there without the "<think>"; llama.cpp's server cuts 4 tokens before the
  end for the same reason);
- every EVERY positions of a long prompt (a later prompt that differs inside it resumes
  from the last one before the difference);
- where it ends, when the cache keeps room for it beside those marks and the reply's end
  (the marks matter more to a chat): a next prompt that extends it without the reply (a
  reply the client rewrote, a completion continued) resumes there; a next turn that keeps
  the reply resumes from the state where the reply ended, which the engine keeps too. (The
  same prompt again resumes from the mark before its end: its last token is evaluated for
  the logits.)
The cache bounds how many a sequence keeps (the oldest go first).
"""

from __future__ import annotations

from typing import Callable

from ..multimodal.media import run_start

EVERY = 2048
TAIL = 16
MARKS = 2


def cut_points(prompt: list, start: int, special: Callable[[int], bool],
               room: int = MARKS + 2) -> list[int]:
    """The positions after start, up to the prompt's end, where its batches end so that a
    checkpoint is taken there (an image is not cut: its start instead); room: how many
    checkpoints a sequence keeps."""
    end = len(prompt)
    cuts = set(range((start // EVERY + 1) * EVERY, end, EVERY))
    marks = [i for i in range(max(start + 1, end - TAIL), end)
             if isinstance(prompt[i], int) and special(prompt[i])]
    cuts.update(marks[-MARKS:])
    cuts = {run_start(prompt, c) for c in cuts}
    kept = sorted(c for c in cuts if start < c < end)
    return kept + [end] if room >= MARKS + 2 else kept
