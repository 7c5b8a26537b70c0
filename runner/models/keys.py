"""What a valid value is for each GGUF hyper-parameter key a model reads: one table, applied
by Metadata (base.py) as a model reads the key, so that a malformed file is refused with a
sentence naming the key before its value sizes anything or reaches a ggml op that asserts
(an assert aborts the whole process).

A key's own range is checked here; how keys must agree with each other and with the tensors
(the rope within the head, the KV heads dividing the heads, the blocks the file holds) is
checked by the configs (TransformerConfig.check, RopeConfig.check). A key's value may be
one number or, where a model reads it per layer, an array of them: each element is checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gguf

LLM, ATTENTION, ROPE, SSM = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope, gguf.Keys.SSM
VISION, AUDIO = gguf.Keys.ClipVision, gguf.Keys.ClipAudio
INT32_MAX = 2**31 - 1        # ggml's ops take sizes and positions as int32


class ModelError(ValueError):
    """The model file does not hold what its architecture needs."""


SHOWN = 60                   # characters of a bad value a message quotes


def malformed(name: str, value, problem: str) -> ModelError:
    """The one sentence for a bad value: '<key> is <value>, <problem>; the file is
    malformed.'"""
    text = repr(value)
    if len(text) > SHOWN:
        text = text[:SHOWN] + "..."
    return ModelError(f"{name} is {text}, {problem}; the file is malformed.")


@dataclass(frozen=True)
class Rule:
    """A number's kind and range. whole: an integer (a float with a fraction is refused);
    least: the smallest value allowed (above: it must be greater); most: the largest, or
    for a maximum (clamp) the value it is taken down to."""
    what: str
    whole: bool
    least: float
    above: bool = False
    most: float = INT32_MAX
    clamp: bool = False

    def checked(self, name: str, value):
        """value as int or float, or ModelError naming the key."""
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        if not number or not math.isfinite(value) or (self.whole and value != int(value)):
            raise malformed(name, value, f"not {self.what}")
        if value < self.least or (self.above and value == self.least):
            raise malformed(name, value, f"not {self.what}")
        if value > self.most:
            if not self.clamp:
                raise malformed(name, value, f"more than {self.most:g}")
            value = self.most
        return int(value) if self.whole else float(value)


COUNT = Rule("a positive whole number", whole=True, least=1)
SIZE = Rule("a whole number of 0 or more", whole=True, least=0)
# a maximum (a context length): larger values mean no smaller limit, and are taken as the
# largest that ggml's int32 positions reach
MAXIMUM = Rule("a positive whole number", whole=True, least=1, most=INT32_MAX, clamp=True)
MAXIMUM_OR_NONE = Rule("a whole number of 0 or more", whole=True, least=0, most=INT32_MAX,
                       clamp=True)
POSITIVE = Rule("a positive finite number", whole=False, least=0.0, above=True, most=math.inf)
NON_NEGATIVE = Rule("a finite number of 0 or more", whole=False, least=0.0, most=math.inf)
FINITE = Rule("a finite number", whole=False, least=-math.inf, most=math.inf)

