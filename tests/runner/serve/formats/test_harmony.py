"""The harmony reply parser (gpt-oss) against the format's specification (openai/harmony's
docs: channels, recipients, <|end|>, <|call|>, <|return|>), on replies streamed in every
two-piece chunking and one character at a time, malformed replies included."""

from __future__ import annotations

import pytest

from runner.serve.formats.harmony import HarmonyExtractor
from runner.serve.formats import format_for, make_extractor

HARMONY = format_for("{{ '<|start|>' }}<|channel|>analysis<|message|>{{ m }}<|end|>")
WEATHER = {"name": "get_weather", "arguments": {"city": "Paris"}}

# reply -> (content, thinking, calls (name and arguments)) with tools offered
REPLIES = {
    "thinking then answer": (
        "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
        ("2 + 2 = 4.", "User asks 2+2. Easy.", [])),
    "a tool call (recipient after the channel)": (
        "<|channel|>analysis<|message|>Need weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>',
        ("", "Need weather.", [WEATHER])),
    "a tool call (recipient before the channel)": (
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>'
        '{"city": "Paris"}<|call|>',
        ("", "", [WEATHER])),
    "a preamble, then a call": (
        "<|channel|>commentary<|message|>Checking the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>',
        ("Checking the weather.", "", [WEATHER])),
    "the final answer with no thinking": (
        "<|channel|>final<|message|>Hello <b>there</b> | pipes <| and |> too<|return|>",
        ("Hello <b>there</b> | pipes <| and |> too", "", [])),
    "a final answer that never ends": (
        "<|channel|>final<|message|>cut off mid", ("cut off mid", "", [])),
    "thinking without <|end|> before the answer": (
        "<|channel|>analysis<|message|>hmm<|start|>assistant<|channel|>final<|message|>ok"
        "<|return|>", ("ok", "hmm", [])),
    "a call whose arguments do not parse": (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{city:"
        "<|call|>", ("{city:", "", [])),
    "a call without a recipient": (
        '<|channel|>commentary<|message|>{"city": "Paris"}<|call|>',
        ('{"city": "Paris"}', "", [])),
    "text with no header at all": ("plain words", ("plain words", "", [])),
    "text after the reply's end is dropped": (
        "<|channel|>final<|message|>done<|return|>ignored", ("done", "", [])),
}


def run(reply: str, pieces: list[str], **options) -> tuple[str, str, list]:
    extractor = make_extractor(HARMONY, **{"tools": True, **options})
    content, thinking, calls = "", "", []
    for piece in pieces + [None]:
        c, t, k = extractor.finish() if piece is None else extractor.push(piece)
        content, thinking, calls = content + c, thinking + t, calls + k
    return content, thinking, [dict(name=c["function"]["name"],
                                    arguments=c["function"]["arguments"]) for c in calls]


def chunkings(reply: str):
    yield [reply]
    yield list(reply)
    for cut in range(1, len(reply)):
        yield [reply[:cut], reply[cut:]]


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_every_chunking_gives_the_same_parts(name):
    reply, expected = REPLIES[name]
    for pieces in chunkings(reply):
        assert run(reply, pieces) == expected, (name, pieces)


def test_the_format_is_recognized_and_calls_are_numbered():
    assert isinstance(make_extractor(HARMONY), HarmonyExtractor)
    extractor = make_extractor(HARMONY, tools=True)
    _, _, first = extractor.push(REPLIES["a tool call (recipient after the channel)"][0])
    assert first[0]["function"]["index"] == 0 and first[0]["id"].startswith("call_")


def test_thinking_is_dropped_when_not_wanted_and_calls_need_tools():
    reply = REPLIES["a tool call (recipient after the channel)"][0]
    assert run(reply, [reply], thinking=False) == ("", "", [WEATHER])
    assert run(reply, [reply], tools=False) == ('{"city": "Paris"}', "Need weather.", [])
