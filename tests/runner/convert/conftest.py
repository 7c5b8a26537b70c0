"""Tiny checkpoints, made once per module and converted on demand."""

from __future__ import annotations

import pytest

from runner.convert import convert

from tests.support.hf_tiny import checkpoint


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """made(kind, outtype) -> {"hf": checkpoint dir, outtype: converted GGUF path}."""
    cache = {}

    def get(kind, outtype="f32"):
        if kind not in cache:
            directory = tmp_path_factory.mktemp(kind)
            cache[kind] = {"hf": checkpoint(kind, directory / "hf")}
        if outtype not in cache[kind]:
            cache[kind][outtype] = convert(cache[kind]["hf"], cache[kind]["hf"].parent /
                                           f"{outtype}.gguf", outtype, progress=False)
        return cache[kind]

    return get
