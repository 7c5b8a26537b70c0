"""Tiny random Hugging Face checkpoints made at test time with transformers (torch CPU):
a seeded model of a few layers, hidden size 64, and a byte-level BPE tokenizer trained on
the test corpus with the architecture family's pre-tokenizer."""

from __future__ import annotations

from pathlib import Path

from runner.tokenizer.bpe import GPT2, GPT4O, LLAMA3, QWEN2, SEED_CODER
from runner.tokenizer.bpe import CHATGLM4

from tests.support.corpus import corpus

SPECIAL = {"llama": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
           "gemma2": ["<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"],
           "gemma3": ["<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"],
           "gemma3n": ["<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"],
           "gemma4": ["<bos>", "<|turn>", "<turn|>", "<eos>"],
           "gemma4_moe": ["<bos>", "<|turn>", "<turn|>", "<eos>"],
           "gemma4_unified": ["<bos>", "<|turn>", "<turn|>", "<eos>"],
           "llama4": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot|>"],
           "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
           "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
           "qwen3_think": ["<|endoftext|>", "<think>", "</think>", "<|im_start|>",
                           "<|im_end|>"],
           "qwen3_moe": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
           "olmo2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
           "ministral3": ["<s>", "</s>", "[INST]", "[/INST]"],
           "olmo3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
           "deepseek_v2": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"],
           "deepseek_v3": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"],
           "glm4_moe_lite": ["[gMASK]", "<sop>", "<|user|>", "<|endoftext|>"],
           "gpt_oss": ["<|startoftext|>", "<|start|>", "<|message|>", "<|end|>",
                       "<|return|>"],
           "phi3": ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
           "glm4": ["[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|endoftext|>"],
           **{kind: ["<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>",
                     "<|end_of_text|>"] for kind in ("granite", "granitemoe", "granitemoeshared")},
           "smollm3": ["<|im_start|>", "<think>", "</think>", "<|im_end|>"],
           "seed_oss": ["<seed:bos>", "<seed:think>", "</seed:think>", "<seed:tool_call>",
                        "</seed:tool_call>", "<seed:eos>"],
           "mixtral": ["<s>", "[INST]", "[/INST]", "</s>"],
           **{kind: ["<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>",
                     "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<EOS_TOKEN>"]
              for kind in ("cohere", "cohere2")},
           "starcoder2": ["<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<|endoftext|>"],
           "exaone4": ["[|system|]", "[|user|]", "[|assistant|]", "<think>", "</think>",
                       "[|endofturn|]"],
           **{kind: ["<|endoftext|>", "<think>", "</think>", "<|im_start|>", "<|im_end|>"]
              for kind in ("qwen3_5", "qwen3_5_moe", "qwen3_next")}}
PATTERN = {"llama": LLAMA3, "qwen2": QWEN2, "qwen3": QWEN2, "qwen3_think": QWEN2,
           "qwen3_moe": QWEN2, "olmo2": QWEN2,
           "ministral3": QWEN2, "olmo3": QWEN2, "gemma2": QWEN2, "gemma3": QWEN2,
           "gemma3n": QWEN2, "llama4": LLAMA3, "gemma4": QWEN2, "gemma4_moe": QWEN2,
           "deepseek_v2": QWEN2, "deepseek_v3": QWEN2, "glm4_moe_lite": QWEN2,
           "gpt_oss": GPT4O, "qwen3_5": QWEN2, "qwen3_5_moe": QWEN2, "qwen3_next": QWEN2}
PATTERN.update({"granite": GPT2, "granitemoe": GPT2, "granitemoeshared": GPT2,
                "smollm3": LLAMA3, "seed_oss": SEED_CODER, "mixtral": LLAMA3})
