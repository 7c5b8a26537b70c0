"""The Phi-3, Phi-4, GLM-4 and Command R+ chat templates of llama.cpp's own test cases (its
tests/test-chat-template.cpp, read from the pinned archive: llama.cpp's set of real templates
has only Phi-3.5's, GLM-4.6's and 4.7's, and Command R+'s and R7B's tool-use ones, which
serve/formats/test_templates.py and test_families.py render):
rendered as transformers renders them and to the prompt llama.cpp's Jinja engine writes.
None of them writes tool calls (ChatGLM4's reads tools from a message's own `tools`), so
there is no call to parse back (llama.cpp has no parser for them either): their replies are
read as plain text, and such a model claims no tools."""

from __future__ import annotations

import pytest

from runner.serve.formats import PLAIN, format_for
from runner.tokenizer.template import render

from tests.support.official_templates import CHAT_CASE_CONVERSATION, llama_cpp_chat_cases

CASES = ["Phi-3-mini", "Phi-3-small", "Phi-3-medium", "Phi-3-vision", "phi-4", "ChatGLM4",
         "CohereForAI/c4ai-command-r-plus"]
# templates that render no system message: llama.cpp's Jinja path merges it into the first
# user turn (its polyfill); transformers and this server render the template as written
DROP_SYSTEM = {"Phi-3-mini", "Phi-3-medium"}
SYSTEM = CHAT_CASE_CONVERSATION[0]["content"] + "\n"


def transformers_render(template: str, bos: str, eos: str) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[CHAT_CASE_CONVERSATION],
                                        chat_template=template, add_generation_prompt=True,
                                        bos_token=bos, eos_token=eos)
    return rendered[0]


@pytest.mark.parametrize("name", CASES)
def test_the_template_renders_as_transformers_and_llama_cpp_render_it(name):
    case = llama_cpp_chat_cases()[name]
    template, bos, eos = case["template_str"], case["bos_token"], case["eos_token"]
    ours = render(template, CHAT_CASE_CONVERSATION, bos, eos)
    assert ours == transformers_render(template, bos, eos)
    expected = case.get("expected_output_jinja") or case["expected_output"]
    if name in DROP_SYSTEM:
        assert SYSTEM in expected
        expected = expected.replace(SYSTEM, "", 1)
    assert ours == expected
    assert format_for(template) is PLAIN
