"""llama.cpp's own server tests for the APIs both servers speak, run against ours: the test
files come from the pinned source archive (tools/server/tests, not committed), their
ServerProcess starts our server (peers/llamacpp_ours.py) over a store whose model "test" is
the tiny Qwen 3 with tools and thinking (a tiny BERT for their embedding tests). Tests that
check what only llama-server has (its own routes and fields, its model's text) are listed
with the reason; every other one must pass.

    pytest -m slow tests/runner/serve/test_llamacpp_suite.py"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from runner.convert import convert
from runner.serve.library.store import Library

from tests.support.hf_tiny import bert_checkpoint
from tests.support.official_templates import pinned_archive

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
SUITES = ["unit/test_compat_anthropic.py", "unit/test_compat_oai_responses.py",
          "unit/test_chat_completion.py", "unit/test_embedding.py", "unit/test_tool_call.py"]
# unit/test_completion.py is left out: it tests llama-server's own /completion API, which
# neither OpenAI's nor Ollama's API has.
THEIR_TEXT = "checks the text or token counts of llama-server's test model (stories260K)"
THEIR_BERT = "checks the token counts of their BERT (bge-small's vocabulary)"
SPECIFIC = "llama-server's own"
# test (or test[params]) -> why it cannot pass here (not an incompatibility of the API)
NOT_OURS = {
    "unit/test_compat_anthropic.py::test_anthropic_empty_messages":
        "llama-server answers an empty message list with a reply; Anthropic's API (and we) "
        "answer 400",
    "unit/test_compat_anthropic.py::test_anthropic_thinking_history_in_template":
        f"calls {SPECIFIC} /apply-template endpoint",
    "unit/test_compat_anthropic.py::test_anthropic_tool_result_with_image":
        "expects llama-server's 500 for an image a text model cannot take; we answer 400, "
        "as Ollama does",
    "unit/test_compat_anthropic.py::test_anthropic_vision_format_accepted":
        "likewise: llama-server's 500 where we answer 400",
    "unit/test_compat_anthropic.py::test_anthropic_vision_base64_with_multimodal_model":
        "downloads a test image and a vision model from Hugging Face",
    "unit/test_compat_oai_responses.py::test_responses_with_openai_library": THEIR_TEXT,
    "unit/test_compat_oai_responses.py::test_responses_stream_with_llama_telemetry":
        f"{SPECIFIC} timings_per_token and return_progress fields",
    "unit/test_chat_completion.py::test_chat_completion": THEIR_TEXT,
    "unit/test_chat_completion.py::test_chat_completion_cached_tokens": THEIR_TEXT,
    "unit/test_chat_completion.py::test_chat_completion_stream": THEIR_TEXT,
    "unit/test_chat_completion.py::test_chat_completion_with_openai_library":
        "expects system_fingerprint to be llama-server's build (b…), and " + THEIR_TEXT,
    "unit/test_chat_completion.py::test_chat_template":
        f"reads the prompt from {SPECIFIC} debug field __verbose",
    "unit/test_chat_completion.py::test_chat_template_assistant_prefill":
        f"reads the prompt from {SPECIFIC} debug field __verbose",
    "unit/test_chat_completion.py::test_chat_template_continue_final_message_vllm_compat":
        f"reads the prompt from {SPECIFIC} debug field __verbose",
    "unit/test_chat_completion.py::test_chat_template_continue_final_message_mutual_exclusion":
        "vLLM's add_generation_prompt and continue_final_message fields (OpenAI's API has "
        "neither; a final assistant message is continued, as Ollama does)",
    "unit/test_chat_completion.py::test_apply_chat_template": f"{SPECIFIC} /apply-template",
    "unit/test_chat_completion.py::test_completion_with_response_format[response_format0-6-"
    '"42"]': f"{SPECIFIC} schema inside response_format json_object (OpenAI's has none)",
    **{f"unit/test_chat_completion.py::test_completion_with_response_format[response_format{i}"
       "-0-None]": f"{SPECIFIC} schema inside response_format json_object" for i in (5, 6, 7)},
    "unit/test_chat_completion.py::test_completion_with_json_schema":
        f"{SPECIFIC} top-level json_schema field",
    "unit/test_chat_completion.py::test_completion_with_grammar": f"{SPECIFIC} GBNF field",
    "unit/test_chat_completion.py::test_completion_with_invalid_grammar":
        f"{SPECIFIC} GBNF field",
    "unit/test_chat_completion.py::test_invalid_chat_completion_req[messages7]":
        "wants two assistant messages in a row refused; OpenAI's API (and we) take them",
    "unit/test_chat_completion.py::test_chat_completion_with_timings_per_token":
        f"{SPECIFIC} timings field",
    "unit/test_chat_completion.py::test_logprobs_stream":
        "wants content null in the first chunk; OpenAI's first chunk has content \"\"",
    "unit/test_chat_completion.py::test_logit_bias": f"calls {SPECIFIC} /tokenize",
    "unit/test_chat_completion.py::test_context_size_exceeded":
        "wants llama-server's error type exceed_context_size_error; OpenAI's (and ours) is "
        "invalid_request_error with code context_length_exceeded",
    "unit/test_chat_completion.py::test_context_size_exceeded_stream":
        "likewise: llama-server's error type",
    "unit/test_chat_completion.py::test_return_progress": f"{SPECIFIC} return_progress",
    "unit/test_chat_completion.py::test_chat_completions_token_count":
        f"{SPECIFIC} /chat/completions/input_tokens",
    "unit/test_chat_completion.py::test_verbose_debug": f"{SPECIFIC} verbose field",
    **{f"unit/test_embedding.py::test_embedding_mixed_input[{params}]": why
       for params, why in (("-False", "wants input \"\" embedded; OpenAI answers 400"),
                           ("input3-False", "strings inside a token array: " + SPECIFIC),
                           ("input5-True", "texts and token arrays in one list: " + SPECIFIC),
                           ("input7-True", "strings inside a token array: " + SPECIFIC),
                           ("input8-False", f"{SPECIFIC} prompt_string objects"),
                           ("input9-False", f"{SPECIFIC} content-part objects"),
                           ("input10-True", f"{SPECIFIC} input objects"))},
    "unit/test_embedding.py::test_embedding_content_text_same_as_string":
        f"{SPECIFIC} content-part objects as input",
    "unit/test_embedding.py::test_embedding_pooling_none":
        f"{SPECIFIC} non-OpenAI /embeddings answer (ours there is OpenAI's, as vLLM's)",
    "unit/test_embedding.py::test_embedding_pooling_none_oai":
        f"{SPECIFIC} --pooling none; the model's pooling is the GGUF's",
    "unit/test_embedding.py::test_embedding_error_prompt_too_long":
        "wants llama-server's wording (\"too large\"); ours is 400 saying the input's length "
        "and the context's",
    "unit/test_embedding.py::test_embedding_usage_single": THEIR_BERT,
    "unit/test_embedding.py::test_embedding_usage_multiple": THEIR_BERT,
}


def why_not_ours(name: str) -> str | None:
    """The reason a test (by its id, or by its name for every parameter) cannot pass here."""
    return NOT_OURS.get(name) or NOT_OURS.get(name.split("[")[0])


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    archive, root = pinned_archive()
    top = tmp_path_factory.mktemp("llamacpp")
    with tarfile.open(archive) as tar:            # the tests and the templates they name
        for member in tar.getmembers():
            relative = member.name[len(root) + 1:]
            if member.isfile() and relative.startswith(("tools/server/tests/",
                                                         "models/templates/")):
                target = top / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    work = top / "tools" / "server" / "tests"
    shutil.copy(HERE / "peers" / "llamacpp_ours.py", work / "llamacpp_ours.py")
    # their utils import wget for the model downloads this run never makes
    (work / "wget.py").write_text('def download(*args, **kwargs):\n'
                                  '    raise RuntimeError("this run downloads nothing")\n')
    return work


def test_llama_cpps_server_tests_pass_against_ours(suite, models_dir, tiny_models, tmp_path):
    Library(models_dir).create("test", tiny_models["qwen"])
    # their embedding tests send 258-token inputs: a tiny BERT of 512 positions
    bert = convert(bert_checkpoint(tmp_path / "bert", "mean", positions=512),
                   tmp_path / "bert.gguf", "f32", progress=False)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "llamacpp_ours", "-q", "-rA", "-m", "not slow",
         "-p", "no:cacheprovider", *SUITES], cwd=suite, capture_output=True, text=True,
        timeout=1500, env={**os.environ, "OURS_STORE": str(models_dir),
                           "OURS_MODEL": str(tiny_models["qwen"]),
                           "OURS_EMBED_MODEL": str(bert),
                           # the suite's own modules; not the checkout, whose pyggml sources
                           # would shadow the installed build's compiled module
                           "PYTHONPATH": str(suite)})
    results = {name: outcome for outcome, name in
               re.findall(r"^(PASSED|FAILED|ERROR) (\S+)", done.stdout, re.M)}
    assert results, done.stdout[-3000:] + done.stderr[-2000:]
    failed = {name for name, outcome in results.items() if outcome != "PASSED"}
    unexpected = {name for name in failed if why_not_ours(name) is None}
    assert not unexpected, "\n".join(sorted(unexpected)) + "\n" + done.stdout[-8000:]
