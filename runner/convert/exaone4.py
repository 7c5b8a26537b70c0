"""EXAONE 4.0 checkpoints (Exaone4ForCausalLM) as llama.cpp's converter writes them: the
common keys (Llama 3's rope scaling as rope_freqs), and where config.json sets a sliding
window, the window and the sliding layers, one bool a layer (from layer_types, else from
sliding_window_pattern: "LLLG" or every n-th layer global). Nothing is permuted (NEOX).

llama.cpp's exaone4 decides hybrid attention by the layer count alone (64 layers: windows
on the sliding layers, rope on those only; any other count: neither), where transformers
follows sliding_window (set: windows on the sliding layers, rope on those only; null: rope
on all). A checkpoint the two would run apart is refused: 64 layers without a window, or
another count with one."""

from __future__ import annotations

import gguf

from ..models.exaone4 import SWA_LAYERS
from .checkpoint import CheckpointError
from .hyper import Hyper

SLIDING = "sliding_attention"


def sliding_pattern(config: dict, layers: int) -> list[bool] | None:
    """Which layers slide, as llama.cpp's converter reads config.json (None: it says not)."""
    if "layer_types" in config:
        return [kind == SLIDING for kind in config["layer_types"]]
    pattern = config.get("sliding_window_pattern")
    if isinstance(pattern, str) and pattern:
        return [pattern[i % len(pattern)] == "L" for i in range(layers)]
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        return [(i + 1) % pattern != 0 for i in range(layers)]
    return None


def exaone4_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    if h.heads * h.head_dim != h.embd:
        raise CheckpointError(f"This EXAONE 4.0's {h.heads} heads of {h.head_dim} do not make "
                              f"up its hidden_size ({h.embd}); llama.cpp's exaone4 sizes its "
                              "output projection by hidden_size.")
    window = config.get("sliding_window")
    if h.layers == SWA_LAYERS and window is None:
        raise CheckpointError(f"This EXAONE 4.0 has {SWA_LAYERS} layers and no sliding window; "
                              f"llama.cpp's exaone4 gives every {SWA_LAYERS}-layer model "
                              "windows (and leaves its global layers unrotated), unlike "
                              "transformers, so it is not supported.")
    if h.layers != SWA_LAYERS and window is not None:
        raise CheckpointError(f"This EXAONE 4.0 has a sliding window of {window} in "
                              f"{h.layers} layers; llama.cpp's exaone4 slides windows (and "
                              f"leaves global layers unrotated) in {SWA_LAYERS}-layer models "
                              "only, so it would run this one unlike transformers: not "
                              "supported.")
    if window is None:
        return
    writer.add_sliding_window(int(window))
    pattern = sliding_pattern(config, h.layers)
    if pattern is not None:
        if len(pattern) != h.layers:
            raise CheckpointError(f"This EXAONE 4.0's layer_types names {len(pattern)} layers, "
                                  f"not its {h.layers}.")
        writer.add_sliding_window_pattern(pattern)
