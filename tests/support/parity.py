"""What the parity tests share: transformers' logits for a tiny checkpoint, ours, exact GELU."""

from __future__ import annotations

import numpy as np

import pyggml
from pyggml.tensor import Tensor
from runner.engine.executor import Executor
from runner.kvcache import new_cache
from runner.loading.loader import load_model

PROMPT = "The capital of France is Paris, and the capital of Spain is Madrid."


def table_gelu():
    """GELU (tanh form) as ggml's CPU backend computes it, like llama.cpp: looked up in a
    table of FP16 inputs with an FP16 result, the identity past +-10 and 0 below -10."""
    import torch

    class TableGelu(torch.nn.Module):
        def forward(self, x):
            rounded = torch.nn.functional.gelu(x.half().float(), approximate="tanh")
            table = rounded.half().float()
            return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, table))

    return TableGelu()


def gaussian_top_k_over_n_minus_1(module, inputs):
    """Gemma 3n's activation sparsity as llama.cpp computes it: the std over n - 1 (the
    reference's is over n; at the released width of 16384 the cutoffs are 4e-5 apart, at a
    tiny model's 128 they flip enough activations to move the logits by 3)."""
    import torch

    multiplier = torch.distributions.normal.Normal(0, 1).icdf(
        torch.tensor(module.activation_sparsity, dtype=torch.float32)).type(inputs.dtype)
    cutoff = inputs.mean(-1, keepdim=True) + inputs.std(-1, keepdim=True, unbiased=True) * \
        multiplier
    return torch.nn.functional.relu(inputs - cutoff)


def reference(hf_dir, ids, gelu=None) -> np.ndarray:
    """transformers' logits (T, vocab) for ids. Its tanh-form GELUs round as ggml's do, or
    are replaced by gelu (a torch module) when given; Gemma 3n's activation sparsity takes
    llama.cpp's std (gaussian_top_k_over_n_minus_1)."""
    import functools

    import torch
    from transformers import AutoModelForCausalLM
    from transformers.activations import GELUTanh

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    for module in model.modules():
        for attribute in ("act_fn", "act"):            # StarCoder2's MLP names it act
            if isinstance(getattr(module, attribute, None), GELUTanh):
                setattr(module, attribute, gelu or table_gelu())
        if hasattr(module, "_gaussian_topk"):
            module._gaussian_topk = functools.partial(gaussian_top_k_over_n_minus_1, module)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def executor(path, backend, cache_type="f32"):
    model = load_model(path, backend)
    kv = new_cache(model.model.cache_layers(), 256, backend, cache_type, False)
    return model, Executor(model.model, kv, pyggml.Scheduler([backend]))


def exact_gelu_graphs(monkeypatch):
    """Make our graphs compute GELU with erf, exactly, instead of ggml's FP16 table."""
    def halves(self):
        n = self.shape[-1] // 2
        half = self.shape[:-1] + (n,)
        return self.view(half, strides=self.strides).gelu_erf().mul(
            self.view(half, offset=n * self.strides[-1], strides=self.strides))

    monkeypatch.setattr(Tensor, "gelu", Tensor.gelu_erf)
    monkeypatch.setattr(Tensor, "geglu", lambda self, up: self.gelu_erf().mul(up))
    monkeypatch.setattr(Tensor, "geglu_halves", halves)
