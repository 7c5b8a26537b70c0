"""What a catalog name means beyond its file, as the same name means in Ollama's library: its
template, system prompt and parameters.

smollm2:135m: Ollama's library lists SmolLM2 with tools, and `ollama show smollm2:135m`
gives the system prompt and stops below (recorded from Ollama's library page and an
`ollama show` transcript, 2026-11-28; its template itself is not copied here). The file's
own template (Hugging Face's) has no tools, so front-ends that add tools to every chat (Open
WebUI) were refused. This template is ours: the file's ChatML turns, word for word when a
chat has no tools, and with tools a system turn listing them and asking for SmolLM2's
function-calling form, `<tool_call>[{"name": ..., "arguments": {...}}]</tool_call>` (one
list of calls; formats/extractor.py reads it), tool results in a user turn inside <tool_response>.
"""

from __future__ import annotations

from pathlib import Path

from .entry import Entry

SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SMOLLM2_TEMPLATE = """\
{%- set default_system = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' %}
{%- set has_system = messages and messages[0]['role'] == 'system' %}
{%- set system = messages[0]['content'] if has_system else default_system %}
{%- if tools %}
{{- '<|im_start|>system\\n' + system + '\\n\\nYou can call these functions, given as JSON schemas:\\n<tools>\\n' }}
{%- for tool in tools %}{{ tool | tojson }}\\n{% endfor %}
{{- '</tools>\\nTo call one or more of them, answer with nothing but a list of calls:\\n<tool_call>[{"name": <the function\\'s name>, "arguments": <an object of its arguments>}]</tool_call><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>system\\n' + system + '<|im_end|>\\n' }}
{%- endif %}
{%- set turns = messages[1:] if has_system else messages %}
{%- for message in turns %}
{%- if message['role'] == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}
{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}
{{- '<|im_start|>assistant\\n<tool_call>[' }}
{%- for call in message['tool_calls'] %}
{{- '{"name": ' + (call['function']['name'] | tojson) + ', "arguments": ' + (call['function']['arguments'] | tojson) + '}' }}{{ ', ' if not loop.last }}
{%- endfor %}
{{- ']</tool_call><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"""

# name -> (template, system, parameters)
MEANINGS = {
    "smollm2:135m": (SMOLLM2_TEMPLATE, SMOLLM2_SYSTEM, {"stop": ["<|im_start|>", "<|im_end|>"]}),
}


def catalog_entry(name: str, path: Path, digest: str) -> Entry:
    template, system, parameters = MEANINGS.get(name, (None, None, {}))
    return Entry(name, path, digest, template, system, dict(parameters))
