"""Ollama's Go templates: the language's pieces against what Go's text/template writes for
them, and family templates written in Ollama's style against the families' own Jinja chat
templates (the GGUFs', rendered as Hugging Face renders them) on the same conversations;
a pulled model with only a Go template gets its chat prompt from it."""

from __future__ import annotations

import pytest

from runner.serve.library.entry import Entry
from runner.serve.formats.prompts import chat_prompt
from runner.tokenizer.go_values import render_go
from runner.tokenizer.gotemplate import Budget, GoTemplateError, execute, parse
from runner.tokenizer.template import render, template_for


def go(source: str, data: dict) -> str:
    return execute(parse(source), data)


@pytest.mark.parametrize("source,data,expected", [
    ("a {{ .X }} b", {"X": 1}, "a 1 b"),
    ("a {{- .X -}} b", {"X": "x"}, "axb"),
    ("a\n  {{- /* a comment */ -}}\n b", {}, "ab"),
    ("{{ if .A }}yes{{ else if .B }}b{{ else }}no{{ end }}", {"A": "", "B": [1]}, "b"),
    ("{{ if and .A (not .B) }}1{{ end }}{{ if or .B .A }}2{{ end }}", {"A": 1, "B": 0}, "12"),
    ("{{ range $i, $m := .L }}{{ $i }}={{ $m }};{{ end }}", {"L": ["x", "y"]}, "0=x;1=y;"),
    ("{{ range .L }}{{ . }}{{ else }}none{{ end }}", {"L": []}, "none"),
    ("{{ range $k, $v := .M }}{{ $k }}{{ $v }}{{ end }}", {"M": {"b": 2, "a": 1}}, "a1b2"),
    ("{{ range .L }}{{ if eq . 2 }}{{ continue }}{{ end }}{{ if eq . 4 }}{{ break }}{{ end }}"
     "{{ . }}{{ end }}", {"L": [1, 2, 3, 4, 5]}, "13"),
    ("{{ $n := 0 }}{{ range .L }}{{ $n = . }}{{ end }}{{ $n }}", {"L": [3, 4]}, "4"),
    ("{{ range $i, $_ := .L }}{{ $last := eq (len (slice $.L $i)) 1 }}{{ $last }},{{ end }}",
     {"L": ["a", "b"]}, "false,true,"),
    ("{{ with .U }}{{ .Name }}{{ end }}{{ (index .L 1).Name }}",
     {"U": {"Name": "u"}, "L": [{}, {"Name": "v"}]}, "uv"),
    ("{{ json .A }} {{ .A }}", {"A": {"q": "<b>"}}, '{"q":"\\u003cb\\u003e"} '
     '{"q":"\\u003cb\\u003e"}'),
    ('{{ printf "%s-%d" .S .N }} {{ .S | len }} {{ ne .S "x" }}', {"S": "ab", "N": 3},
     "ab-3 2 true"),
    ("{{ .Missing }}|{{ .T }}|{{ .F }}", {"T": True, "F": False}, "|true|false"),
])
def test_the_language_writes_what_go_writes(source, data, expected):
    assert go(source, data) == expected


@pytest.mark.parametrize("source,message", [
    ("{{ if .A }}x", "missing {{end}}"),
    ("x{{ end }}", "unexpected"),
    ("{{ nosuch .A }}", 'function "nosuch" not defined'),
    ("{{ $x }}", "undefined variable"),
    ("{{ break }}", r"\{\{break\}\} outside \{\{range\}\}"),
    ("{{ if .A }}{{ continue }}{{ end }}", r"\{\{continue\}\} outside"),
    ("{{ range .L }}x{{ else }}{{ break }}{{ end }}", "outside"),
    ("a {{ .A ", "an unclosed action"),
    ("{{ $x = 1 }}", r"undefined variable \$x"),
    ("{{ print nosuch }}", 'function "nosuch" not defined'),
    ("{{ print len }}", "error calling len"),
    ('{{ print "\\x" }}', "cannot read the constant"),
    pytest.param("{{ " + "9" * 5000 + " }}", "cannot read the constant", id="5000 digits"),
    ('{{ printf "%c" 99999999999 }}', "error calling printf"),
    ('{{ template "x" }}', 'function "template" not defined'),
])
def test_bad_templates_are_clear_errors(source, message):
    with pytest.raises(GoTemplateError, match=message):
        go(source, {"A": 1})


@pytest.mark.parametrize("source,message", [
    ("{{ range 1000000000 }}{{ end }}", "ran longer than 0.2 s"),
    ("{{ range 1000000000 }}" + "x" * 1000 + "{{ end }}", "wrote more than"),
    ('{{ $x := "ab" }}{{ range 64 }}{{ $x = printf "%s%s" $x $x }}{{ end }}', "printf made"),
    ('{{ printf "%999999999d" 1 }}', "width or precision is above the limit"),
    ('{{ printf "%.99999999f" 1.5 }}', "width or precision is above the limit"),
    ("{{ if 1 }}" * 5000 + "{{ end }}" * 5000, "nested too deeply"),
    ('{{ printf "%y" 1 }}', "unsupported format character"),
    ("{{ range true }}x{{ end }}", "range cannot walk a bool"),
])
def test_a_strangers_template_is_bounded(source, message):
    """A pulled model's template is anyone's: it stops with an error, never runs away."""
    with pytest.raises(GoTemplateError, match=message):
        execute(parse(source), {}, budget=Budget(seconds=0.2))