PATTERN["phi3"] = GPT4O
PATTERN["glm4"] = CHATGLM4
PATTERN["exaone4"] = GPT2               # llama.cpp's exaone4 splits as GPT-2
# digits split one by one before GPT-2's expression (llama.cpp's command-r and starcoder)
DIGITS_FIRST = {"cohere", "cohere2", "starcoder2"}
PATTERN.update({kind: GPT2 for kind in DIGITS_FIRST})
SLIDING, FULL = "sliding_attention", "full_attention"
# gpt-oss as the released models are, shrunk: biases everywhere, sinks, the even layers
# sliding, experts chosen by raw logits; YaRN with its correction range rounded (truncate,
# as llama.cpp's ggml rounds it; the released configs say truncate false)
GPT_OSS = dict(head_dim=16, num_hidden_layers=4, sliding_window=8, num_local_experts=4,
               max_position_embeddings=64,
               num_experts_per_tok=2, intermediate_size=32, attn_implementation="eager",
               rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                                "beta_slow": 1.0, "truncate": True, "rope_theta": 150000.0,
                                "original_max_position_embeddings": 16})
# Phi-4-mini's kind, shrunk: three quarters of each head rotated, LongRoPE 4x over an
# original context of 256 (two sets of factors, which differ, and the attention factor that
# scales both), a sliding window as its files give one (longer than any test's text: llama.cpp
# does not apply it)
PHI3_ROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
             "original_max_position_embeddings": 256,
             "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0],
             "short_factor": [1.0, 1.05, 1.1, 1.2, 1.3, 1.5]}
PHI3 = dict(max_position_embeddings=1024, original_max_position_embeddings=256,
            sliding_window=512, pad_token_id=None, rope_parameters=PHI3_ROPE)
# Llama's kin, each with its every optional part: Granite's multipliers (as Granite 3.3's,
# the attention's bigger than 1/sqrt(16)) and biases on every projection; Granite MoE's 8
# experts of 32, 2 a token, and the shared one's; SmolLM3's fourth layer without rope;
# Seed-OSS's Q/K/V biases and its own head size; Mixtral's 8 experts, 2 a token
GRANITE = dict(embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.3,
               logits_scaling=8.0, attention_bias=True)
GRANITE_MOE = dict(GRANITE, num_local_experts=8, num_experts_per_tok=2, intermediate_size=32)
LLAMA_KIN = {"granite": dict(GRANITE, mlp_bias=True), "granitemoe": GRANITE_MOE,
             "granitemoeshared": dict(GRANITE_MOE, shared_intermediate_size=48),
             "smollm3": dict(num_hidden_layers=4, pad_token_id=None),
             "seed_oss": dict(head_dim=24, pad_token_id=None),
             "mixtral": dict(num_local_experts=8, num_experts_per_tok=2, intermediate_size=32)}
