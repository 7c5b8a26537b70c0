"""The text a model reads and writes.

prompts.py renders a request's prompt: the chat template over messages and tools (fim.py:
fill-in-the-middle). The reply comes back through its family's Format: format.py holds the
registry, one module per family registers its own (qwen.py, gemma4.py, mistral.py,
deepseek.py, llama3.py, harmony.py), extractor.py follows a reply as it streams (harmony.py
its own channels), calls.py reads calls back, grammar.py forces a call (tool_choice)."""

from . import deepseek, gemma4, harmony, llama3, mistral, qwen  # noqa: F401  (register)
from .extractor import Extractor
from .format import FORMATS, PLAIN, Format, format_for, make_extractor
from .grammar import forced_call_grammar

__all__ = ["FORMATS", "PLAIN", "Extractor", "Format", "forced_call_grammar", "format_for",
           "make_extractor"]
