"""Fuzz target: bytes as an Ollama Go template (a pulled model's template layer), parsed and
rendered over a chat with a system prompt, tools, a tool call and its result
(runner.tokenizer.go_values.render_go, as a chat with that model renders its prompt).

The documented refusal of a bad template is a GoTemplateError whose message is a sentence
(render_go's "The model's Go template failed: ..."); anything else is a finding. SEEDS are
templates in the style of Ollama's own (its template/*.gotmpl: ChatML, Llama 3, Mistral,
Gemma, thinking, and the old .Prompt/.Response kind)."""

from __future__ import annotations

from runner.tokenizer.go_values import render_go
from runner.tokenizer.gotemplate import GoTemplateError

TOOLS = [{"type": "function", "function": {
    "name": "weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "The city."},
        "unit": {"type": "string", "enum": ["c", "f"]}}}}}]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "The weather in Paris?"},
    {"role": "assistant", "content": "", "thinking": "A tool knows.", "tool_calls": [
        {"function": {"name": "weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
    {"role": "tool", "content": '{"temperature": 21}', "tool_name": "weather"},
    {"role": "assistant", "content": "21 degrees."},
    {"role": "user", "content": "And tomorrow?"},
]

CHATML_TOOLS = """{{- if .Messages }}
{{- if or .System .Tools }}<|im_start|>system
{{- if .System }}
{{ .System }}
{{- end }}
{{- if .Tools }}

# Tools

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{{- range .Tools }}
{"type": "function", "function": {{ .Function }}}
{{- end }}
</tools>
{{- end }}<|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if .Content }}{{ .Content }}
{{- else if .ToolCalls }}<tool_call>
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
{{ end }}</tool_call>
{{- end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}
{{- else }}
{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ if .Prompt }}<|im_start|>user
{{ .Prompt }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}"""

LLAMA3 = """{{- if or .System .Tools }}<|start_header_id|>system<|end_header_id|>
{{- if .System }}

{{ .System }}
{{- end }}
{{- if .Tools }}

Cutting Knowledge Date: December 2023

When you receive a tool call response, use the output to format an answer.
{{- end }}<|eot_id|>
{{- end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 }}
{{- if eq .Role "user" }}<|start_header_id|>user<|end_header_id|>
{{- if and $.Tools $last }}

Given the following functions, respond with a JSON for a function call.

{{ range $.Tools }}
{{- . }}
{{ end }}
{{ .Content }}<|eot_id|>
{{- else }}

{{ .Content }}<|eot_id|>
{{- end }}{{ if $last }}<|start_header_id|>assistant<|end_header_id|>

{{ end }}
{{- else if eq .Role "assistant" }}<|start_header_id|>assistant<|end_header_id|>
{{- if .ToolCalls }}
{{ range .ToolCalls }}
{"name": "{{ .Function.Name }}", "parameters": {{ .Function.Arguments }}}{{ end }}
{{- else }}

{{ .Content }}
{{- end }}{{ if not $last }}<|eot_id|>{{ end }}
{{- else if eq .Role "tool" }}<|start_header_id|>ipython<|end_header_id|>

{{ .Content }}<|eot_id|>{{ if $last }}<|start_header_id|>assistant<|end_header_id|>

{{ end }}
{{- end }}
{{- end }}"""

MISTRAL = """{{- range $index, $_ := .Messages }}
{{- if eq .Role "system" }}[SYSTEM_PROMPT]{{ .Content }}[/SYSTEM_PROMPT]
{{- else if eq .Role "user" }}
{{- if and (le (len (slice $.Messages $index)) 2) $.Tools }}[AVAILABLE_TOOLS]
{{- $.Tools }}[/AVAILABLE_TOOLS]
{{- end }}[INST]{{ .Content }}[/INST]
{{- else if eq .Role "assistant" }}
{{- if .Content }}{{ .Content }}
{{- if not (eq (len (slice $.Messages $index)) 1) }}</s>
{{- end }}
{{- else if .ToolCalls }}[TOOL_CALLS][
{{- range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ json .Function.Arguments }}}
{{- end }}]</s>
{{- end }}
{{- else if eq .Role "tool" }}[TOOL_RESULTS]{"content": {{ .Content }}}[/TOOL_RESULTS]
{{- end }}
{{- end }}"""

GEMMA = """{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 }}
{{- if or (eq .Role "user") (eq .Role "system") }}<start_of_turn>user
{{ .Content }}<end_of_turn>
{{ if $last }}<start_of_turn>model
{{ end }}
{{- else if eq .Role "assistant" }}<start_of_turn>model
{{ .Content }}{{ if not $last }}<end_of_turn>
{{ end }}
{{- end }}
{{- end }}"""

THINKING = """{{- $lastUserIdx := -1 -}}
{{- range $idx, $msg := .Messages -}}
{{- if eq $msg.Role "user" }}{{ $lastUserIdx = $idx }}{{ end -}}
{{- end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}
{{- if and $.IsThinkSet (eq $i $lastUserIdx) }}
   {{- if $.Think -}}
      {{- " "}}/think {{ $.ThinkLevel }}
   {{- else -}}
      {{- " "}}/no_think
   {{- end -}}
{{- end }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if (and $.IsThinkSet (and .Thinking (or $last (gt $i $lastUserIdx)))) -}}
<think>{{ .Thinking }}</think>
{{ end -}}
{{ .Content }}{{ if not $last }}<|im_end|>
{{ end }}
{{- end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ if and $.IsThinkSet (not $.Think) -}}<think>

</think>

{{ end -}}
{{ end }}
{{- end }}"""

LEGACY = """{{ if .System }}### System:
{{ .System }}

{{ end }}{{ if .Prompt }}### User:
{{ printf "%s" .Prompt }}

{{ end }}### Response:
{{ .Response }}"""

FUNCTIONS = """{{ with .Tools }}{{ len . }} tools:
{{- range $k, $v := (index . 0).Function }}{{ $k }},{{ end }}
{{ end }}{{ range .Messages }}{{ printf "%q:%v" .Role (slice .Content 0 (len .Content)) }}
{{ range $i, $c := .ToolCalls }}{{ if gt $i 0 }}{{ break }}{{ end }}
{{- $c.Function.Name | print }}{{ end }}
{{ end }}{{ currentDate }}{{ if not (or .Think (and .IsThinkSet false)) }}.{{ end }}"""

SEEDS = [CHATML_TOOLS, LLAMA3, MISTRAL, GEMMA, THINKING, LEGACY, FUNCTIONS]


def one_input(data: bytes) -> None:
    source = data.decode("utf-8", errors="replace")
    try:
        render_go(source, MESSAGES, TOOLS, think=True, think_level="high")
    except GoTemplateError as error:
        message = str(error)
        if not message.endswith("."):
            raise AssertionError(f"a refusal that is no sentence: {message!r}") from error
