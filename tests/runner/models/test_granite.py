"""Granite's own keys, checked as they are read: the logit scale divides (so it is
positive), rope.scaling.finetuned is llama.cpp's switch for rope on granite (a boolean;
false, no layer rotates and a context shift leaves every key) and means nothing to
granitemoe."""

from __future__ import annotations

import pytest

from runner.loading.loader import open_model
from runner.models.base import ModelError

from tests.support.gguf_edit import rewrite


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from runner.convert import convert

    from tests.support.hf_tiny import checkpoint

    work = tmp_path_factory.mktemp("granite")
    return {kind: convert(checkpoint(kind, work / kind), work / f"{kind}.gguf", "f32",
                          progress=False) for kind in ("granite", "granitemoe")}


@pytest.mark.parametrize("value, words", [
    (0.0, "granite.logit_scale is 0.0, not a positive number to divide the logits by"),
    (-8.0, "granite.logit_scale is -8.0, not a positive number"),
    (float("nan"), "granite.logit_scale is nan, not a finite number"),
])
def test_a_logit_scale_that_cannot_divide_is_refused(files, tmp_path, value, words):
    path = rewrite(files["granite"], tmp_path / "bad.gguf",
                   values={"granite.logit_scale": value})
    with pytest.raises(ModelError, match=words):
        open_model(path)


def test_rope_finetuned_switches_granites_rope_only(files, tmp_path):
    key = "{}.rope.scaling.finetuned"
    off = open_model(rewrite(files["granite"], tmp_path / "off.gguf",
                             values={key.format("granite"): False})).model
    assert off.config.rope_layers == (False, False)
    assert off.shift(None, None, 0) is None                   # no key is re-rotated
    on = open_model(files["granite"]).model
    assert on.config.rope_layers is None and on.config.uses_rope(1)
    moe = open_model(rewrite(files["granitemoe"], tmp_path / "moe.gguf",
                             values={key.format("granitemoe"): False})).model
    assert moe.config.rope_layers is None
    with pytest.raises(ModelError, match="granite.rope.scaling.finetuned is 'no', not a "
                                         "boolean"):
        open_model(rewrite(files["granite"], tmp_path / "bad.gguf",
                           values={key.format("granite"): "no"}))