# GLM-4-0414's kind, shrunk: Q/K/V biases (made random), half of each head rotated in
# interleaved pairs, norms after the attention and the FFN
GLM4 = dict(head_dim=16, pad_token_id=None, attention_bias=True, rope_parameters={
    "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
# Command R's kind with its every part: Q/K/V biases (made random; the output's stays 0, as
# llama.cpp reads none), Command R+'s per-head Q/K norms, the output tied to the embeddings,
# a logit scale; Command R7B's: three sliding layers (a window of 8) and a global one
# without rope. StarCoder2's biases and norm biases are made random, its output untied.
COHERE = dict(attention_bias=True, tie_word_embeddings=True, logit_scale=0.25,
              pad_token_id=None)
PARALLEL_KIN = {"cohere": dict(COHERE, use_qk_norm=True),
                "cohere2": dict(COHERE, head_dim=16, num_hidden_layers=4, sliding_window=8),
                "starcoder2": dict(pad_token_id=None)}
# EXAONE 4.0 32B's kind, shrunk: hybrid attention in 64 layers (the only count llama.cpp
# gives it: windows of 8 on three layers of four, the fourth global and unrotated), Llama
# 3's rope scaling (4x over 16 positions) on the sliding ones, Q/K norms, norms after the
# sublayers
EXAONE4 = dict(num_hidden_layers=64, sliding_window=8, sliding_window_pattern=4,
               pad_token_id=None, rope_parameters={
                   "rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 16})
# EXAONE 4.0 1.2B's kind: no window (so no layer kind), every layer rotated, tied output
EXAONE4_SMALL = dict(num_hidden_layers=4, sliding_window=None,
                     layer_types=["full_attention"] * 4, tie_word_embeddings=True)
# Gemma 4 as its small models are (per-layer embeddings; the last layers share the cache
# of the last cached layer of their kind and have double-wide FFNs; as in the released
# models, and as llama.cpp requires, the last cached layer is full and the one before it
# sliding) and as its mixture-of-experts model is (K = V on full layers, experts beside the
# dense FFN); both with their own head size and KV heads on full layers, proportional RoPE
# on them, a window of 8 elsewhere, soft-capped logits
GEMMA4 = dict(head_dim=16, global_head_dim=32, sliding_window=8, num_hidden_layers=6,
              layer_types=[SLIDING, SLIDING, SLIDING, FULL, SLIDING, FULL],
              final_logit_softcapping=30.0, tie_word_embeddings=True)
GEMMA4_KINDS = {
    "gemma4": dict(GEMMA4, num_kv_shared_layers=2, use_double_wide_mlp=True,
                   hidden_size_per_layer_input=8, num_global_key_value_heads=1),
    "gemma4_moe": dict(GEMMA4, attention_k_eq_v=True, num_global_key_value_heads=1,
                       hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=4,
                       top_k_experts=2, moe_intermediate_size=24)}
# Gemma 4 12B ("unified") as released, shrunk: K = V on full layers with one KV head, no
# per-layer embeddings, no experts, no sharing; a multimodal checkpoint (towers left out)
# whose generation_config.json suppresses a token (<|turn>, SUPPRESSED)
GEMMA4_UNIFIED = dict(GEMMA4, attention_k_eq_v=True, num_global_key_value_heads=1)
SUPPRESSED = {"gemma4_unified": ["<|turn>"]}
# kinds saved as a multimodal model of the text config alone: the composite config's class
COMPOSITE = {"gemma4_unified": "Gemma4UnifiedConfig"}
# DeepSeek's latent attention (a latent rank of 32, 8 rotated and 16 plain key dimensions a
# head, values of 12), a dense first layer, then 8 routed experts (2 a token) and a shared
# one. V2 as V2-Lite is (queries by one matrix, softmax routing unnormalised, YaRN with
# mscale); V3 as V3 and R1 are (queries through a rank, sigmoid routing with a score bias,
# renormalised, 4 groups of which the best 2 compete)
DEEPSEEK = dict(num_hidden_layers=3, num_key_value_heads=4, kv_lora_rank=32, qk_rope_head_dim=8,
                qk_nope_head_dim=16, v_head_dim=12, head_dim=8, first_k_dense_replace=1,
                n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                moe_intermediate_size=32, attn_implementation="eager")
DEEPSEEK_KINDS = {
    "deepseek_v2": dict(q_lora_rank=None, topk_method="greedy", n_group=1, topk_group=1,
                        max_position_embeddings=64,
                        norm_topk_prob=False, routed_scaling_factor=1.5, rope_parameters={
                            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 16, "beta_fast": 32.0,
                            "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}),
    "deepseek_v3": dict(q_lora_rank=24, n_group=4, topk_group=2, norm_topk_prob=True,
                        routed_scaling_factor=2.5),
    # GLM-4.7-Flash: V3's with its dense layers listed, no groups
    "glm4_moe_lite": dict(q_lora_rank=24, n_group=1, topk_group=1, norm_topk_prob=True,
                          routed_scaling_factor=1.8, mlp_layer_types=["dense", "sparse", "sparse"])}
# Gemma 3n as llama.cpp fixes its shape in code (E2B's and E4B's): 20 cached layers (here
# 22 in all, the last two sharing), every fifth layer full, activation sparsity 0.95 on the
# first 10, per-layer inputs of 256, Laurel of rank 64, AltUp of 4; a window of 8
GEMMA3N = dict(head_dim=16, num_hidden_layers=22, intermediate_size=128,
               layer_types=[FULL if (i + 1) % 5 == 0 else SLIDING for i in range(22)],
               activation_sparsity_pattern=[0.95] * 10 + [0.0] * 12, num_kv_shared_layers=2,
               hidden_size_per_layer_input=256, laurel_rank=64, altup_num_inputs=4,
               sliding_window=8, final_logit_softcapping=30.0, tie_word_embeddings=True,
               initializer_range=0.05)
# Qwen 3.5 and Qwen3-Next: layers 0-2 and 4-6 gated DeltaNets (2 key heads, 4 value heads
# of 16: the value heads' order matters), 3 and 7 gated attention; half of each head
# rotated; the MoE ones 8 experts of 32, 2 a token, and a shared expert
QWEN35 = dict(head_dim=16, num_hidden_layers=8, linear_key_head_dim=16,
              linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
              linear_conv_kernel_dim=4)
QWEN35_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
QWEN35_MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                  shared_expert_intermediate_size=32)
QWEN35_KINDS = {
    "qwen3_5": dict(QWEN35, rope_parameters=dict(QWEN35_ROPE, mrope_section=[2, 1, 1])),
    "qwen3_5_moe": dict(QWEN35, **QWEN35_MOE,
                        rope_parameters=dict(QWEN35_ROPE, mrope_section=[2, 1, 1])),
    "qwen3_next": dict(QWEN35, **QWEN35_MOE, rope_parameters=QWEN35_ROPE)}
SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
             rms_norm_eps=1e-5, initializer_range=0.1)
# OLMo 3 7B/32B's: YaRN on the global layers (here 4x over 16 positions), the sliding ones
# rotated unscaled
OLMO3_YARN = dict(max_position_embeddings=64, rope_parameters={
    "full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                       "original_max_position_embeddings": 16},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})


def tokenizer(kind: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    family = kind.removesuffix("_vision")          # with a multimodal model's image tokens
    if family in GEMMA4_KINDS or family == "gemma4_unified":
        return sentence_bpe_tokenizer(kind)

    tok = Tokenizer(models.BPE(ignore_merges=family in ("llama", "llama4")))
    digits = [pre_tokenizers.Digits(individual_digits=True)] if family in DIGITS_FIRST else []
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        *digits, pre_tokenizers.Split(Regex(PATTERN[kind]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL[kind],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus([]) * 2, trainer)
    first, end = SPECIAL[kind][0], SPECIAL[kind][-1]
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=end,
                                   bos_token=first if family in ("llama", "gemma2", "gemma3",
                                                                 "gemma3n",
                                                                 "llama4", "ministral3")
                                   else None)


def sentence_bpe_tokenizer(kind: str):
    """Gemma 4's kind of tokenizer: BPE over characters of text whose spaces are U+2581,
    split at newlines, with <0xNN> tokens for the bytes of characters it lacks."""
    import json

    from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            trainers)
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated")
    tok.train_from_iterator(corpus([]) * 2, trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIAL[kind]))
    trained = json.loads(tok.to_str())["model"]
    vocab = dict(trained["vocab"])
    vocab.update({f"<0x{b:02X}>": len(vocab) + b for b in range(256)})
    full = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) for m in trained["merges"]],
                                byte_fallback=True))
    full.normalizer, full.pre_tokenizer = tok.normalizer, tok.pre_tokenizer
    full.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                      decoders.Fuse()])
    full.add_special_tokens(SPECIAL[kind])
    return PreTrainedTokenizerFast(tokenizer_object=full, bos_token=SPECIAL[kind][0],
                                   eos_token=SPECIAL[kind][-1])


