"""The text a model reads and writes.

prompts.py renders a request's prompt: the chat template over messages and tools (fim.py:
fill-in-the-middle). The reply comes back through its family's Format: format.py holds the
registry, one module per family (or per syntax several families share) registers its own
(qwen.py, gemma4.py, mistral.py, deepseek.py, llama3.py, harmony.py, glm.py, invoke.py,
tagged_json.py, separated.py, pythonic.py, functionary.py, glimmer.py), extractor.py follows
a reply as it streams (harmony.py, functionary.py and glimmer.py their own), calls.py reads
calls back, grammar.py forces a call (tool_choice)."""

from . import (  # noqa: F401  (each registers its formats)
    deepseek, functionary, gemma4, glimmer, glm, harmony, invoke, llama3, mistral, pythonic,
    qwen, separated, tagged_json)
from .extractor import Extractor
from .format import FORMATS, PLAIN, Format, format_for, make_extractor
from .grammar import forced_call_grammar

__all__ = ["FORMATS", "PLAIN", "Extractor", "Format", "forced_call_grammar", "format_for",
           "make_extractor"]
