"""KV caches (see causal.py), and the hybrid cache of models with recurrent layers
(hybrid.py)."""

from .causal import CACHE_TYPES, CacheFullError, CausalCache, LayerShape
from .hybrid import HybridCache, StateShape


def new_cache(layers: list[LayerShape], cells: int, backends, cache_type: str = "f16",
              flash: bool = False, allocate: bool = True, window_cells=None,
              sequences: int = 1, checkpoints: int | None = None) -> CausalCache:
    """The cache layers need: a HybridCache where one of them is recurrent (its states
    for sequences, checkpoints each: None, the default for its size), else a CausalCache."""
    if any(s.state is not None for s in layers):
        return HybridCache(layers, cells, backends, cache_type, flash, allocate, window_cells,
                           sequences, checkpoints)
    return CausalCache(layers, cells, backends, cache_type, flash, allocate, window_cells)


__all__ = ["CACHE_TYPES", "CacheFullError", "CausalCache", "HybridCache", "LayerShape",
           "StateShape", "new_cache"]
