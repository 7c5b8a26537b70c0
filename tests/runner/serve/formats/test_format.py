"""The reply formats' registry, one row per family: each is found from a template of its
family (and no format ranked before it takes that template), and a call written as the
family writes it comes back from its extractor as the call, however the text is split.
Adding a family's format without a row here fails test_every_format_has_a_row."""

from __future__ import annotations


import pytest

from runner.serve.formats import (FORMATS, PLAIN, Format, forced_call_grammar, format_for,
                                  make_extractor)
from runner.serve.formats.format import register

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "required": ["location"],
                                          "properties": {"location": {"type": "string"}}}}}
ARGS = {"location": "Paris"}

# format -> (a template only that family's holds, one call of get_weather as it writes it)
ROWS = {
    "harmony": ("<|start|>assistant<|channel|>final<|message|>{{ content }}<|end|>",
                "<|channel|>commentary to=functions.get_weather <|constrain|>json"
                '<|message|>{"location": "Paris"}<|call|>'),
    "gemma4": ("<|turn>model\n{{ '<|tool_call>call:' + name }}",
               '<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>'),
    "qwen3coder": ("<tool_call>\n<function={{ name }}>\n<parameter={{ key }}>",
                   "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n"
                   "</parameter>\n</function>\n</tool_call>"),
    "mistral": ("[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]",
                '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris"}'),
    "deepseek3": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{{ name }}",
                  '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>'
                  '{"location": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    "qwen": ("<|im_start|>assistant\n<tool_call>\n{{ call | tojson }}\n</tool_call>",
             '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n'
             "</tool_call>"),
    "llama3": ("<|start_header_id|>assistant<|end_header_id|>{\"name\": ..., \"parameters\": "
               "...}", '{"name": "get_weather", "parameters": {"location": "Paris"}}'),
    "glm": ("<tool_call>{{ name }}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>",
            "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n"
            "</tool_call>"),
    "hy3": ("{%- set HYTK = ':opensource' %}<arg_key{{ HYTK }}>",
            "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
            "<arg_key:opensource>location</arg_key:opensource>\n<arg_value:opensource>Paris"
            "</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>"),
    "minimax-m2": ("<minimax:tool_call>\n<invoke name=\"{{ name }}\">",
                   '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="location">'
                   "Paris</parameter>\n</invoke>\n</minimax:tool_call>"),
    "deepseek-v3.2": ("{%- set dsml_token = '｜DSML｜' -%}<{{ dsml_token }}function_calls>",
                      '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
                      '<｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>\n'
                      '</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
    "deepseek-v4": ("{%- set dsml_token = '｜DSML｜' -%}",
                    '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                    '<｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>\n'
                    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"),
    "glimmer": ("<atem:function_calls>{{ calls }}</atem:function_calls>",
                ' to=self<|message|>Weather.<|eom|><|start|>assistant to=get_weather<|message|>'
                '<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter '
                'name="location">Paris</atem:parameter>\n</atem:invoke>\n'
                "</atem:function_calls><|eom|>"),
    "seed-oss": ("<seed:tool_call>\n<function={{ name }}>",
                 "<seed:tool_call>\n<function=get_weather>\n<parameter=location>Paris</parameter>"
                 "\n</function>\n</seed:tool_call>"),
    "minicpm5": ('<function name="{{ name }}">',
                 '<function name="get_weather"><param name="location">Paris</param></function>'),
    "kimi-k2": ("<|tool_call_begin|>{{ id }}<|tool_call_argument_begin|>",
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                '<|tool_call_argument_begin|>{"location": "Paris"}<|tool_call_end|>'
                "<|tool_calls_section_end|>"),
    "solar-open": ("<|tool_call:begin|>{{ id }}<|tool_call:name|>",
                   "<|tool_calls|><|tool_call:begin|>abc<|tool_call:name|>get_weather"
                   '<|tool_call:args|>{"location": "Paris"}<|tool_call:end|><|calls|>'),
    "tool-calls-json": ("<tool_calls>{{ calls | tojson }}</tool_calls>",
                        '<tool_calls>[{"name": "get_weather", "arguments": {"location": "Paris"}}]'
                        "</tool_calls>"),
    "nemotron-nano2": ("<TOOLCALL>{{ calls | tojson }}</TOOLCALL>",
                       '<TOOLCALL>[{"name": "get_weather", "arguments": {"location": "Paris"}}]'
                       "</TOOLCALL>"),
    "gigachat": ("<|function_call|>{{ call | tojson }}",
                 '<|function_call|>{"name": "get_weather", "arguments": {"location": "Paris"}}'),
    "gigachat3": ("{{ render({'role': 'function call'}) }}<|role_sep|>",
                  'function call<|role_sep|>\n{"name": "get_weather", "arguments": '
                  '{"location": "Paris"}}'),
    "cohere": ("<|START_ACTION|>{{ calls }}<|END_ACTION|>",
               '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", '
               '"parameters": {"location": "Paris"}}\n]<|END_ACTION|>'),
    "apertus": ("<|tools_prefix|>{{ calls }}<|tools_suffix|>",
                '<|tools_prefix|>[{"get_weather": {"location": "Paris"}}]<|tools_suffix|>'),
    "kimi-k3": ("{{- '<|open|>' + tag -}}",
                '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
                '<|open|>argument key="location" type="string"<|sep|>Paris<|close|>argument'
                "<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"),
    "minimax-m3": ("{%- set ns_token = ']<]minimax[>[' -%}",
                   ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">'
                   "]<]minimax[>[<location>Paris]<]minimax[>[</location>]<]minimax[>[</invoke>"
                   "\n]<]minimax[>[</tool_call>"),
    "command-r-plus": ("<|CHATBOT_TOKEN|>Action:",
                       'Action:\n```json\n[{"tool_name": "get_weather", "parameters": '
                       '{"location": "Paris"}}]\n```'),
    "lfm2": ("<|tool_call_start|>{{ calls }}<|tool_call_end|>",
             "<|tool_call_start|>[get_weather(location='Paris')]<|tool_call_end|>"),
    "firefunction": ("{{ ns.content + ' functools[' + calls | join(', ') + ']' }}",
                     ' functools[{"name": "get_weather", "arguments": {"location": "Paris"}}]'),
    "granite": ("<|start_of_role|>assistant<|end_of_role|><|tool_call|>{{ calls | tojson }}",
                '<|tool_call|>[{"name": "get_weather", "arguments": {"location": "Paris"}}]'),
    "functionary-v3.2": ("Respond in this format:\n>>>${recipient}\n${content}",
                         'get_weather\n{"location": "Paris"}'),
    "olmo3": ("<function_calls>{{ calls }}</function_calls>",
              '<function_calls>get_weather(location="Paris")</function_calls>'),
    "functionary": ("<|start_header_id|>assistant<|end_header_id|><function={{ name }}>",
                    '<function=get_weather>{"location": "Paris"}</function>'),
}


def test_every_format_has_a_row():
    assert sorted(f.name for f in FORMATS) == sorted(ROWS)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_a_template_of_its_family_finds_it(fmt):
    template, _ = ROWS[fmt.name]
    assert format_for(template) is fmt


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_its_call_comes_back_however_the_text_is_split(fmt, piece):
    _, written = ROWS[fmt.name]
    extractor = make_extractor(fmt, tools=[WEATHER], thinking=True)
    content, calls = [], []
    for at in range(0, len(written), piece):
        text, _, found = extractor.push(written[at:at + piece])
        content.append(text)
        calls += found
    text, _, found = extractor.finish()
    calls += found
    assert "".join(content + [text]).strip() == ""
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
        [("get_weather", ARGS)]


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.call_text], ids=lambda f: f.name)
def test_the_text_a_forced_call_writes_is_read_back(fmt):
    extractor = make_extractor(fmt, tools=[WEATHER])
    _, _, calls = extractor.push(fmt.call_text("get_weather", '{"location": "Paris"}'),
                                 done=True)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
        [("get_weather", ARGS)]


