"""No architecture or projector is registered without a parity test: each registered name
is one that a parity test converts from a tiny transformers checkpoint, checks that it loads
as that registered class, and compares with transformers' own forward pass."""

from __future__ import annotations

import pytest

from runner.models import ARCHITECTURES, model_class
from runner.models.vision import PROJECTORS, projector_class

from ..audio import test_encoder as audio_parity
from ..convert import test_bert as bert_parity
from ..convert import test_embedding_gemma as embedding_gemma_parity
from ..convert import test_gpt_oss as gpt_oss_parity
from ..convert import test_nomic as nomic_parity
from ..convert import test_parity as text_parity
from ..convert import test_qwen35 as qwen35_parity
from ..convert import test_qwen_vl as qwen_vl_parity
from ..vision import test_encoders as vision_parity


def test_every_architecture_has_its_parity_test():
    tested = set(text_parity.ARCHITECTURE_OF.values()) | {
        bert_parity.ARCHITECTURE, nomic_parity.ARCHITECTURE, nomic_parity.MOE_ARCHITECTURE,
        embedding_gemma_parity.ARCHITECTURE, embedding_gemma_parity.OLLAMA_ARCHITECTURE,
        gpt_oss_parity.OLLAMA_ARCHITECTURE} | qwen_vl_parity.ARCHITECTURES | \
        qwen35_parity.ARCHITECTURES
    assert set(ARCHITECTURES) == tested, "an architecture is registered without a parity test"


def test_every_projector_has_its_parity_test():
    tested = set(vision_parity.PROJECTOR_OF.values()) | {audio_parity.PROJECTOR}
    assert set(PROJECTORS) == tested, "a projector is registered without a parity test"


def test_unknown_and_twice_registered_names_are_clear_errors():
    with pytest.raises(ValueError, match="Unknown architecture 'mamba9'; this runner knows "
                                         "bert, deepseek2, gemma-embedding, gemma2"):
        model_class("mamba9")
    with pytest.raises(ValueError, match="Unknown projector type 'qwen9'; this runner knows"):
        projector_class("qwen9")
    with pytest.raises(ValueError, match="The architecture 'llama' is registered twice"):
        ARCHITECTURES.register("llama")(type("Another", (), {}))
