"""Tool calls and thinking per model family, against the families' own chat templates
(llama.cpp's copies in the pinned archive): the format is recognized from the template; a
conversation with tools, a call and its result renders through our template path as
transformers renders it; the call an assistant turn renders parses back; and replies as
each family writes them parse to the same calls, content and thinking however they are cut
into pieces."""

from __future__ import annotations

import datetime
import json

import pytest

from runner.serve.formats import Extractor, format_for, make_extractor
from runner.tokenizer.template import render

from tests.support.official_templates import official_template
from tests.support.streaming import run, split_everywhere

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "required": ["location"],
                   "properties": {"location": {"type": "string", "description": "A city."},
                                  "days": {"type": "integer", "description": "How many."}}}}}
CLOCK = {"type": "function", "function": {"name": "now", "description": "The time.",
                                          "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, CLOCK]
ID = "abcdefghi"                       # Mistral's templates take ids of 9 characters
CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "What is the weather in Paris for 2 days?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": ID, "type": "function",
         "function": {"name": "get_weather", "arguments": {"location": "Paris", "days": 2}}}]},
    {"role": "tool", "tool_call_id": ID, "name": "get_weather", "content": "Sunny, 20C"},
]
FAMILIES = {      # template file -> the format it is recognized as
    "Qwen3-Coder.jinja": "qwen3coder",
    "Qwen3.5-4B.jinja": "qwen3coder",
    "Qwen-Qwen3-0.6B.jinja": "qwen",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "mistral",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "unsloth-mistral-Devstral-Small-2507.jinja": "mistral",
    "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek3",
    "openai-gpt-oss-120b.jinja": "harmony",
    "google-gemma-4-31B-it.jinja": "gemma4",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "ByteDance-Seed-OSS.jinja": "seed-oss",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "granite",
    "HuggingFaceTB-SmolLM3-3B.jinja": "qwen",       # llama.cpp's copy writes no calls
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "cohere",
    "Cohere2MoE.jinja": "cohere",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "command-r-plus",
}
BOS, EOS = "<s>", "</s>"


@pytest.mark.parametrize("name", FAMILIES)
def test_the_format_is_recognized_from_the_template(name):
    assert format_for(official_template(name)).name == FAMILIES[name]


def transformers_render(template: str, messages, tools, generation: bool = True) -> str:
    """The template rendered by transformers' own chat-template code (an independent
    implementation of the same Jinja conventions)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], tools=tools,
                                        chat_template=template,
                                        add_generation_prompt=generation,
                                        bos_token=BOS, eos_token=EOS)
    return rendered[0]


RENDERED = ["Qwen3-Coder.jinja", "Qwen3.5-4B.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja",
            "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
            "unsloth-mistral-Devstral-Small-2507.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
            "ByteDance-Seed-OSS.jinja"]
# templates that render a conversation with tools but write no assistant's calls
RENDERED_WITHOUT_CALLS = ["ibm-granite-granite-3.3-2B-Instruct.jinja",
                          "HuggingFaceTB-SmolLM3-3B.jinja"]
# templates whose written calls parse back in test_templates.py, cut off where their turn
# ends (Command R+'s generation prompt opens otherwise than the turn with its calls; Command
# R7B's turn is followed by the next one's opening). Command R+'s writes every parameter's
# description (transformers fails on one without, as we do)
RENDERED_CALLS_ELSEWHERE = ["CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
                            "CohereForAI-c4ai-command-r-plus-tool_use.jinja"]


@pytest.mark.parametrize("name", RENDERED + RENDERED_WITHOUT_CALLS + RENDERED_CALLS_ELSEWHERE)
def test_a_conversation_with_tools_renders_as_transformers_renders_it(name):
    template = official_template(name)
    today = datetime.date.today()
    ours = render(template, CONVERSATION, BOS, EOS, tools=TOOLS)
    theirs = transformers_render(template, CONVERSATION, TOOLS)
    if today != datetime.date.today():                 # midnight passed: both again
        ours = render(template, CONVERSATION, BOS, EOS, tools=TOOLS)
    assert ours == theirs


@pytest.mark.parametrize("name", RENDERED)
def test_the_rendered_call_parses_back(name):
    """The assistant turn as its template writes it, read by the family's parser."""
    template = official_template(name)
    before = render(template, CONVERSATION[:2], BOS, EOS, tools=TOOLS)
    after = render(template, CONVERSATION[:3], BOS, EOS, tools=TOOLS,
                   add_generation_prompt=False)
    assert after.startswith(before)
    turn = after[len(before):].removesuffix(EOS)
    for marker in ("<think></think>", "</think>"):          # DeepSeek's empty thinking
        turn = turn.split(marker, 1)[-1]
    for end in ("<|im_end|>\n", "<｜end▁of▁sentence｜>", "<seed:eos>"):
        turn = turn.removesuffix(end)
    content, _, calls = run(Extractor(format_for(template), tools=TOOLS), [turn])
    assert content.strip() == ""
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
        [("get_weather", {"location": "Paris", "days": 2})]