def test_a_template_no_family_writes_is_plain_and_names_are_unique():
    assert format_for("{{ messages }}") is PLAIN and format_for(None) is PLAIN
    with pytest.raises(ValueError, match="already registered"):
        register(Format("qwen", lambda t: False), rank=99)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.text_call], ids=lambda f: f.name)
def test_a_forced_text_call_is_written_in_the_formats_own_syntax(fmt):
    """The grammar's call, filled in, is a call the format reads back."""
    grammar = forced_call_grammar(fmt, [WEATHER], lambda tag: None)
    assert grammar is not None and "get_weather" in grammar and "location" in grammar
    syntax, fill = fmt.text_call, dict(parameter="location", string="true", type="string")
    written = (syntax.start.format(name="get_weather") + syntax.parameter_open.format(**fill) +
               "Paris" + syntax.parameter_close.format(**fill) + syntax.end)
    _, _, calls = make_extractor(fmt, tools=[WEATHER]).push(written, done=True)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
        [("get_weather", ARGS)]


def test_gemmas_forced_call_is_written_in_its_own_object_syntax():
    schema = {"type": "object", "required": ["location", "days", "tags"],
              "properties": {"location": {"type": "string"}, "days": {"type": "integer"},
                             "tags": {"type": "array", "items": {"type": "string",
                                                                  "enum": ["a"]}}}}
    gemma4 = next(f for f in FORMATS if f.name == "gemma4")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    grammar = forced_call_grammar(gemma4, tools, {'<|"|>': 7}.get)
    assert '"location:" <[7]> /[^<]*/ <[7]>' in grammar
    assert '",days:" %json {"type": "integer"}' in grammar
    assert '",tags:" "[" ((<[7]> "a" <[7]>)' in grammar
    written = '<|tool_call>call:get_weather{location:<|"|>Paris<|"|>,days:2,tags:[<|"|>a<|"|>]}' \
              "<tool_call|>"
    _, _, calls = make_extractor(gemma4, tools=tools).push(written, done=True)
    assert calls[0]["function"]["arguments"] == {"location": "Paris", "days": 2, "tags": ["a"]}


@pytest.mark.parametrize("name", ["lfm2", "olmo3"])
def test_a_forced_python_call_reads_back(name):
    fmt = next(f for f in FORMATS if f.name == name)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "required": ["location", "ok"],
        "properties": {"location": {"type": "string"}, "ok": {"type": "boolean"}}}}}]
    grammar = forced_call_grammar(fmt, tools, lambda tag: None)
    assert 'get_weather(" "location=" %json' in grammar and '", ok=" %json' in grammar
    opening, closing = ("<|tool_call_start|>[", "]<|tool_call_end|>") if name == "lfm2" else \
        ("<function_calls>", "</function_calls>")
    written = f'{opening}get_weather(location="Paris", ok=true){closing}'   # JSON's values
    _, _, calls = make_extractor(fmt, tools=tools).push(written, done=True)
    assert calls[0]["function"]["arguments"] == {"location": "Paris", "ok": True}


def test_every_format_can_force_a_call():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "required": ["location"],
        "properties": {"location": {"type": "string"}}}}}]
    assert [f.name for f in FORMATS if forced_call_grammar(f, tools, lambda t: None) is None] \
        == []
