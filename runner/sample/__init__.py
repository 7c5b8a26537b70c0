"""Sampling: small pure transforms over numpy logits, chained once per request.

    sampler = Sampler(SamplingOptions(temperature=0.8, top_k=40, seed=1))
    token = sampler.sample(logits, history)

Temperature 0 is greedy. Otherwise: penalties, top-k (partial selection), temperature,
softmax, top-p, min-p, then a draw from the sampler's own seeded generator.
sample_candidates() draws the same token from the few largest logits a device picked.
"""

from .options import SamplingOptions
from .sampler import Sampler, TokenLogprob, logprobs, takes_candidates

__all__ = ["Sampler", "SamplingOptions", "TokenLogprob", "logprobs", "takes_candidates"]
