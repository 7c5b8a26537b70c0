"""The thinking budget (runner/sample/budget.py): its count over a real tokenizer's pieces,
and the batch loop forcing the close tag once the count is spent, on a tiny Qwen 3 whose
<think> and </think> are tokens. A random model never closes its thought: whatever follows
the close tag here is the budget's doing."""

from __future__ import annotations

import queue

import pytest

import runner
from runner.api import split_options
from runner.engine.request import AHEAD, Request
from runner.sample.budget import Phase, ThinkingBudget, cut_character

TAGS = ("<think>", "</think>")
OPENED = "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n<think>\n"
NOT_OPENED = "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    """One thread on a machine of more: the loop overlaps, and greedy steps chain."""
    from runner.convert import convert

    from tests.support.hf_tiny import checkpoint

    directory = tmp_path_factory.mktemp("budget")
    path = convert(checkpoint("qwen3_think", directory / "hf"), directory / "t.gguf", "f32",
                   progress=False)
    handle = runner.load(path, num_ctx=256, threads=1, num_gpu=0)
    yield handle
    handle.close()


@pytest.fixture(scope="module")
def ids(thinker):
    tokens = thinker.tokenizer
    (open_id,), (close_id,) = (tokens.encode(t, add_special=False) for t in TAGS)
    word = tokens.encode(" sky", add_special=False)[0]
    return open_id, close_id, word


def test_the_close_tag_comes_once_the_budget_is_spent(thinker, ids):
    open_id, close_id, word = ids
    budget = ThinkingBudget(3, TAGS, thinker.tokenizer, opened=True)
    for _ in range(3):
        assert budget.forced() is None
        budget.accept(word)
    assert budget.forced() == close_id and budget.thought == 3
    budget.accept(close_id)
    assert budget.forced() is None and budget.phase is Phase.DONE
    budget.accept(word)                              # the answer is not counted
    assert budget.forced() is None and budget.thought == 3


def test_a_block_the_model_closes_ends_the_count(thinker, ids):
    open_id, close_id, word = ids
    budget = ThinkingBudget(2, TAGS, thinker.tokenizer, opened=True)
    budget.accept(word)
    budget.accept(close_id)
    assert budget.phase is Phase.DONE
    for _ in range(5):
        budget.accept(word)
        assert budget.forced() is None


def test_counting_starts_at_the_open_tag_and_again_at_each(thinker, ids):
    open_id, close_id, word = ids
    budget = ThinkingBudget(1, TAGS, thinker.tokenizer)
    for _ in range(4):                               # no thinking yet: nothing counted
        budget.accept(word)
    assert budget.phase is Phase.WAITING and budget.forced() is None
    for _ in range(2):                               # a block, then another
        budget.accept(open_id)
        assert budget.forced() is None
        budget.accept(word)
        assert budget.forced() == close_id
        budget.accept(close_id)
        assert budget.phase is Phase.DONE
    assert budget.thought == 2


def test_a_zero_budget_closes_at_once(thinker, ids):
    open_id, close_id, _ = ids
    assert ThinkingBudget(0, TAGS, thinker.tokenizer, opened=True).forced() == close_id
    waiting = ThinkingBudget(0, TAGS, thinker.tokenizer)
    assert waiting.forced() is None
    waiting.accept(open_id)
    assert waiting.forced() == close_id


def test_a_close_tag_of_several_tokens_is_forced_whole(thinker):
    tags = ("[THINK]", "[/THINK]")                   # plain text in this vocabulary
    tokenizer = thinker.tokenizer
    forced = tokenizer.encode(tags[1], add_special=False)
    assert len(forced) > 1
    budget = ThinkingBudget(1, tags, tokenizer, opened=True)
    budget.accept(tokenizer.encode(" sky", add_special=False)[0])
    taken = []
    while (token := budget.forced()) is not None:
        taken.append(token)
        budget.accept(token)
    assert taken == forced and budget.phase is Phase.DONE


def test_the_thinking_is_not_closed_inside_a_character(thinker):
    tokenizer = thinker.tokenizer
    lead, middle, last = (tokenizer.token_bytes.index(bytes([b])) for b in "好".encode())
    budget = ThinkingBudget(1, TAGS, tokenizer, opened=True)
    budget.accept(lead)                              # spent, but inside a character
    assert budget.forced() is None and not budget.quiet(1)
    budget.accept(middle)
    assert budget.forced() is None
    budget.accept(last)
    assert budget.forced() is not None


def test_cut_character():
    text = "a好€".encode()
    assert [cut_character(text[:n]) for n in range(len(text) + 1)] == \
        [False, False, True, True, False, True, True, False]
    assert not cut_character(b"\xbf\xbf\xbf\xbf")   # not UTF-8: nothing to wait for


def test_quiet_looks_ahead_of_every_token_that_may_be_forced(thinker, ids):
    """quiet(n): none of the next n choices can be forced, whatever they are."""
    open_id, close_id, word = ids
    counting = ThinkingBudget(AHEAD, TAGS, thinker.tokenizer, opened=True)
    assert counting.quiet(AHEAD)
    counting.accept(word)                            # one left: the choice after is forced
    assert counting.quiet(1) and not counting.quiet(AHEAD)
    waiting = ThinkingBudget(AHEAD - 1, TAGS, thinker.tokenizer)
    assert waiting.quiet(AHEAD)                      # the open tag, then one thought
    assert not ThinkingBudget(0, TAGS, thinker.tokenizer).quiet(AHEAD)


def test_a_budget_is_a_count(thinker):
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="number of tokens"):
            ThinkingBudget(bad, TAGS, thinker.tokenizer)


def generate(model, prompt: str, budget: int | None, logprobs: bool = False, **options):
    """(text, tokens when logprobs, done event) of one request through the batch loop."""
    events: queue.Queue = queue.Queue()
    sampling, generation = split_options(dict(options))
    request = Request(model.tokenize(prompt, add_special=True), events.put, sampling,
                      generation, logprobs=logprobs,
                      budget=None if budget is None else
                      ThinkingBudget(budget, TAGS, model.tokenizer, opened=prompt == OPENED))
    model.engine.submit(request)
    text, tokens = "", []
    while True:
        event = events.get(timeout=60)
        assert "error" not in event, event["error"]
        if event.get("done"):
            return text, tokens, event
        text += event.get("content", "")
        tokens += [entry["token"] for entry in event.get("logprobs", [])]


def test_the_loop_forces_the_close_tag_and_the_answer_follows(thinker):
    greedy = dict(temperature=0, num_predict=16)
    free, _, _ = generate(thinker, OPENED, None, **greedy)
    assert "</think>" not in free                   # left alone, it thinks to the end
    text, tokens, done = generate(thinker, OPENED, 5, logprobs=True, **greedy)
    assert tokens[5] == "</think>" and "</think>" not in tokens[:5]
    assert len(tokens) == done["eval_count"] == 16 and text == "".join(tokens)
    thought, answer = text.split("</think>")
    assert free.startswith(thought) and answer
    # the same request with nothing but the sampler reading the logits: the steps chain
    # on the device while the budget is far from spent, and stop chaining before it is
    assert thinker.executor.chains
    assert generate(thinker, OPENED, 5, **greedy)[0] == text


def test_sampled_replies_think_within_the_budget(thinker):
    """Three tokens of thinking, or a few more where the third ends inside a character
    (a token's text then shows a replacement character), and the close tag."""
    for seed in range(4):
        _, tokens, _ = generate(thinker, OPENED, 3, logprobs=True, temperature=1.0,
                                seed=seed, num_predict=12)
        assert "</think>" in tokens
        end = tokens.index("</think>")
        assert end == 3 or (3 < end <= 6 and "\ufffd" in "".join(tokens[:3]))


def test_each_block_the_reply_opens_gets_the_budget(thinker, ids):
    """The prompt leaves the thinking closed; a bias makes the model open it at every
    token it may choose: each block it opens is cut after two tokens."""
    open_id, _, _ = ids
    _, tokens, _ = generate(thinker, NOT_OPENED, 2, logprobs=True, temperature=0,
                            num_predict=8, logit_bias={open_id: 100.0})
    assert tokens == ["<think>"] * 3 + ["</think>"] + ["<think>"] * 3 + ["</think>"]
