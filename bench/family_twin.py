"""Models of the families added since the real files were benchmarked, with random weights at
scaled-down real shapes, converted and quantized here, for measuring them side by side with
llama.cpp where the real files cannot go: a Qwen3 MoE (64 experts, 8 a token, as
Qwen3-30B-A3B routes; 8 layers of width 1024), a DeepSeek V2-Lite (latent attention of rank
512 with heads of 128 + 64, 64 experts of 352, 6 a token, 2 shared, a dense first layer; 8
layers of width 1024) and a Gemma 3n E2B (its heads, FFN, AltUp, Laurel and per-layer
inputs; 22 layers, the fewest llama.cpp's fixed shape allows, of width 1024):

    python bench/family_twin.py OUT_DIR [--family qwen3moe|deepseek2|gemma3n] [--type Q4_K_M]
    python bench/generate.py --model OUT_DIR/qwen3moe-twin-Q4_K_M.gguf

The tokenizer is the tests' tiny one (600 tokens): speed depends on the shapes, not on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])     # bench/profile.py is not stdlib's

from runner.convert import convert  # noqa: E402
from runner.convert.quantize import quantize_file  # noqa: E402
from tests.runner.convert.hf_tiny import checkpoint  # noqa: E402

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
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--family", choices=list(FAMILIES), default="qwen3moe")
    parser.add_argument("--type", default="Q4_K_M")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kind, shape = FAMILIES[args.family]
    hf = checkpoint(kind, args.out / f"hf-{args.family}", **shape)
    f16 = convert(hf, args.out / f"{args.family}-twin-f16.gguf", "f16")
    print(quantize_file(f16, args.out / f"{args.family}-twin-{args.type}.gguf", args.type))


if __name__ == "__main__":
    main()
