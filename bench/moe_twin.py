"""A Qwen3 MoE with random weights at a scaled-down real shape (64 experts, 8 a token, as
Qwen3-30B-A3B routes; 8 layers of width 1024), converted and quantized here, for measuring
expert decode side by side with llama.cpp where the real 30B file cannot go:

    python bench/moe_twin.py OUT_DIR [--type Q4_K_M]
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

SHAPE = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_experts=64,
             num_experts_per_tok=8, moe_intermediate_size=384, initializer_range=0.02,
             max_position_embeddings=4096)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--type", default="Q4_K_M")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    hf = checkpoint("qwen3_moe", args.out / "hf", **SHAPE)
    f16 = convert(hf, args.out / "qwen3moe-twin-f16.gguf", "f16")
    print(quantize_file(f16, args.out / f"qwen3moe-twin-{args.type}.gguf", args.type))


if __name__ == "__main__":
    main()