PARIS = ("get_weather", {"location": "Paris", "days": 2})
REPLIES = {   # (template, reply) -> (content, thinking, [(name, arguments)], ids or None)
    "qwen3-coder": ("Qwen3-Coder.jinja",
                    "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=location>\n"
                    "Paris\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
                    "</tool_call>", ("Let me check.\n", "", [PARIS], None)),
    "qwen3-coder, two calls, the last cut short of its closes": (
        "Qwen3-Coder.jinja",
        "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n"
        "<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n"
        "<parameter=days>\n2", ("", "", [("now", {}), ("get_weather",       # cut: so far
                                                       '{"location": "Paris", "days": 2')],
                                   None)),
    "qwen 3.5 thinking then a call": (
        "Qwen3.5-4B.jinja",
        "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
        "<parameter=location>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
        "</function>\n</tool_call>", ("", "\nThe user wants weather.\n", [PARIS], None)),
    "mistral v11, two calls": (
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris", "days": 2}[TOOL_CALLS]now'
        "[ARGS]{}", ("", "", [PARIS, ("now", {})], None)),
    "mistral with call ids": (
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        'Sure.[TOOL_CALLS]get_weather[CALL_ID]abcdefghi[ARGS]{"location": "Paris", "days": 2}',
        ("Sure.", "", [PARIS], ["abcdefghi"])),
    "mistral nemo's array": (
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris", "days": 2},'
        ' "id": "123456789"}, {"name": "now", "arguments": {}}]',
        ("", "", [PARIS, ("now", {})], ["123456789", None])),
    "magistral thinking then an answer": (
        "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        "[THINK]Two days of Paris.[/THINK]It is sunny.",
        ("It is sunny.", "Two days of Paris.", [], None)),
    "deepseek v3.1, two calls": (
        "deepseek-ai-DeepSeek-V3.1.jinja",
        "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"location": "Paris", "days": 2}<｜tool▁call▁end｜><｜tool▁call▁begin｜>now'
        "<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        ("Checking.", "", [PARIS, ("now", {})], None)),
    "functionary v3.2, text then two calls": (
        "meetkai-functionary-medium-v3.2.jinja",
        'all\nChecking.>>>get_weather\n{"location": "Paris", "days": 2}>>>now\n{}',
        ("Checking.", "", [PARIS, ("now", {})], None)),
    "seed-oss thinking then a call": (
        "ByteDance-Seed-OSS.jinja",
        "<seed:think>The user wants weather.</seed:think><seed:tool_call>\n"
        "<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n<parameter=days>\n2"
        "\n</parameter>\n</function>\n</seed:tool_call>",
        ("", "The user wants weather.", [PARIS], None)),
    "granite 3.3 thinking then its wrapped response": (
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        "<think>Two days of Paris.</think><response>It is sunny.</response>",
        ("It is sunny.", "Two days of Paris.", [], None)),
    "granite 3.3, text then two calls": (
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        'Checking.<|tool_call|>[{"name": "get_weather", "arguments": {"location": "Paris", '
        '"days": 2}}, {"name": "now", "arguments": {}}]',
        ("Checking.", "", [PARIS, ("now", {})], None)),
    "smollm3 thinking then a call": (
        "HuggingFaceTB-SmolLM3-3B.jinja",
        '<think>\nA call.\n</think>\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"location": "Paris", "days": 2}}\n</tool_call>', ("", "\nA call.\n", [PARIS], None)),
    "command r7b thinking then two calls": (
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
        '<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[\n    '
        '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"location": "Paris", '
        '"days": 2}},\n    {"tool_call_id": "1", "tool_name": "now", "parameters": {}}\n]'
        "<|END_ACTION|>", ("", "I will look it up.", [PARIS, ("now", {})], None)),
    "command r7b thinking then its wrapped response": (
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
        "<|START_THINKING|>Sunny it was.<|END_THINKING|><|START_RESPONSE|>It is sunny."
        "<|END_RESPONSE|>", ("It is sunny.", "Sunny it was.", [], None)),
    "command r+ plan then two calls": (
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        'I will look up the weather.\nAction:\n```json\n[\n    {\n        "tool_name": '
        '"get_weather",\n        "parameters": {"location": "Paris", "days": 2}\n    },\n    '
        '{\n        "tool_name": "now",\n        "parameters": {}\n    }\n]\n```',
        ("I will look up the weather.\n", "", [PARIS, ("now", {})], None)),
    "deepseek without the calls' wrapper": (
        "deepseek-ai-DeepSeek-V3.1.jinja",
        '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location": "Paris", "days": 2}'
        "<｜tool▁call▁end｜>", ("", "", [PARIS], None)),
}


@pytest.mark.parametrize("case", REPLIES)
def test_replies_parse_the_same_however_they_are_cut(case):
    name, reply, (content, thinking, expected, ids) = REPLIES[case]
    fmt = format_for(official_template(name))
    for pieces in split_everywhere(reply):
        got_content, got_thinking, calls = run(make_extractor(fmt, tools=TOOLS), pieces)
        assert (got_content, got_thinking) == (content, thinking), pieces
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
            expected, pieces
        assert [c["function"]["index"] for c in calls] == list(range(len(calls)))
        for call, ident in zip(calls, ids or [None] * len(calls)):
            if fmt.name == "mistral":                    # the templates' 9 characters
                assert len(call["id"]) == 9 and call["id"].isalnum()
            if ident is not None:
                assert call["id"] == ident


def test_a_call_cut_by_the_length_limit_says_so_in_every_family():
    cut = {"Qwen3-Coder.jinja": "<tool_call>\n<function=get_weather>\n<parameter=location>\nPar",
           "Mistral-Small-3.2-24B-Instruct-2506.jinja":
               '[TOOL_CALLS]get_weather[ARGS]{"location": "Par',
           "deepseek-ai-DeepSeek-V3.1.jinja":
               '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location": "Par',
           "GLM-4.6.jinja": "<tool_call>get_weather\n<arg_key>location</arg_key>\n"
                            "<arg_value>Par",
           "MiniMax-M2.jinja": '<minimax:tool_call>\n<invoke name="get_weather">\n'
                               '<parameter name="location">Par',
           "meetkai-functionary-medium-v3.2.jinja": 'get_weather\n{"location": "Par',
           "moonshotai-Kimi-K2.jinja": "<|tool_call_begin|>functions.get_weather:0"
                                       '<|tool_call_argument_begin|>{"location": "Par',
           "ibm-granite-granite-3.3-2B-Instruct.jinja":
               '<|tool_call|>[{"name": "get_weather", "arguments": {"location": "Par',
           "ByteDance-Seed-OSS.jinja": "<seed:tool_call>\n<function=get_weather>\n"
                                       "<parameter=location>\nPar"}
    written = {name: '{"location": "Par"'                    # text values: so far
               for name in ("Qwen3-Coder.jinja", "GLM-4.6.jinja", "MiniMax-M2.jinja",
                            "ByteDance-Seed-OSS.jinja")}
    for name, reply in cut.items():
        _, _, calls = run(make_extractor(format_for(official_template(name)), tools=TOOLS), [reply])
        assert [(c["function"]["name"], c["function"]["arguments"], c["cut"])
                for c in calls] == [("get_weather", written.get(name, '{"location": "Par'),
                                     True)], name
    assert json.dumps(calls)


@pytest.mark.parametrize("name", ["Qwen3-Coder.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja"])
def test_a_forced_call_is_written_in_the_familys_syntax(server, openai_client, name):
    """tool_choice "required" on a tiny model given the family's template: a grammar in the
    family's own call syntax makes the reply a call (XML parameters for Qwen3-Coder), which
    comes back as a call with arguments of the schema's types. (DeepSeek V3.1's template
    writes no tool definitions, so its models report no tools capability.)"""
    model = "tiny-" + name.split(".jinja")[0].lower()
    created = server.client.post("/api/create", json={
        "model": model, "from": "tiny-qwen", "template": official_template(name),
        "stream": False})
    assert created.status_code == 200, created.text
    try:
        messages = [{"role": "user", "content": "Weather in Paris for 2 days?"}]
        if "Mistral" in name:
            messages.insert(0, {"role": "system", "content": "Use the tools."})
        # values from enums: a random model's free string could outrun max_tokens (and a
        # cut call is reported as cut, not as a call)
        bounded = json.loads(json.dumps(WEATHER))
        properties = bounded["function"]["parameters"]["properties"]
        properties["location"]["enum"], properties["days"]["enum"] = ["Paris", "Rome"], [1, 2]
        reply = openai_client.chat.completions.create(
            model=model, messages=messages, tools=[bounded], tool_choice="required",
            temperature=0, max_tokens=300)
        (call,) = reply.choices[0].message.tool_calls
        arguments = json.loads(call.function.arguments)
        assert call.function.name == "get_weather" and isinstance(arguments["location"], str)
        assert isinstance(arguments.get("days", 0), int)
        assert reply.choices[0].finish_reason == "tool_calls"
    finally:
        server.client.request("DELETE", "/api/delete", json={"model": model})


@pytest.fixture(scope="module")
def thinker_server(tmp_path_factory):
    """A tiny Qwen 3 whose think tags are tokens, with Qwen 3.5's template (which opens the
    thinking in the prompt), on a server of its own."""
    from runner.convert import convert

    from tests.support.hf_tiny import checkpoint
    from tests.support.server import ServerProcess

    work = tmp_path_factory.mktemp("thinker")
    path = convert(checkpoint("qwen3_think", work / "hf", max_position_embeddings=2048),
                   work / "thinker.gguf", "f32", progress=False)
    running = ServerProcess(tmp_path_factory.mktemp("thinker-store"), work,
                            RUNNER_NUM_PARALLEL=1)
    running.create("thinker", {"model.gguf": path})
    created = running.client.post("/api/create", json={
        "model": "thinker-35", "from": "thinker", "template":
        official_template("Qwen3.5-4B.jinja"), "stream": False})
    assert created.status_code == 200, created.text
    yield running, path
    assert running.stop() == 0


def test_a_format_holds_the_answer_not_the_thinking(thinker_server):
    """format with think: the model thinks freely, then the schema holds the answer. The
    close tag is biased to come first (a tiny random model would otherwise think on), so
    the reply is the close tag and an answer valid for the schema; asked the same without
    thinking, the schema holds the reply from its first token."""
    import jsonschema

    from runner.loading.loader import open_model

    running, path = thinker_server
    opened = open_model(path)
    close = opened.tokenizer.encode("</think>", add_special=False)
    opened.close()
    schema = {"type": "object", "required": ["a"], "additionalProperties": False,
              "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}}}
    for think in (True, False):
        reply = running.client.post("/api/chat", json={
            "model": "thinker-35", "messages": [{"role": "user", "content": "A number?"}],
            "think": think, "format": schema, "stream": False,
            "options": {"temperature": 0, "num_predict": 100,
                        "logit_bias": {str(close[0]): 100}}})
        assert reply.status_code == 200, reply.text
        message = reply.json()["message"]
        jsonschema.validate(json.loads(message["content"]), schema)
        assert not message.get("thinking", "").strip()
