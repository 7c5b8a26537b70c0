"""The engine: requests in cache slots, advanced together by one batch loop thread."""

from .loop import Engine
from .request import Request
from .slots import InputCache, Slot

__all__ = ["Engine", "InputCache", "Request", "Slot"]
