"""Sampling transforms, determinism, and validation."""

import numpy as np
import pytest

from runner.sample import Sampler, SamplingOptions, logprobs, takes_candidates


@pytest.fixture
def logits():
    return np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 3


def test_greedy_is_argmax(logits):
    assert Sampler(SamplingOptions(temperature=0)).sample(logits) == int(np.argmax(logits))


def test_top_k_one_and_tiny_top_p_are_argmax(logits):
    best = int(np.argmax(logits))
    for options in (SamplingOptions(top_k=1, seed=3), SamplingOptions(top_p=1e-6, seed=3)):
        assert {Sampler(options).sample(logits) for _ in range(20)} == {best}


def test_same_seed_same_draws(logits):
    draws = lambda: [Sampler(SamplingOptions(seed=42, top_k=0, top_p=1.0)).sample(logits)
                     for _ in range(1)] + list(_many(SamplingOptions(seed=42), logits, 30))
    assert draws() == draws()
    assert list(_many(SamplingOptions(seed=1), logits, 30)) != \
        list(_many(SamplingOptions(seed=2), logits, 30))


def _many(options, logits, n):
    sampler = Sampler(options)
    return (sampler.sample(logits) for _ in range(n))


def test_draws_follow_the_distribution():
    logits = np.log(np.array([0.5, 0.3, 0.2], dtype=np.float32))
    sampler = Sampler(SamplingOptions(temperature=1.0, top_k=0, top_p=1.0, seed=7))
    counts = np.bincount([sampler.sample(logits) for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.5, 0.3, 0.2], atol=0.03)


def test_top_k_limits_candidates(logits):
    allowed = set(np.argsort(-logits)[:5].tolist())
    drawn = set(_many(SamplingOptions(top_k=5, top_p=1.0, temperature=5.0, seed=0), logits, 300))
    assert drawn <= allowed and len(drawn) > 1


def test_min_p_drops_unlikely_tokens():
    logits = np.log(np.array([0.6, 0.3, 0.09, 0.01], dtype=np.float32))
    drawn = set(_many(SamplingOptions(min_p=0.2, top_k=0, top_p=1.0, seed=0), logits, 500))
    assert drawn == {0, 1}


def test_repeat_presence_frequency_penalties():
    logits = np.array([2.0, 1.9, -1.0], dtype=np.float32)
    greedy = dict(temperature=0, top_k=0)
    assert Sampler(SamplingOptions(**greedy)).sample(logits, [0]) == 0
    assert Sampler(SamplingOptions(repeat_penalty=1.5, **greedy)).sample(logits, [0]) == 1
    assert Sampler(SamplingOptions(presence_penalty=0.5, **greedy)).sample(logits, [0]) == 1
    assert Sampler(SamplingOptions(frequency_penalty=0.06, **greedy)).sample(logits, [0, 0]) == 1
    # only the last repeat_last_n tokens count
    assert Sampler(SamplingOptions(repeat_penalty=1.5, repeat_last_n=1, **greedy)).sample(
        logits, [0, 2]) == 0


def test_logprobs(logits):
    chosen, top = logprobs(logits, 5, top=3)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    assert chosen.token == 5 and chosen.logprob == pytest.approx(np.log(probs[5]), rel=1e-5)
    assert [t.token for t in top] == np.argsort(-logits)[:3].tolist()
    assert top[0].logprob >= top[1].logprob >= top[2].logprob


@pytest.mark.parametrize("bad,message", [
    (dict(top_k=-1), "top_k must be >= 0"),
    (dict(temperature=float("nan")), "temperature must be a finite number"),
    (dict(temperature=-0.1), "temperature must be >= 0"),
    (dict(top_p=1.5), r"top_p must be \[0.0, 1.0\]"),
    (dict(min_p=-0.1), "min_p must be"),
    (dict(top_k=2.5), "top_k must be an integer"),
    (dict(top_k=True), "top_k must be an integer"),
    (dict(seed="x"), "seed must be an integer"),
    (dict(repeat_last_n=-2), "repeat_last_n must be"),
])
def test_invalid_options_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        SamplingOptions(**bad)


def test_top_k_is_exact_including_ties():
    from runner.sample.sampler import top_k

    rng = np.random.default_rng(0)
    for trial in range(60):
        n, k = int(rng.integers(50, 300_000)), int(rng.integers(1, 100))
        x = (rng.standard_normal(n) * rng.uniform(0.1, 10)).astype(np.float32)
        if trial % 3 == 0:
            x = np.round(x)                            # many ties
        assert np.array_equal(np.sort(x[top_k(x, k)]), np.sort(x)[-k:])


def test_a_negative_seed_is_random():
    assert SamplingOptions(seed=-1).seed is None                 # Ollama's default
    with pytest.raises(ValueError, match="seed"):
        SamplingOptions(seed=1.5)


