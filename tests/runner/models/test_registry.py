"""No architecture or projector is registered without a parity test: each registered name
is one that a parity test converts from a tiny transformers checkpoint, checks that it loads
as that registered class, and compares with transformers' own forward pass (the names those
tests take: tests/support/architectures.py)."""

from __future__ import annotations

import pytest

from runner.models import ARCHITECTURES, model_class
from runner.models.vision import PROJECTORS, projector_class

from tests.support import architectures as parity


def test_every_architecture_has_its_parity_test():
    tested = set(parity.TEXT_ARCHITECTURE_OF.values()) | {
        parity.BERT_ARCHITECTURE, parity.NOMIC_ARCHITECTURE, parity.NOMIC_MOE_ARCHITECTURE,
        parity.EMBEDDING_GEMMA_ARCHITECTURE, parity.EMBEDDING_GEMMA_OLLAMA_ARCHITECTURE,
        parity.GPT_OSS_OLLAMA_ARCHITECTURE, parity.QWEN_VL_OLLAMA_ARCHITECTURE,
        parity.GLM4_MOE_LITE_OLLAMA_ARCHITECTURE, parity.OLMO3_OLLAMA_ARCHITECTURE} | \
        set(parity.QWEN_VL_ARCHITECTURE_OF.values()) | set(parity.QWEN35_ARCHITECTURE_OF.values())
    assert set(ARCHITECTURES) == tested, "an architecture is registered without a parity test"


def test_every_projector_has_its_parity_test():
    tested = set(parity.PROJECTOR_OF.values()) | {parity.AUDIO_PROJECTOR} | \
        set(parity.UNIFIED_PROJECTORS)
    assert set(PROJECTORS) == tested, "a projector is registered without a parity test"


def test_unknown_and_twice_registered_names_are_clear_errors():
    with pytest.raises(ValueError, match="Unknown architecture 'mamba9'; this runner knows "
                                         "bert, .*deepseek2, .*gemma-embedding, gemma2"):
        model_class("mamba9")
    with pytest.raises(ValueError, match="Unknown projector type 'qwen9'; this runner knows"):
        projector_class("qwen9")
    with pytest.raises(ValueError, match="The architecture 'llama' is registered twice"):
        ARCHITECTURES.register("llama")(type("Another", (), {}))