# key template (gguf-py's names, {arch} filled in by Metadata) -> its rule
RULES: dict[str, Rule] = {
    LLM.BLOCK_COUNT: COUNT, LLM.EMBEDDING_LENGTH: COUNT, LLM.FEED_FORWARD_LENGTH: SIZE,
    LLM.CONTEXT_LENGTH: MAXIMUM, LLM.VOCAB_SIZE: COUNT,
    LLM.EXPERT_COUNT: SIZE, LLM.EXPERT_USED_COUNT: SIZE, LLM.EXPERT_FEED_FORWARD_LENGTH: SIZE,
    LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH: SIZE, LLM.EXPERT_SHARED_COUNT: SIZE,
    LLM.EXPERT_GROUP_COUNT: SIZE, LLM.EXPERT_GROUP_USED_COUNT: SIZE,
    LLM.EXPERT_GATING_FUNC: SIZE, LLM.EXPERT_WEIGHTS_SCALE: NON_NEGATIVE,
    LLM.LEADING_DENSE_BLOCK_COUNT: SIZE, LLM.INTERLEAVE_MOE_LAYER_STEP: COUNT,
    LLM.NEXTN_PREDICT_LAYERS: SIZE, LLM.FULL_ATTENTION_INTERVAL: COUNT,
    LLM.NUM_DEEPSTACK_LAYERS: SIZE, LLM.EMBD_LENGTH_PER_LAYER_INP: SIZE,
    LLM.ALTUP_NUM_INPUTS: COUNT, LLM.ALTUP_ACTIVE_IDX: SIZE,
    LLM.ACTIVATION_SPARSITY_SCALE: NON_NEGATIVE,
    LLM.ATTN_LOGIT_SOFTCAPPING: NON_NEGATIVE, LLM.FINAL_LOGIT_SOFTCAPPING: NON_NEGATIVE,
    LLM.LOGIT_SCALE: FINITE, LLM.EMBEDDING_SCALE: FINITE, LLM.RESIDUAL_SCALE: FINITE,
    ATTENTION.SCALE: FINITE,
    ATTENTION.HEAD_COUNT: COUNT,
    ATTENTION.HEAD_COUNT_KV: SIZE,            # 0 for a recurrent layer in a per-layer array
    ATTENTION.KEY_LENGTH: SIZE, ATTENTION.VALUE_LENGTH: SIZE, ATTENTION.KEY_LENGTH_SWA: SIZE,
    ATTENTION.KEY_LENGTH_MLA: SIZE, ATTENTION.VALUE_LENGTH_MLA: SIZE,
    ATTENTION.LAYERNORM_RMS_EPS: POSITIVE, ATTENTION.LAYERNORM_EPS: POSITIVE,
    ATTENTION.SLIDING_WINDOW: SIZE, ATTENTION.SHARED_KV_LAYERS: SIZE,
    ATTENTION.Q_LORA_RANK: SIZE, ATTENTION.KV_LORA_RANK: COUNT,
    ATTENTION.TEMPERATURE_LENGTH: COUNT, ATTENTION.TEMPERATURE_SCALE: NON_NEGATIVE,
    "{arch}.attention.chunk_size": COUNT, "{arch}.no_rope_layer_interval": COUNT,
    "{arch}.moe_every_n_layers": COUNT, "{arch}.head_dim": COUNT,
    ROPE.DIMENSION_COUNT: COUNT, ROPE.DIMENSION_COUNT_SWA: COUNT,
    ROPE.DIMENSION_SECTIONS: SIZE, "rope.mrope_section": SIZE,
    ROPE.FREQ_BASE: POSITIVE, ROPE.FREQ_BASE_SWA: POSITIVE,
    "{arch}.rope.freq_base_local": POSITIVE,
    ROPE.SCALING_FACTOR: NON_NEGATIVE, ROPE.SCALING_ATTN_FACTOR: FINITE,
    ROPE.SCALING_ORIG_CTX_LEN: MAXIMUM_OR_NONE, ROPE.SCALING_YARN_EXT_FACTOR: FINITE,
    ROPE.SCALING_YARN_BETA_FAST: FINITE, ROPE.SCALING_YARN_BETA_SLOW: FINITE,
    ROPE.SCALING_YARN_LOG_MUL: FINITE,
    SSM.CONV_KERNEL: COUNT, SSM.STATE_SIZE: COUNT, SSM.GROUP_COUNT: COUNT,
    SSM.TIME_STEP_RANK: COUNT, SSM.INNER_SIZE: SIZE,
    # the projectors' towers
    VISION.EMBEDDING_LENGTH: COUNT, VISION.FEED_FORWARD_LENGTH: COUNT,
    VISION.BLOCK_COUNT: COUNT, VISION.IMAGE_SIZE: COUNT, VISION.PATCH_SIZE: COUNT,
    VISION.PROJECTION_DIM: COUNT, VISION.Attention.HEAD_COUNT: COUNT,
    VISION.Attention.LAYERNORM_EPS: POSITIVE, VISION.SPATIAL_MERGE_SIZE: COUNT,
    AUDIO.EMBEDDING_LENGTH: COUNT, AUDIO.BLOCK_COUNT: COUNT, AUDIO.PROJECTION_DIM: COUNT,
    AUDIO.Attention.HEAD_COUNT: COUNT, AUDIO.Attention.LAYERNORM_EPS: POSITIVE,
    AUDIO.NUM_MEL_BINS: COUNT,
}


def checked(key: str, name: str, value, array: bool = False):
    """value of key (named name in the file) as its rule allows: one number, or with array
    an array of them (returned as a list). A key without a rule passes as it is."""
    rule = RULES.get(key)
    if rule is None:
        return value
    if isinstance(value, list):
        if not array:
            raise malformed(name, value, "an array where one number belongs")
        return [rule.checked(name, item) for item in value]
    return rule.checked(name, value)
