"""Fuzz targets (see tests/support/fuzzing.py): each defines one_input(data: bytes)."""
