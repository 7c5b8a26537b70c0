"""Tiny random Hugging Face checkpoints made at test time with transformers (torch CPU):
a seeded model of a few layers, hidden size 64, and a byte-level BPE tokenizer trained on
the test corpus with the architecture family's pre-tokenizer."""

from __future__ import annotations

from pathlib import Path

from runner.tokenizer.bpe import LLAMA3, QWEN2

from ..corpus import corpus

SPECIAL = {"llama": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
           "gemma3": ["<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"],
           "llama4": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot|>"],
           "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
           "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}
PATTERN = {"llama": LLAMA3, "qwen2": QWEN2, "qwen3": QWEN2, "gemma3": QWEN2, "llama4": LLAMA3}
SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
             rms_norm_eps=1e-5, initializer_range=0.1)


def tokenizer(kind: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(ignore_merges=kind in ("llama", "llama4")))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN[kind]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL[kind],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus([]) * 2, trainer)
    first, end = SPECIAL[kind][0], SPECIAL[kind][-1]
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=end,
                                   bos_token=first if kind in ("llama", "gemma3", "llama4")
                                   else None)


def checkpoint(kind: str, directory: Path, seed: int = 0, **config) -> Path:
    """Save a tiny model of kind (llama, qwen2, qwen3) and its tokenizer in directory."""
    import torch
    import transformers

    tok = tokenizer(kind)
    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
               "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
               "llama4": ("Llama4TextConfig", "Llama4ForCausalLM"),
               "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}
    config_class, model_class = (getattr(transformers, n) for n in classes[kind])
    settings = dict(SHAPE, vocab_size=len(tok), tie_word_embeddings=False,
                    eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    if kind == "qwen3":
        settings["head_dim"] = 16
    if kind == "gemma3":          # six layers: five sliding (a window of 8), one global
        settings.update(head_dim=16, query_pre_attn_scalar=16, num_hidden_layers=6,
                        sliding_window=8, tie_word_embeddings=True)
    if kind == "llama4":          # 4 layers: dense, MoE, dense, MoE (no RoPE); chunks of 8
        settings.update(head_dim=16, num_hidden_layers=4, intermediate_size=64,
                        intermediate_size_mlp=128, num_local_experts=4,
                        num_experts_per_tok=1, interleave_moe_layer_step=2,
                        attention_chunk_size=8, floor_scale=4, attn_scale=0.1)
    settings.update(config)
    torch.manual_seed(seed)
    model = model_class(config_class(**settings)).eval()
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def sentencepiece_checkpoint(directory: Path) -> Path:
    """A tiny llama whose tokenizer is only a SentencePiece model (BPE with byte fallback,
    Llama's settings: no normalization, a space before the text)."""
    import sentencepiece

    directory.mkdir(parents=True, exist_ok=True)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus([]) * 2), model_prefix=str(directory / "tokenizer"),
        vocab_size=1200, model_type="bpe", byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        user_defined_symbols=["<|im_end|>"], minloglevel=2)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(directory /
                                                                    "tokenizer.model"))
    hf = directory / "hf"
    checkpoint("llama", hf, vocab_size=processor.vocab_size(), bos_token_id=1,
               eos_token_id=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (hf / name).unlink(missing_ok=True)
    (hf / "tokenizer.model").write_bytes((directory / "tokenizer.model").read_bytes())
    return hf


def bert_checkpoint(directory: Path, pooling: str = "mean", seed: int = 0) -> Path:
    """A tiny BERT with a WordPiece vocabulary trained on the corpus and a
    sentence-transformers pooling module."""
    import json

    import torch
    from tokenizers import (Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    from transformers import BertConfig, BertModel, BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=800, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(corpus([]) * 2, trainer)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = sorted(tok.get_vocab().items(), key=lambda item: item[1])
    ids = dict(vocab)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[(t, ids[t]) for t in ("[CLS]", "[SEP]")])
    BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]",
                      sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]"
                      ).save_pretrained(directory)
    (directory / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in vocab), encoding="utf-8")
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128,
                        max_position_embeddings=128, initializer_range=0.1)
    BertModel(config, add_pooling_layer=True).eval().save_pretrained(directory)
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"}]))
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean"}))
    return directory
