"""Chat templates: the file's jinja2 template and Gemma's built-in fallback."""

import json

import pytest

from runner.tokenizer.template import GEMMA_TURNS, render, template_for


def test_gemma_fallback_folds_the_system_prompt_into_the_first_turn():
    text = render(GEMMA_TURNS, [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Hello!"},
                                {"role": "user", "content": "Why?"}])
    assert text == ("<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                    "<start_of_turn>model\nHello!<end_of_turn>\n"
                    "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n")


def test_template_choice():
    assert template_for({"tokenizer.chat_template": "T", "general.architecture": "gemma3"}) == "T"
    assert template_for({"general.architecture": "gemma3"}) == GEMMA_TURNS
    assert template_for({"general.architecture": "llama"}) is None


def test_template_errors_become_value_errors():
    with pytest.raises(ValueError, match="chat template failed: no system"):
        render("{{ raise_exception('no system') }}", [{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="role"):
        render(GEMMA_TURNS, [{"role": "user"}])
    with pytest.raises(ValueError, match="role"):
        render(GEMMA_TURNS, ["not a dict"])
    with pytest.raises(ValueError, match="chat template failed: integer division"):
        render("{{ 1 // 0 }}", [{"role": "user", "content": "x"}])     # a Python error


CALLED = [{"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "now", "arguments": {"zone": "UTC"}}}]}]


def test_call_arguments_are_objects_unless_the_template_needs_them_as_text():
    as_object = "{{ messages[0].tool_calls[0].function.arguments.zone }}"
    as_text = "{{ '>>>' + messages[0].tool_calls[0].function.name + '\\n' + " \
              "messages[0].tool_calls[0].function.arguments }}"         # functionary's
    assert render(as_object, CALLED) == "UTC"
    assert render(as_text, CALLED) == '>>>now\n{"zone": "UTC"}'
    with pytest.raises(ValueError, match="chat template failed"):
        render("{{ messages[0].content + 1 }}", CALLED)     # fails either way: its error


def test_tojson_writes_what_a_filter_yields_as_a_list():
    template = "{{ messages | map(attribute='role') | tojson }}"
    assert render(template, [{"role": "user", "content": "x"}]) == '["user"]'


def test_a_template_that_reads_functions_unset_gets_the_tools_as_json():
    tools = [{"type": "function", "function": {"name": "now"}}]
    reads = "{{ functions }}|{{ datetime.split(' ')[-1] }}"
    assert render(reads, [{"role": "user", "content": "x"}], tools=tools) == \
        json.dumps(tools, indent=2) + "|GMT"
    sets = "{% set functions = 'mine' %}{{ functions }}"
    assert render(sets, [{"role": "user", "content": "x"}], tools=tools) == "mine"


def test_a_tool_without_a_description_has_an_empty_one():
    template = "{% for t in tools %}[{{ t.function.description + '|' + t.function.name }}]" \
               "{% endfor %}"
    tools = [{"type": "function", "function": {"name": "now"}}]
    assert render(template, [{"role": "user", "content": "x"}], tools=tools) == "[|now]"
    assert tools == [{"type": "function", "function": {"name": "now"}}]


def test_image_tags_as_ollamas_server_and_its_renderers_write_them():
    """Ollama's server/prompt.go for templates, model/renderers/image_tags.go for its
    renderers in code (the space, and content that names its tags kept)."""
    from runner.tokenizer.template import with_image_tags

    messages = [{"role": "user", "content": "What is this?", "images": ["a"]},
                {"role": "user", "content": "Compare [img] to that.", "images": ["b", "c"]},
                {"role": "user", "content": "[img-9] as written", "images": ["d"]}]
    tagged, images = with_image_tags(messages)
    assert [m["content"] for m in tagged] == [
        "[img-0]What is this?", "[img-2]Compare [img-1] to that.", "[img-3][img-9] as written"]
    assert images == ["a", "b", "c", "d"]
    spaced, _ = with_image_tags(messages, spaced=True)
    assert [m["content"] for m in spaced] == [
        "[img-0] What is this?", "[img-2] Compare [img-1] to that.", "[img-9] as written"]
