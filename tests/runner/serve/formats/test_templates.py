"""Every chat template of llama.cpp's set (the pinned archive's models/templates/, 70 files
of real models, read at test time): a conversation with tools renders, the call its
assistant turn writes parses back to the same call with the format recognized from the
template, and so does that turn cut into two pieces at every character; a turn of two calls
parses back to both (where the template writes more than one a turn).

TO_DO lists the templates whose round trip does not work yet, each with what fails; the
test expects them to fail (strict), so one that starts working must leave the list."""

from __future__ import annotations

import pytest

from runner.serve.formats import format_for, make_extractor
from runner.tokenizer.template import render

from tests.support.official_templates import official_template, official_template_names
from tests.support.streaming import run, split_everywhere

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "required": ["location"],
                   "properties": {"location": {"type": "string", "description": "A city."},
                                  "days": {"type": "integer", "description": "How many."}}}}}
TOOLS = [WEATHER]
ID = "abcdefghi"                       # Mistral's templates take ids of 9 characters
ASKED = [{"role": "system", "content": "You are helpful."},
         {"role": "user", "content": "What is the weather in Paris for 2 days?"}]
CALLED = {"role": "assistant", "content": "", "tool_calls": [
    {"id": ID, "type": "function",
     "function": {"name": "get_weather", "arguments": {"location": "Paris", "days": 2}}}]}
PARIS = ("get_weather", {"location": "Paris", "days": 2})
ROME = ("get_weather", {"location": "Rome", "days": 1})
CALLED_TWICE = dict(CALLED, tool_calls=[*CALLED["tool_calls"], {
    "id": "bcdefghij", "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Rome", "days": 1}}}])
BOS, EOS = "<s>", "</s>"
# what ends a turn: the model's end-of-generation token, which the runner stops at
ENDS = (EOS, "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<turn|>", "<|call|>",
        "<|tool_response>", "<｜end▁of▁sentence｜>", "<|return|>", "<|endoftext|>",
        "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|message_sep|>")

NO_CALL = {   # templates that write no tool calls at all
    "google-gemma-2-2b-it.jinja": "Gemma 2 has no tools",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "it writes past calls as nothing",
    "llama-cpp-rwkv-world.jinja": "RWKV's template has no tools",
    "microsoft-Phi-3.5-mini-instruct.jinja": "Phi 3.5's template has no tools",
    "HuggingFaceTB-SmolLM3-3B.jinja": "it renders an assistant turn's content only",
    "LFM2-8B-A1B.jinja": "it renders an assistant turn's content only",
    "LFM2.5-Instruct.jinja": "it renders an assistant turn's content only",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": "it renders an assistant turn's content "
                                                      "only",
}
ONE_CALL = {   # templates that write one call a turn (the first, or refuse more)
    name: "its template writes one call a turn" for name in (
        "GigaChat3-10B-A1.8B.jinja", "GigaChat3.1-10B-A1.8B.jinja", "openai-gpt-oss-120b.jinja",
        "meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "meta-llama-Llama-3.3-70B-Instruct.jinja")}
TO_DO: dict[str, str] = {}


def turns(template: str, called: dict = CALLED) -> tuple[str, str]:
    """(the prompt up to the assistant's turn, the prompt with its calls): the system
    message dropped where the template refuses one."""
    for messages in (ASKED, ASKED[1:]):
        try:
            return (render(template, messages, BOS, EOS, tools=TOOLS),
                    render(template, [*messages, called], BOS, EOS, tools=TOOLS,
                           add_generation_prompt=False))
        except ValueError as error:
            if "system" not in str(error).lower() or messages is not ASKED:
                raise
    raise AssertionError("unreachable")


def written_call(template: str, called: dict = CALLED) -> str | None:
    """The assistant turn with the calls as the template writes them, up to the end of its
    turn; None where it writes no call."""
    before, after = turns(template, called)
    if not after.startswith(before):      # the generation prompt opens differently
        common = 0
        while after[common:common + 1] == before[common:common + 1]:
            common += 1
        before = before[:before.rfind("<", 0, common)]       # from the tag they differ in
    turn = after[len(before):]
    start = turn.find("get_weather")
    if start < 0 or "Paris" not in turn:
        return None
    last = turn.rfind("get_weather")
    ends = [at for at in (turn.find(end, last) for end in ENDS) if at >= 0]
    return turn[:min(ends)] if ends else turn


def parsed(template: str, pieces) -> list[tuple]:
    _, _, calls = run(make_extractor(format_for(template), tools=TOOLS), pieces)
    return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


def cases(to_do: dict[str, str], left_out: dict[str, str] = NO_CALL):
    for name in official_template_names():
        if name in NO_CALL or name in left_out:
            continue
        marks = [pytest.mark.xfail(reason=to_do[name], strict=True)] if name in to_do else []
        yield pytest.param(name, marks=marks, id=name.removesuffix(".jinja"))


@pytest.mark.parametrize("name", cases(TO_DO))
def test_the_call_a_template_writes_parses_back_however_it_is_cut(name):
    template = official_template(name)
    turn = written_call(template)
    assert turn is not None, "the template wrote no call"
    for pieces in split_everywhere(turn):
        assert parsed(template, pieces) == [PARIS], pieces


@pytest.mark.parametrize("name", cases(TO_DO, ONE_CALL))
def test_two_calls_in_one_turn_parse_back_however_they_are_cut(name):
    template = official_template(name)
    turn = written_call(template, CALLED_TWICE)
    assert turn is not None and "Rome" in turn, "the template wrote the calls as no call"
    for pieces in split_everywhere(turn):
        assert parsed(template, pieces) == [PARIS, ROME], pieces


@pytest.mark.parametrize("name", NO_CALL)
def test_the_templates_without_calls_write_none(name):
    assert written_call(official_template(name)) is None
