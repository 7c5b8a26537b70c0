"""Tiny embedding checkpoints (Nomic BERT, EmbeddingGemma, Qwen3-Embedding) and texts to embed."""

from __future__ import annotations

import json

import numpy as np

from tests.support.hf_tiny import (SHAPE, checkpoint, pooling_modules, tokenizer,
                                   wordpiece_tokenizer)
from tests.support.unigram import train_unigram

# -- Nomic BERT (nomic-embed-text) and its MoE (v2-moe), saved as Nomic's own checkpoints are --
NOMIC_TEXTS = ["search_query: The capital of France is Paris.",
               "Hello, world! How are you today?",
               "search_document: Numbers like 1234 and symbols #@! too."]
NOMIC_CONFIG = dict(model_type="nomic_bert", architectures=["NomicBertModel"], n_embd=64,
                    n_head=4, n_layer=2, n_inner=96, n_positions=8192,
                    layer_norm_epsilon=1e-12, rotary_emb_base=1000, rotary_emb_fraction=1.0,
                    rotary_emb_interleaved=False, rotary_emb_scale_base=None,
                    activation_function="swiglu", qkv_proj_bias=False, mlp_fc1_bias=False,
                    mlp_fc2_bias=False, prenorm=False, causal=False, type_vocab_size=2)
# nomic-embed-text-v2-moe's settings, shrunk: experts every second layer, biases, GELU
NOMIC_MOE_CONFIG = dict(NOMIC_CONFIG, n_layer=4, n_positions=2048, max_trained_positions=2048,
                        activation_function="gelu", qkv_proj_bias=True, mlp_fc1_bias=True,
                        mlp_fc2_bias=True, moe_every_n_layers=2, num_experts=4, moe_top_k=2,
                        moe_normalize_expert_weights=False, expert_choice_router=False)


def nomic_checkpoint(directory, seed: int = 0, **change):
    """Random weights under Nomic's names, its config.json, a WordPiece tokenizer (or, with
    experts, a Unigram one as XLM-RoBERTa's tokenizer.json holds it)."""
    from safetensors.numpy import save_file

    moe = bool(change.get("moe_every_n_layers"))
    vocab = unigram_tokenizer(directory) if moe else wordpiece_tokenizer(directory)
    config = dict(NOMIC_CONFIG, vocab_size=vocab, **change)
    rng = np.random.default_rng(seed)
    e, f = config["n_embd"], config["n_inner"]

    def weights(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    def norm(prefix):
        return {f"{prefix}.weight": (1 + weights(e)), f"{prefix}.bias": weights(e)}

    def linear(name, rows, columns, bias):
        return {f"{name}.weight": weights(rows, columns),
                **({f"{name}.bias": weights(rows)} if bias else {})}

    tensors = {"embeddings.word_embeddings.weight": weights(vocab, e),
               "embeddings.token_type_embeddings.weight": weights(2, e), **norm("emb_ln")}
    bias = config["qkv_proj_bias"]
    for i in range(config["n_layer"]):
        p = f"encoder.layers.{i}."
        tensors.update({**linear(p + "attn.Wqkv", 3 * e, e, bias),
                        **linear(p + "attn.out_proj", e, e, bias),
                        **norm(p + "norm1"), **norm(p + "norm2")})
        if not moe:
            tensors.update({p + "mlp.fc11.weight": weights(f, e),
                            p + "mlp.fc12.weight": weights(f, e),
                            p + "mlp.fc2.weight": weights(e, f)})
        elif i % config["moe_every_n_layers"] == 1:
            x = config["num_experts"]
            tensors.update({p + "mlp.router.layer.weight": weights(x, e),
                            p + "mlp.experts.mlp.w1": weights(x * f, e),
                            p + "mlp.experts.mlp.w2": weights(x * f, e),
                            p + "mlp.experts.bias": np.zeros(e, np.float32)})
        else:
            tensors.update({**linear(p + "mlp.fc1", f, e, True),
                            **linear(p + "mlp.fc2", e, f, True)})
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config))
    pooling_modules(directory, "mean", e)
    return directory


def unigram_tokenizer(directory) -> int:
    """XLM-RoBERTa's fast tokenizer (tokenizer.json) over a Unigram model trained here:
    the precompiled NFKC map, space runs merged, a space before the text, <s> ... </s>."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors

    processor, _, charsmap = train_unigram(directory / "spm")
    vocab = [(processor.id_to_piece(i), processor.get_score(i))
             for i in range(processor.vocab_size())] + [("<mask>", 0.0)]
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                       prepend_scheme="always")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tokenizer.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
        "model_max_length": 512}))
    return len(vocab)


# -- EmbeddingGemma: Gemma3TextModel with sentence-transformers' pooling and Dense layers --
# a prompt long enough that the window (8 in the file: 4 positions either side) matters
EMBEDDING_GEMMA_TEXTS = ["The capital of France is Paris, and the capital of Spain is Madrid; "
                         "the capital of Italy is Rome.", "Hello, world! How are you today?"]
EMBEDDING_GEMMA_DENSE = {"2_Dense": (64, 96), "3_Dense": (96, 64)}


def embedding_gemma_checkpoint(directory, seed: int = 0, dense=EMBEDDING_GEMMA_DENSE,
                               **change):
    import torch
    from safetensors.torch import save_file
    from transformers import Gemma3TextConfig, Gemma3TextModel

    tok = tokenizer("gemma3")
    torch.manual_seed(seed)
    config = Gemma3TextConfig(**{**SHAPE, "vocab_size": len(tok), "head_dim": 16,
                                 "query_pre_attn_scalar": 16, "num_hidden_layers": 6,
                                 "sliding_window": 8, "use_bidirectional_attention": True,
                                 "bos_token_id": tok.bos_token_id,
                                 "eos_token_id": tok.eos_token_id, **change})
    model = Gemma3TextModel(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.copy_(0.3 * torch.randn_like(value))     # Gemma's norms: 1 + weight
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    pooling_modules(directory, "mean", config.hidden_size)
    modules = json.loads((directory / "modules.json").read_text())
    for index, (folder, (size_in, size_out)) in enumerate(dense.items(), start=2):
        (directory / folder).mkdir()
        (directory / folder / "config.json").write_text(json.dumps({
            "in_features": size_in, "out_features": size_out, "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity"}))
        save_file({"linear.weight": torch.randn(size_out, size_in) * 0.1},
                  directory / folder / "model.safetensors")
        modules.append({"idx": index, "name": str(index), "path": folder,
                        "type": "sentence_transformers.models.Dense"})
    (directory / "modules.json").write_text(json.dumps(modules))
    return directory


# -- Qwen3-Embedding: a Qwen 3 whose Pooling module takes the last token --
QWEN3_EMBEDDING_TEXTS = ["The capital of France is Paris.", "Hello, world! How are you today?",
                         "Numbers like 1234 and symbols #@! too."]


def qwen3_embedding_checkpoint(directory):
    """A tiny Qwen 3 with the modules.json and Pooling config Qwen3-Embedding ships."""
    checkpoint("qwen3", directory)
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}]))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_lasttoken": True}))
    return directory