@pytest.mark.parametrize("options", [
    dict(temperature=0), dict(seed=5), dict(seed=6, top_k=64, top_p=1.0),
    dict(seed=7, temperature=1.5, top_k=10, top_p=0.5, min_p=0.05), dict(seed=8, top_k=1)])
def test_the_devices_candidates_give_the_tokens_the_logits_give(options):
    """A device's top 64 (in its own order) draw what the whole vocabulary draws."""
    rng = np.random.default_rng(11)
    whole, picked = Sampler(SamplingOptions(**options)), Sampler(SamplingOptions(**options))
    assert takes_candidates(whole.options, 64)
    for _ in range(200):
        logits = (rng.standard_normal(49152) * 3).astype(np.float32)
        logits[rng.integers(0, 49152, 3)] = logits.max()             # ties at the top
        ids = rng.permutation(np.argpartition(logits, -64)[-64:]).astype(np.int32)
        assert picked.sample_candidates(ids, logits[ids]) == whole.sample(logits)


def test_penalties_or_a_wide_top_k_need_the_logits():
    assert not takes_candidates(SamplingOptions(repeat_penalty=1.1), 64)
    assert not takes_candidates(SamplingOptions(top_k=0), 64)          # no top-k at all
    assert not takes_candidates(SamplingOptions(top_k=100), 64)
    assert takes_candidates(SamplingOptions(top_k=40), 64)


def test_logit_bias_reshapes_the_logits_and_is_checked():
    from runner.sample import Sampler, SamplingOptions
    from runner.sample.sampler import takes_candidates

    logits = np.array([3.0, 1.0, 2.0], dtype=np.float32)
    biased = SamplingOptions(temperature=0, logit_bias={"1": 5, 0: -100.0})
    assert biased.logit_bias == {1: 5.0, 0: -100.0}
    assert not biased.greedy and not takes_candidates(biased, 64)   # the device cannot pick
    assert Sampler(biased).sample(logits) == 1
    assert Sampler(SamplingOptions(temperature=0)).sample(logits) == 0
    for bad in ({"x": 1}, {"1": 101}, {"-1": 1}, {"1": True}, [1, 2]):
        with pytest.raises(ValueError, match="logit_bias"):
            SamplingOptions(logit_bias=bad)


@pytest.mark.parametrize("options", [
    SamplingOptions(temperature=0), SamplingOptions(temperature=1.0, top_k=0, top_p=1.0, seed=0),
    SamplingOptions(top_k=3, seed=0), SamplingOptions(min_p=0.01, seed=0),
    SamplingOptions(temperature=0, logit_bias={7: 100}, repeat_penalty=1.3)],
    ids=["greedy", "random", "top-k", "min-p", "biased"])
def test_a_suppressed_token_is_never_drawn_even_with_the_largest_logit(options):
    """The model's suppressed ids (tokenizer.ggml.suppress_tokens) are -inf before anything
    else, for every request: greedy, random draws, a request's logit_bias of +100 on one."""
    logits = np.zeros(10, dtype=np.float32)
    logits[7], logits[3] = 50.0, 40.0      # without the mask one of them, all but always
    assert Sampler(options).sample(logits, [7]) == 7
    sampler = Sampler(options, suppressed=[3, 7])
    drawn = {sampler.sample(logits, [7]) for _ in range(300)}
    assert not drawn & {3, 7}
    assert len(drawn) > 1 or options.temperature == 0
    assert logits[7] == 50.0                  # the caller's logits (may be borrowed) untouched


def test_from_a_devices_candidates_the_suppressed_ones_are_dropped():
    ids = np.array([4, 9, 2, 6], dtype=np.int32)
    values = np.array([5.0, 9.0, 1.0, 7.0], dtype=np.float32)
    assert Sampler(SamplingOptions(temperature=0), [9]).sample_candidates(ids, values) == 6
    top2 = [SamplingOptions(top_k=2, top_p=1.0, seed=seed) for seed in range(40)]
    drawn = {Sampler(options, [9]).sample_candidates(ids, values) for options in top2}
    assert drawn == {6, 4}


def test_a_sampler_with_suppressed_tokens_needs_more_than_a_devices_argmax():
    """A device's argmax may be a suppressed token: such a greedy sampler reads candidates,
    as long as CANDIDATES less the suppressed ones still hold its top-k."""
    greedy, top40 = SamplingOptions(temperature=0), SamplingOptions(top_k=40)
    assert Sampler(greedy).greedy and not Sampler(greedy, [1]).greedy
    assert Sampler(greedy, [1]).takes_candidates(64)
    assert not Sampler(greedy, range(64)).takes_candidates(64)
    assert Sampler(top40, range(24)).takes_candidates(64)
    assert not Sampler(top40, range(25)).takes_candidates(64)
