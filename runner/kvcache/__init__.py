"""KV caches (see causal.py)."""

from .causal import CACHE_TYPES, CacheFullError, CausalCache, LayerShape

__all__ = ["CACHE_TYPES", "CacheFullError", "CausalCache", "LayerShape"]
