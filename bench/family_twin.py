"""Models of the families added since the real files were benchmarked, with random weights at
scaled-down real shapes, converted and quantized here, for measuring them side by side with
llama.cpp where the real files cannot go:

- qwen3moe: 64 experts, 8 a token, as Qwen3-30B-A3B routes; 8 layers of width 1024
- deepseek2: DeepSeek V2-Lite's latent attention of rank 512 with heads of 128 + 64, 64
  experts of 352, 6 a token, 2 shared, a dense first layer; 8 layers of width 1024
- gemma3n: Gemma 3n E2B's heads, FFN, AltUp, Laurel and per-layer inputs; 22 layers (the
  fewest llama.cpp's fixed shape allows) of width 1024
- gemma2, olmo2, olmo3, mistral3: Gemma 2 2B's, OLMo 2 1B's, OLMo 3 7B's and Ministral 3
  3B's heads, FFN widths, windows and caps, 8 layers of width 1024 (2304 for Gemma 2)
- gpt-oss: gpt-oss-20b's heads (64 of 64, 8 KV), sinks, window of 128, 32 experts of 1024
  (4 a token), 8 layers of width 1024 (its experts in Q4_K_M here, not MXFP4)
- phi3: Phi-4-mini's heads (24 of 128, 8 KV, three quarters rotated), FFN 8192 (gate and up
  fused), LongRoPE over an original context of 4096 (its long factors, short ones of 1: a
  context up to 4096 rotates by those); 8 layers of width 3072
- granite: Granite 3.3 2B's heads (32 of 64, 8 KV), FFN 8192 and multipliers (embedding 12,
  residual 0.22, attention 1/64, logits 1/8); 8 layers of width 2048
- cohere2: Command R7B's heads (32 of 128, 8 KV), FFN 14336, window of 4096 on three layers
  of four (the fourth unrotated), logit scale 0.25; 8 layers of width 4096
- qwen35: Qwen3.5-0.8B's shape (24 layers of width 1024: 18 gated DeltaNets of 16 heads of
  128, 6 gated attention layers of 8 heads of 256 over 2 KV heads, FFN 3584), with its
  family's chat template (for bench/hybrid_turns.py)
- nomic-moe, embeddinggemma: nomic-embed-text-v2-moe and EmbeddingGemma 300M at their real
  shapes (embedding models; measure them with bench/embed.py)

    python bench/family_twin.py OUT_DIR [--family NAME] [--type Q4_K_M]
    python bench/generate.py --model OUT_DIR/qwen3moe-twin-Q4_K_M.gguf
    python bench/embed.py --model OUT_DIR/nomic-moe-twin-Q4_K_M.gguf

The tokenizers are the tests' tiny ones: speed depends on the shapes, not on them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])     # bench/profile.py is not stdlib's

from runner.convert import convert  # noqa: E402
from runner.convert.quantize import quantize_file  # noqa: E402
from tests.support.hf_embedding import (  # noqa: E402
    NOMIC_MOE_CONFIG, embedding_gemma_checkpoint, nomic_checkpoint)
from tests.support.hf_tiny import checkpoint  # noqa: E402
from tests.support.official_templates import official_template  # noqa: E402

# Phi-4-mini-instruct's LongRoPE factors (its config.json), one per rotated pair of 96 dims
PHI4_MINI_LONG = [1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897,
                  1.956131817, 2.187582649, 2.446418898, 2.735880826, 3.059592084,
                  3.421605075, 3.826451687, 4.279200023, 4.785517845, 5.351743533,
                  5.984965424, 6.693110555, 7.485043894, 8.370679318, 9.36110372,
                  10.4687158, 11.70738129, 13.09260651, 14.64173252, 16.37415215,
                  18.31155283, 20.47818807, 22.90118105, 25.61086418, 28.64115884,
                  32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7,
                  32.71, 32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77]
COMMON = dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
              initializer_range=0.02, max_position_embeddings=4096)
# family: (tiny checkpoint kind, shape)
FAMILIES = {
    "qwen3moe": ("qwen3_moe", dict(COMMON, intermediate_size=3072, num_key_value_heads=4,
                                   head_dim=64, num_experts=64, num_experts_per_tok=8,
                                   moe_intermediate_size=384)),
    "deepseek2": ("deepseek_v2", dict(COMMON, intermediate_size=2816, num_key_value_heads=16,
                                      kv_lora_rank=512, qk_nope_head_dim=128,
                                      qk_rope_head_dim=64, v_head_dim=128, head_dim=64,
                                      n_routed_experts=64, num_experts_per_tok=6,
                                      n_shared_experts=2, moe_intermediate_size=352,
                                      rope_parameters={"rope_type": "default",
                                                       "rope_theta": 10000.0})),
    "gemma3n": ("gemma3n", dict(COMMON, num_hidden_layers=22, num_attention_heads=8,
                                num_key_value_heads=2, head_dim=256, intermediate_size=8192,
                                sliding_window=512)),
    "gemma2": ("gemma2", dict(COMMON, hidden_size=2304, num_attention_heads=8,
                              num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256,
                              intermediate_size=9216, sliding_window=4096,
                              attn_logit_softcapping=50.0, final_logit_softcapping=30.0)),
    "olmo2": ("olmo2", dict(COMMON, num_key_value_heads=16, intermediate_size=8192)),
    "olmo3": ("olmo3", dict(COMMON, num_key_value_heads=16, intermediate_size=11008,
                            sliding_window=4096)),
    "mistral3": ("ministral3", dict(COMMON, num_attention_heads=32, num_key_value_heads=8,
                                    head_dim=128, intermediate_size=9216)),
    "gpt-oss": ("gpt_oss", dict(COMMON, num_attention_heads=64, num_key_value_heads=8,
                                head_dim=64, intermediate_size=1024, num_local_experts=32,
                                num_experts_per_tok=4, sliding_window=128,
                                max_position_embeddings=4096)),
    "phi3": ("phi3", dict(COMMON, hidden_size=3072, num_attention_heads=24,
                          num_key_value_heads=8, intermediate_size=8192,
                          tie_word_embeddings=True, sliding_window=262144,
                          max_position_embeddings=131072, original_max_position_embeddings=4096,
                          rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                           "partial_rotary_factor": 0.75,
                                           "original_max_position_embeddings": 4096,
                                           "long_factor": PHI4_MINI_LONG,
                                           "short_factor": [1.0] * 48})),
    "granite": ("granite", dict(COMMON, hidden_size=2048, num_attention_heads=32,
                                num_key_value_heads=8, intermediate_size=8192,
                                embedding_multiplier=12.0, residual_multiplier=0.22,
                                attention_multiplier=0.015625, logits_scaling=8.0,
                                attention_bias=False, mlp_bias=False, tie_word_embeddings=True,
                                rope_parameters={"rope_type": "default", "rope_theta": 1e7})),
    "cohere2": ("cohere2", dict(COMMON, hidden_size=4096, num_attention_heads=32,
                                num_key_value_heads=8, head_dim=128, intermediate_size=14336,
                                sliding_window=4096, logit_scale=0.25, attention_bias=False,
                                max_position_embeddings=8192,
                                rope_parameters={"rope_type": "default", "rope_theta": 50000.0})),
    "qwen35": ("qwen3_5", dict(COMMON, num_hidden_layers=24, intermediate_size=3584,
                               num_attention_heads=8, num_key_value_heads=2, head_dim=256,
                               linear_key_head_dim=128, linear_value_head_dim=128,
                               linear_num_key_heads=16, linear_num_value_heads=16,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                                "partial_rotary_factor": 0.25,
                                                "mrope_section": [11, 11, 10]})),
}
# checkpoint folders named otherwise than hf-FAMILY (a file's general.name is its folder's):
# llama.cpp gives a file whose name holds phi3 or phi-3 Phi-3's token attributes, looking up
# a </s> the tiny vocabulary lacks, and refuses it; the released Phi-4-mini's name has neither
FOLDERS = {"phi3": "hf-phi-4-mini"}
# chat templates (llama.cpp's copies, from the pinned archive) the twins' files carry
TEMPLATES = {"qwen35": "Qwen3.5-4B.jinja"}
# embedding models at their real shapes: family -> checkpoint builder
EMBEDDERS = {
    "nomic-moe": lambda d: nomic_checkpoint(d, **dict(
        NOMIC_MOE_CONFIG, n_embd=768, n_head=12, n_layer=12, n_inner=3072, num_experts=8)),
    "embeddinggemma": lambda d: embedding_gemma_checkpoint(
        d, dense={"2_Dense": (768, 3072), "3_Dense": (3072, 768)}, hidden_size=768,
        intermediate_size=1152, num_hidden_layers=24, num_attention_heads=3,
        num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256, sliding_window=512,
        max_position_embeddings=2048),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--family", choices=[*FAMILIES, *EMBEDDERS], default="qwen3moe")
    parser.add_argument("--type", default="Q4_K_M")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    directory = args.out / FOLDERS.get(args.family, f"hf-{args.family}")
    if args.family in EMBEDDERS:
        directory.mkdir(parents=True, exist_ok=True)
        hf = EMBEDDERS[args.family](directory)
    else:
        kind, shape = FAMILIES[args.family]
        hf = checkpoint(kind, directory, **shape)
        if args.family in TEMPLATES:
            config = hf / "tokenizer_config.json"
            settings = json.loads(config.read_text())
            settings["chat_template"] = official_template(TEMPLATES[args.family])
            config.write_text(json.dumps(settings))
    f16 = convert(hf, args.out / f"{args.family}-twin-f16.gguf", "f16")
    print(quantize_file(f16, args.out / f"{args.family}-twin-{args.type}.gguf", args.type))


if __name__ == "__main__":
    main()