def checkpoint(kind: str, directory: Path, seed: int = 0, **config) -> Path:
    """Save a tiny model of kind (llama, qwen2, qwen3) and its tokenizer in directory."""
    import torch
    import transformers

    tok = tokenizer(kind)
    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
               "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
               "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
               "gemma3n": ("Gemma3nTextConfig", "Gemma3nForCausalLM"),
               "gemma4": ("Gemma4TextConfig", "Gemma4ForCausalLM"),
               "gemma4_moe": ("Gemma4TextConfig", "Gemma4ForCausalLM"),
               "gemma4_unified": ("Gemma4UnifiedTextConfig",
                                  "Gemma4UnifiedForConditionalGeneration"),
               "llama4": ("Llama4TextConfig", "Llama4ForCausalLM"),
               "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
               "qwen3_think": ("Qwen3Config", "Qwen3ForCausalLM"),
               "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
               "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
               "ministral3": ("Ministral3Config", "Ministral3ForCausalLM"),
               "olmo3": ("Olmo3Config", "Olmo3ForCausalLM"),
               "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
               "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
               "glm4_moe_lite": ("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM"),
               "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
               "phi3": ("Phi3Config", "Phi3ForCausalLM"),
               "glm4": ("Glm4Config", "Glm4ForCausalLM"),
               "granite": ("GraniteConfig", "GraniteForCausalLM"),
               "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM"),
               "granitemoeshared": ("GraniteMoeSharedConfig", "GraniteMoeSharedForCausalLM"),
               "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM"),
               "seed_oss": ("SeedOssConfig", "SeedOssForCausalLM"),
               "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
               "cohere": ("CohereConfig", "CohereForCausalLM"),
               "cohere2": ("Cohere2Config", "Cohere2ForCausalLM"),
               "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM"),
               "exaone4": ("Exaone4Config", "Exaone4ForCausalLM"),
               "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM"),
               "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM"),
               "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM")}
    config_class, model_class = (getattr(transformers, n) for n in classes[kind])
    settings = dict(SHAPE, vocab_size=len(tok), tie_word_embeddings=False,
                    eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    if kind in ("qwen3", "qwen3_think"):       # qwen3_think: <think> tags as tokens
        settings["head_dim"] = 16
    if kind == "qwen3_moe":       # 8 experts, 2 a token, renormalised as the released ones
        settings.update(head_dim=16, num_experts=8, num_experts_per_tok=2,
                        moe_intermediate_size=32, norm_topk_prob=True)
    if kind == "gemma3":          # six layers: five sliding (a window of 8), one global
        settings.update(head_dim=16, query_pre_attn_scalar=16, num_hidden_layers=6,
                        sliding_window=8, tie_word_embeddings=True)
    if kind == "ministral3":      # YaRN 4x over 16 positions, whose temperature steps every
        settings.update(head_dim=16, rope_parameters={                        # 16 positions
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
            "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1})
    if kind == "olmo3":           # four layers, the first three sliding (a window of 8)
        settings.update(num_hidden_layers=4, sliding_window=8)
    if kind == "gemma2":          # four layers, the even ones sliding (a window of 8); caps
        settings.update(head_dim=16, query_pre_attn_scalar=16, num_hidden_layers=4,  # that bite
                        sliding_window=8, tie_word_embeddings=True,
                        attn_logit_softcapping=0.5, final_logit_softcapping=2.0,
                        attn_implementation="eager")
    if kind == "llama4":          # 4 layers: dense, MoE, dense, MoE (no RoPE); chunks of 8
        settings.update(head_dim=16, num_hidden_layers=4, intermediate_size=64,
                        intermediate_size_mlp=128, num_local_experts=4,
                        num_experts_per_tok=1, interleave_moe_layer_step=2,
                        attention_chunk_size=8, floor_scale=4, attn_scale=0.1)
    if kind in GEMMA4_KINDS:
        settings.update(GEMMA4_KINDS[kind], vocab_size_per_layer_input=len(tok))
    if kind == "gemma4_unified":
        settings.update(GEMMA4_UNIFIED)
    if kind in DEEPSEEK_KINDS:
        settings.update(DEEPSEEK, **DEEPSEEK_KINDS[kind])
    if kind == "gemma3n":
        settings.update(GEMMA3N, vocab_size_per_layer_input=len(tok))
    if kind == "gpt_oss":         # 4 layers, the even ones sliding (a window of 8); 4 experts
        settings.update(GPT_OSS)  # of 32, 2 a token; YaRN 4x over 16 positions
    if kind in QWEN35_KINDS:
        settings.update(QWEN35_KINDS[kind])
    if kind == "phi3":
        settings.update(PHI3)
    if kind == "exaone4":
        settings.update(EXAONE4)
    if kind == "glm4":
        settings.update(GLM4)
    settings.update(LLAMA_KIN.get(kind, {}))
    settings.update(PARALLEL_KIN.get(kind, {}))
    settings.update(config)
    torch.manual_seed(seed)
    made = config_class(**settings)
    if kind in COMPOSITE:
        made = getattr(transformers, COMPOSITE[kind])(text_config=made.to_dict(),
                                                      vision_config=None, audio_config=None)
    model = model_class(made).eval()
    if kind in SUPPRESSED:
        model.generation_config.suppress_tokens = tok.convert_tokens_to_ids(SUPPRESSED[kind])
    if kind in COMPOSITE:
        _vary_unit_weights(model, kind)
    if kind in GEMMA4_KINDS or kind in DEEPSEEK_KINDS or kind in QWEN35_KINDS or \
            kind in ("gemma3n", "gpt_oss", "phi3", "glm4", "exaone4"):
        _vary_unit_weights(model, kind)
    if kind in LLAMA_KIN or kind in PARALLEL_KIN:
        _vary_unit_weights(model, kind)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    if kind == "gemma3n":
        _unused_shared_kv(directory, settings)
    return directory


def _unused_shared_kv(directory: Path, settings: dict) -> None:
    """The released Gemma 3n checkpoints carry K and V projections (and K norms) for the
    layers that share another's cache, unused; llama.cpp's loader requires them, so the
    tiny checkpoint carries random ones too (transformers leaves them out)."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    (weights_file,) = directory.glob("*.safetensors")
    tensors = load_file(weights_file)
    rng = np.random.default_rng(0)
    kv = settings["num_key_value_heads"] * settings["head_dim"]
    layers = settings["num_hidden_layers"]
    for i in range(layers - settings["num_kv_shared_layers"], layers):
        p = f"model.layers.{i}.self_attn."
        tensors[p + "k_proj.weight"] = rng.standard_normal((kv, settings["hidden_size"]),
                                                           dtype=np.float32)
        tensors[p + "v_proj.weight"] = rng.standard_normal((kv, settings["hidden_size"]),
                                                           dtype=np.float32)
        tensors[p + "k_norm.weight"] = np.ones(settings["head_dim"], np.float32)
    save_file(tensors, weights_file, metadata={"format": "pt"})


# the kinds whose biases are made random (transformers starts them at 0, which a model that
# ignored them would match)
RANDOM_BIASES = {"gpt_oss", "granite", "granitemoe", "granitemoeshared", "seed_oss", "glm4",
                 "cohere", "cohere2", "starcoder2"}
# the biases a kind has that llama.cpp does not read: left at 0 (the converter drops them)
UNREAD_BIASES = {"cohere": ("o_proj.bias",), "cohere2": ("o_proj.bias",)}


def _vary_unit_weights(model, kind: str = "") -> None:
    """Norm weights and scales start at one; make them differ so that a model which
    ignored one would not match."""
    import torch

    with torch.no_grad():
        for name, value in [*model.named_parameters(), *model.named_buffers()]:
            if value.dtype.is_floating_point and name.endswith(("norm.weight", "scale",
                                                                "scalar")):
                value.copy_(1 + 0.3 * torch.randn_like(value))
            if name.endswith("e_score_correction_bias"):        # DeepSeek V3's router bias
                value.copy_(0.05 * torch.randn_like(value))
            unread = name.endswith(UNREAD_BIASES.get(kind, ()))
            if name.endswith("sinks") or (kind in RANDOM_BIASES and name.endswith("bias")
                                          and not unread):
                value.copy_(0.5 * torch.randn_like(value))      # gpt-oss's: not initialised


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


def bert_checkpoint(directory: Path, pooling: str = "mean", seed: int = 0,
                    positions: int = 128) -> Path:
    """A tiny BERT (of positions positions) with a WordPiece vocabulary trained on the
    corpus and a sentence-transformers pooling module."""
    import torch
    from transformers import BertConfig, BertModel

    vocab = wordpiece_tokenizer(directory)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128,
                        max_position_embeddings=positions, initializer_range=0.1)
    BertModel(config, add_pooling_layer=True).eval().save_pretrained(directory)
    pooling_modules(directory, pooling, 64)
    return directory


def wordpiece_tokenizer(directory: Path) -> int:
    """A BERT WordPiece tokenizer trained on the corpus, saved in directory (vocab.txt
    too); its vocabulary's size."""
    from tokenizers import (Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    from transformers import BertTokenizerFast

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
    return len(vocab)


def pooling_modules(directory: Path, pooling: str, width: int) -> None:
    """sentence-transformers' modules.json and Pooling config (mean or cls)."""
    import json

    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"}]))
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": width, "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean"}))
