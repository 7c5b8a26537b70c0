"""A projector's memory is part of a model's: its weights with the output layer's, each
encoder's compute memory in the graph's; measured before loading exactly as it is
allocated, so fit and num_gpu=-1 see it."""

from __future__ import annotations

import runner

from tests.support.footprint import measured


def test_the_projector_is_measured_as_it_is_allocated(vision_models):
    paths = vision_models("gemma4")
    with_projector, text_only = measured(paths, True), measured(paths, False)
    cpu = "CPU"
    assert with_projector.weights[cpu][-1] > text_only.weights[cpu][-1]
    assert with_projector.graph[cpu] > text_only.graph[cpu]
    assert with_projector.mapped > text_only.mapped
    model = runner.load(paths["model"], projector=paths["mmproj"], num_ctx=256, threads=2)
    try:
        assert model.footprint() == with_projector
    finally:
        model.close()
