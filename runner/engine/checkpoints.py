"""Where a recurrent model's prompt is cut so that its state there is kept (a checkpoint):
a recurrence resumes only at a position it kept a state of, and a state exists only where
a batch ended (kvcache/states.py).

A prompt's batches end, beside where the batch size ends them:
- at each of its last MARKS special tokens among its last TAIL (before the generation
  prompt: "<|im_start|>assistant\\n<think>\\n" ends a prompt, and the next turn's template
  writes the reply there without the "<think>"; llama.cpp's server cuts 4 tokens before the
  end for the same reason);
- every EVERY positions of a long prompt (a later prompt that differs inside it resumes
  from the last one before the difference).
Not where it ends: the same prompt again resumes one token short of its end (its last
token is evaluated for the logits), and a next turn that keeps the reply resumes from the
state where the reply ended, which the engine keeps too. The cache bounds how many a
sequence keeps (the oldest go first).
"""

from __future__ import annotations

from typing import Callable

from ..multimodal.media import run_start

EVERY = 2048
TAIL = 16
MARKS = 2


def cut_points(prompt: list, start: int, special: Callable[[int], bool]) -> list[int]:
    """The positions after start and before the prompt's end where its batches end so that
    a checkpoint is taken there (an image is not cut: its start instead)."""
    end = len(prompt)
    cuts = set(range((start // EVERY + 1) * EVERY, end, EVERY))
    marks = [i for i in range(max(start + 1, end - TAIL), end)
             if isinstance(prompt[i], int) and special(prompt[i])]
    cuts.update(marks[-MARKS:])
    cuts = {run_start(prompt, c) for c in cuts}
    return sorted(c for c in cuts if start < c < end)
