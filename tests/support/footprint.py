"""A multimodal model's footprint as measured before loading, with its projector or without."""

from __future__ import annotations

from runner.api import LoadOptions, footprint_of
from runner.loading.loader import open_model


def measured(paths, projector):
    opened = open_model(paths["model"], projector=paths["mmproj"] if projector else None)
    try:
        return footprint_of(opened, LoadOptions(num_ctx=256, threads=2))
    finally:
        opened.close()
