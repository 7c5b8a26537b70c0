"""A thinking budget through the server: Anthropic's thinking.budget_tokens and OpenAI's
reasoning effort (EFFORT_BUDGETS) bound the thinking of a tiny random Qwen 3 whose template
opens the thinking in the prompt, as Qwen 3.5's and the R1 distills' do. Left alone such a
model thinks until its tokens run out; with a budget the runner forces </think> once the
budget is spent and the model goes on with an answer."""

from __future__ import annotations

import anthropic
import openai
import pytest

from runner.convert import convert
from runner.serve.service.options import EFFORT_BUDGETS, effort_budget

from tests.support.server import QWEN_TOOLS_TEMPLATE, ServerProcess, templated_checkpoint

NAME = "tiny-thinker"
CLOSED = "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>" \
    "\n\n{% endif %}"
# thinking on: the generation prompt ends with the open tag
TEMPLATE = QWEN_TOOLS_TEMPLATE.replace(CLOSED, CLOSED[:-len("{% endif %}")] +
                                       "{% else %}<think>\n{% endif %}")
QUESTION = [{"role": "user", "content": "Why is the sky blue?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert TEMPLATE != QWEN_TOOLS_TEMPLATE
    work = tmp_path_factory.mktemp("thinker")
    hf = templated_checkpoint("qwen3_think", work / "hf", TEMPLATE,
                              max_position_embeddings=1024)
    running = ServerProcess.exact(tmp_path_factory, NAME, {
        "model.gguf": convert(hf, work / "model.gguf", "f32", progress=False)})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


def test_budget_tokens_close_the_thinking_and_the_answer_follows(claude):
    free = claude.messages.create(model=NAME, max_tokens=24, messages=QUESTION,
                                  thinking={"type": "enabled", "budget_tokens": 1024},
                                  extra_body=GREEDY)
    assert [b.type for b in free.content] == ["thinking"]       # never closed by itself
    bounded = claude.messages.create(model=NAME, max_tokens=24, messages=QUESTION,
                                     thinking={"type": "enabled", "budget_tokens": 4},
                                     extra_body=GREEDY)
    thinking, text = bounded.content
    assert thinking.type == "thinking" and text.type == "text" and text.text
    assert free.content[0].thinking.startswith(thinking.thinking)
    assert len(thinking.thinking) < len(free.content[0].thinking)
    assert bounded.usage.output_tokens == 24
    streamed = []
    with claude.messages.stream(model=NAME, max_tokens=24, messages=QUESTION,
                                thinking={"type": "enabled", "budget_tokens": 4},
                                extra_body=GREEDY) as stream:
        streamed = [block.type for block in stream.get_final_message().content]
    assert streamed == ["thinking", "text"]


def test_thinking_turned_off_takes_no_budget(claude):
    reply = claude.messages.create(model=NAME, max_tokens=8, messages=QUESTION,
                                   thinking={"type": "disabled"}, extra_body=GREEDY)
    assert [b.type for b in reply.content] == ["text"]


def test_a_negative_budget_is_refused(claude):
    with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
        claude.messages.create(model=NAME, max_tokens=8, messages=QUESTION,
                               thinking={"type": "enabled", "budget_tokens": -1})


def test_an_effort_is_a_budget_of_tokens(server):
    """reasoning_effort minimal: 128 tokens of thinking (to the token, unless the 128th
    ends inside a character), the close tag, then the answer, in the tokens' logprobs."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model=NAME, messages=QUESTION, max_tokens=140,
                                           temperature=0, logprobs=True,
                                           reasoning_effort="minimal")
    tokens = [entry.token for entry in reply.choices[0].logprobs.content]
    budget = EFFORT_BUDGETS["minimal"]
    end = tokens.index("</think>")
    assert end == budget or (budget < end <= budget + 3 and "\ufffd" in "".join(tokens[:end]))
    message = reply.choices[0].message
    assert message.content and message.model_extra.get("reasoning")
    responses = client.responses.create(model=NAME, input="Why is the sky blue?",
                                        max_output_tokens=140, temperature=0,
                                        reasoning={"effort": "minimal"})
    assert [item.type for item in responses.output] == ["reasoning", "message"]


def test_the_effort_table():
    assert [effort_budget(e) for e in ("minimal", "low", "medium", "high")] == \
        [128, 1024, 2048, 4096]
    assert [effort_budget(e) for e in (None, "xhigh", "max", "ultra")] == [None] * 4


def test_what_the_runner_is_told_of_each_family():
    """A budget goes with the family's think tags; harmony's effort is its own (its
    answer comes after a channel, not a close tag): no budget, though a format still
    holds its final channel."""
    from runner.protocol import CompletionRequest
    from runner.serve.formats.format import FORMATS, PLAIN
    from runner.serve.formats.prompts import Prompt
    from runner.serve.service.core import _bound_thinking

    def told(name: str, opened: bool, format, budget):
        body = CompletionRequest(prompt="")
        fmt = PLAIN if name == "plain" else next(f for f in FORMATS if f.name == name)
        _bound_thinking(body, Prompt("", fmt, opened), format, budget)
        return body.think_tags, body.think_opened, body.thinking_budget

    assert told("qwen", True, None, 64) == (["<think>", "</think>"], True, 64)
    assert told("qwen", False, "json", 64) == (["<think>", "</think>"], False, 64)
    assert told("qwen", False, None, None) == (None, False, None)
    assert told("harmony", False, None, 64) == (None, False, None)
    assert told("harmony", False, "json", 64)[1:] == (True, None)
    assert told("plain", False, None, 64) == (None, False, None)
