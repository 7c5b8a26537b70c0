"""The GGUF header reader against malformed files: every fault a GGUFFormatError with a
sentence (a ValueError), never a ZeroDivisionError, a RecursionError or a description of
tensors that ggml cannot hold or whose data overlaps another's."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from pyggml.gguf_reader import GGUFFormatError, Header

from tests.support.gguf_edit import retensor


def write(path, extra=None):
    """Three F32 tensors and a Q8_0 one, with extra {key: (type, value)}."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, (kind, value) in (extra or {}).items():
        writer.add_key_value(key, value, kind)
    writer.add_tensor("a.weight", np.ones((4, 8), np.float32))
    writer.add_tensor("b.weight", np.ones((2, 16), np.float32))
    writer.add_tensor("c.weight", np.ones(8, np.float32))
    quantized = gguf.quants.quantize(np.ones((2, 32), np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q.weight", quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def good(tmp_path):
    return write(tmp_path / "good.gguf")


def offsets(path) -> dict:
    """Each tensor's offset as its description gives it (from the data's start)."""
    header = Header(path)
    start = min(t.offset for t in header.tensors)
    return {t.name: t.offset - start for t in header.tensors}


def test_the_written_file_reads(good):
    assert [t.name for t in Header(good).tensors] == ["a.weight", "b.weight", "c.weight",
                                                      "q.weight"]


@pytest.mark.parametrize("kind,value", [
    (gguf.GGUFValueType.UINT32, 0), (gguf.GGUFValueType.UINT32, 48),
    (gguf.GGUFValueType.INT32, -32), (gguf.GGUFValueType.STRING, "32"),
    (gguf.GGUFValueType.FLOAT32, 32.0)])
def test_an_alignment_that_is_no_power_of_two_is_refused(tmp_path, kind, value):
    path = write(tmp_path / "aligned.gguf", {"general.alignment": (kind, value)})
    with pytest.raises(GGUFFormatError, match=r"general.alignment is .*, not a power of two"):
        Header(path)


def test_a_tensor_off_the_alignment_is_refused(good, tmp_path):
    moved = retensor(good, tmp_path / "moved.gguf", "c.weight",
                     offset=offsets(good)["c.weight"] + 4)
    with pytest.raises(GGUFFormatError, match="c.weight starts at offset .*, not a multiple "
                                              "of the file's alignment"):
        Header(moved)


@pytest.mark.parametrize("shift", [0, 32, 160])
def test_tensors_whose_data_overlap_are_refused(good, tmp_path, shift):
    """The same offset as a's (shared), or inside a's 128 bytes, or inside b's."""
    moved = retensor(good, tmp_path / "shared.gguf", "c.weight",
                     offset=offsets(good)["a.weight"] + shift)
    with pytest.raises(GGUFFormatError, match="the data of tensors .* overlap"):
        Header(moved)


def test_a_tensor_past_the_end_is_refused(good, tmp_path):
    moved = retensor(good, tmp_path / "far.gguf", "c.weight", offset=2**63)
    with pytest.raises(GGUFFormatError, match="truncated: tensor c.weight ends at byte"):
        Header(moved)


def test_a_shape_larger_than_ggml_holds_is_refused(good, tmp_path):
    """An empty dimension makes the byte count 0, whatever the other says."""
    huge = retensor(good, tmp_path / "huge.gguf", "b.weight", ne=(0, 2**64 - 1))
    with pytest.raises(GGUFFormatError, match="b.weight has shape .*larger than ggml can"):
        Header(huge)


@pytest.mark.parametrize("n_dims", [0, 5])
def test_a_dimension_count_ggml_has_not_is_refused(good, tmp_path, n_dims):
    odd = retensor(good, tmp_path / "dims.gguf", "a.weight", n_dims=n_dims)
    with pytest.raises(GGUFFormatError, match=f"a.weight has {n_dims} dimensions"):
        Header(odd)


def test_rows_that_are_no_whole_blocks_are_refused(good, tmp_path):
    cut = retensor(good, tmp_path / "cut.gguf", "q.weight", ne=(33,))
    with pytest.raises(GGUFFormatError, match="rows of 33 values, not a whole number of its "
                                              "type's blocks of 32"):
        Header(cut)


def test_arrays_nested_without_end_are_refused(tmp_path):
    """An array of arrays 100,000 deep (it took the reader's stack)."""
    depth = 100_000
    key = b"deep"
    body = struct.pack("<IIQQ", gguf.GGUF_MAGIC, 3, 0, 1) + struct.pack("<Q", len(key)) + key
    body += struct.pack("<I", gguf.GGUFValueType.ARRAY)
    body += struct.pack("<IQ", gguf.GGUFValueType.ARRAY, 1) * depth
    body += struct.pack("<IQ", gguf.GGUFValueType.UINT8, 0)
    path = tmp_path / "deep.gguf"
    path.write_bytes(body)
    with pytest.raises(GGUFFormatError, match="nests arrays more than 8 deep"):
        Header(path)