def test_break_and_continue_stand_in_a_ranges_body_at_any_depth():
    assert go("{{ range .L }}{{ with . }}{{ if eq . 2 }}{{ break }}{{ end }}{{ end }}{{ . }}"
              "{{ end }}", {"L": [1, 2, 3]}) == "1"


def test_render_go_names_the_template_in_its_error():
    with pytest.raises(ValueError, match=r"^The model's Go template failed: .*nested too"):
        render_go("{{ with 1 }}" * 5000, [{"role": "user", "content": "hi"}])


# Ollama's templates for these families, in its style (reads .Messages), and an old one
CHATML = ("{{- range $i, $_ := .Messages }}{{- $last := eq (len (slice $.Messages $i)) 1 -}}"
          "<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
          "{{ if and $last (ne .Role \"assistant\") }}<|im_start|>assistant\n{{ end }}"
          "{{- end }}")
GEMMA = ("{{- range $i, $_ := .Messages }}{{- $last := eq (len (slice $.Messages $i)) 1 }}"
         "{{- if or (eq .Role \"user\") (eq .Role \"system\") }}<start_of_turn>user\n"
         "{{ .Content }}<end_of_turn>\n{{ if $last }}<start_of_turn>model\n{{ end }}"
         "{{- else if eq .Role \"assistant\" }}<start_of_turn>model\n{{ .Content }}"
         "{{ if not $last }}<end_of_turn>\n{{ end }}{{- end }}{{- end }}")
LEGACY = ("{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
          "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}"
          "<|im_start|>assistant\n{{ .Response }}<|im_end|>\n")
CONVERSATION = [{"role": "user", "content": "Hi there"},
                {"role": "assistant", "content": "Hello! How can I help?"},
                {"role": "user", "content": "Name a colour."}]
WITH_SYSTEM = [{"role": "system", "content": "Be brief."}] + CONVERSATION


@pytest.mark.parametrize("family,source,messages", [
    ("smollm2", CHATML, WITH_SYSTEM), ("smollm2", LEGACY, WITH_SYSTEM),
    ("gemma3", GEMMA, CONVERSATION)])
def test_family_templates_match_the_files_own(family, source, messages, model_paths):
    from runner.serve.library.entry import header_of

    meta = header_of(model_paths[family]).metadata        # its BOS: the runner's to add
    assert render_go(source, messages) == render(template_for(meta), messages)


def test_an_old_template_runs_once_a_turn_and_stops_after_the_response():
    text = render_go(LEGACY, WITH_SYSTEM)
    assert text.count("<|im_start|>assistant\n") == 2
    assert text.endswith("<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")


def test_tools_and_tool_calls_print_as_ollamas_json():
    source = ("{{ range .Tools }}{{ .Function.Name }}: {{ . }}\n{{ end }}"
              "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Name }}"
              "{{ .Function.Arguments }}{{ end }}{{ end }}")
    tools = [{"type": "function", "function": {
        "name": "weather", "description": "The weather.", "parameters": {
            "type": "object", "required": ["city"],
            "properties": {"unit": {"type": "string"}, "city": {"type": "string"}}}}}]
    messages = [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "weather", "arguments": {"city": "Paris"}}}]}]
    assert render_go(source, messages, tools) == (
        'weather: {"type":"function","function":{"name":"weather","description":"The '
        'weather.","parameters":{"type":"object","required":["city"],"properties":{"city":'
        '{"type":"string"},"unit":{"type":"string"}}}}}\nweather{"city":"Paris"}')


def test_a_pulled_model_without_a_chat_template_uses_its_go_template(model_paths):
    from runner.serve.library.entry import header_of

    meta = header_of(model_paths["smollm2"]).metadata
    without = {k: v for k, v in meta.items() if k != "tokenizer.chat_template"}
    pulled = Entry("tiny:1b", model_paths["smollm2"], "0" * 64, go_template=CHATML,
                   _metadata=without)
    own = Entry("smollm2", model_paths["smollm2"], "0" * 64, _metadata=meta)
    assert pulled.chat_template is None
    assert chat_prompt(pulled, WITH_SYSTEM, None, None).text == \
        chat_prompt(own, WITH_SYSTEM, None, None).text


def test_a_pulled_go_template_wins_over_the_familys_fallback(model_paths):
    """Gemma 3's GGUF carries no template: Ollama's (pulled with it) is used, not ours."""
    from runner.serve.library.entry import header_of

    meta = header_of(model_paths["gemma3"]).metadata
    assert "tokenizer.chat_template" not in meta
    source = "<{{ range .Messages }}{{ .Role }}:{{ .Content }};{{ end }}>"
    pulled = Entry("gemma3:270m", model_paths["gemma3"], "0" * 64, go_template=source,
                   _metadata=meta)
    assert pulled.chat_template is None
    assert chat_prompt(pulled, [{"role": "user", "content": "Hi"}], None, None).text == \
        "<user:Hi;>"
    fallback = Entry("gemma3:270m", model_paths["gemma3"], "0" * 64, _metadata=meta)
    assert "<end_of_turn>" in fallback.chat_template
