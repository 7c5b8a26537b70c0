"""A real server (`python -m runner serve`) on a free loopback port, over a store that holds
the pulled real models, a tiny converted BERT (embeddings) and a tiny converted Qwen 3 whose
chat template declares tools and thinking; driven by the official ollama and openai clients."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.convert import convert
from runner.loading import store
from runner.serve.library.store import Library

from tests.support.hf_tiny import bert_checkpoint
from tests.support.server import QWEN_TOOLS_TEMPLATE, ServerProcess, templated_checkpoint


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """GGUF files of a tiny BERT and a tiny Qwen 3 with a tools-and-thinking template."""
    work = tmp_path_factory.mktemp("tiny-serve")
    bert = convert(bert_checkpoint(work / "bert", "mean"), work / "bert.gguf", "f32",
                   progress=False)
    qwen_dir = templated_checkpoint("qwen3", work / "qwen3", QWEN_TOOLS_TEMPLATE,
                                    max_position_embeddings=2048)
    qwen = convert(qwen_dir, work / "qwen3.gguf", "f32", progress=False)
    return {"bert": Path(bert), "qwen": Path(qwen)}


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory, model_paths, tiny_models):
    """A store with the real models (linked) and the tiny ones as created models."""
    root = tmp_path_factory.mktemp("store")
    for name, path in (("smollm2:135m", model_paths["smollm2"]),
                       ("gemma3:270m-base", model_paths["gemma3"])):
        (root / store.CATALOG[name].filename).symlink_to(path)
    library = Library(root)
    library.create("tiny-bert", tiny_models["bert"])
    library.create("tiny-qwen", tiny_models["qwen"])
    return root


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("serve")


@pytest.fixture(scope="module")
def server(models_dir, workdir):
    running = ServerProcess(models_dir, workdir, RUNNER_NUM_PARALLEL=2,
                            RUNNER_MAX_LOADED_MODELS=3)
    yield running
    assert running.stop() == 0
    assert running.runner_pids() == []


@pytest.fixture(scope="module")
def ollama_client(server):
    import ollama

    return ollama.Client(host=server.url)


@pytest.fixture(scope="module")
def openai_client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
