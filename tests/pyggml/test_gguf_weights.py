"""GGUF loading: metadata through gguf, tensors mapped (CPU) or copied, bad files refused."""

import gguf
import numpy as np
import pytest

import pyggml


@pytest.fixture
def model_file(tmp_path, rng):
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_array("test.list", [1, 2, 3])
    tensors = {
        "token_embd.weight": rng.standard_normal((10, 64)).astype(np.float32),
        "blk.0.attn_q.weight": rng.standard_normal((32, 64)).astype(np.float16),
        "blk.0.ffn_norm.weight": rng.standard_normal(64).astype(np.float32),
        "positions": np.arange(6, dtype=np.int32).reshape(2, 3),
    }
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    q8 = rng.standard_normal((4, 64)).astype(np.float32)
    raw = pyggml.quantize(q8, "Q8_0")
    writer.add_tensor("blk.0.ffn_down.weight", raw,
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    expected = dict(tensors)
    expected["blk.0.ffn_down.weight"] = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0)
    return path, expected


def test_metadata_and_descriptions(model_file):
    path, expected = model_file
    f = pyggml.GGUFFile(path)
    meta = f.metadata
    assert meta["general.architecture"] == "llama"
    assert meta["llama.block_count"] == 2
    assert meta["tokenizer.ggml.model"] == "gpt2"
    assert meta["test.list"] == [1, 2, 3]
    assert f.tensor_shape("blk.0.attn_q.weight") == (32, 64)
    assert f.tensor_type("blk.0.ffn_down.weight") == pyggml.GGMLType.Q8_0


@pytest.mark.parametrize("use_mmap", [True, False])
def test_load_gives_the_written_values(model_file, use_mmap):
    path, expected = model_file
    seen = []
    with pyggml.GGUFFile(path) as f:
        tensors = f.load(pyggml.cpu_backend(threads=1), progress=lambda d, t: seen.append((d, t)),
                         use_mmap=use_mmap)
        assert set(tensors) == set(expected)
        for name, array in expected.items():
            np.testing.assert_allclose(tensors[name].numpy(), array, rtol=1e-6)
            assert tensors[name].name == name
        assert seen[-1][0] == seen[-1][1] > 0
        mapped = f.data
        start = mapped.ctypes.data
        address = int(pyggml._ggml.ffi.cast("uintptr_t", tensors["token_embd.weight"].ptr.data))
        assert (start <= address < start + mapped.nbytes) == use_mmap


def test_loaded_weights_compute(model_file, sched):
    path, expected = model_file
    with pyggml.GGUFFile(path) as f, pyggml.Context() as ctx:
        weights = f.load()
        ids = ctx.new_tensor("I32", (3,)).set_input()
        x = weights["token_embd.weight"].get_rows(ids)
        y = weights["blk.0.attn_q.weight"].mul_mat(x).set_output()
        sched.compute(ctx.graph(y), {ids: np.array([1, 5, 9], np.int32)})
        reference = expected["token_embd.weight"][[1, 5, 9]] @ \
            expected["blk.0.attn_q.weight"].astype(np.float32).T
        np.testing.assert_allclose(y.numpy(), reference, rtol=2e-3, atol=2e-2)


def test_tensors_are_described_first_then_placed_by_buffer_type(model_file):
    path, expected = model_file
    cpu = pyggml.cpu_backend(threads=1).device
    with pyggml.GGUFFile(path) as f:
        tensors = f.tensors(aliases={"output.weight": "token_embd.weight"})
        assert all(t.ptr.data == pyggml._ggml.ffi.NULL for t in tensors.values())
        assert tensors["output.weight"].shape == (10, 64)
        chosen = []
        # blk.* copied into an allocated buffer (mmap off for them), the rest mapped
        f.place({n: t for n, t in tensors.items() if n.startswith("blk.")},
                lambda name: chosen.append(name) or cpu.buffer_type(), use_mmap=False)
        f.place({n: t for n, t in tensors.items() if not n.startswith("blk.")},
                lambda name: cpu.buffer_type())
        assert sorted(chosen) == sorted(n for n in tensors if n.startswith("blk."))
        start, size = f.data.ctypes.data, f.data.nbytes
        for name, tensor in tensors.items():
            address = int(pyggml._ggml.ffi.cast("uintptr_t", tensor.ptr.data))
            assert (start <= address < start + size) != name.startswith("blk."), name
            np.testing.assert_allclose(tensor.numpy(), expected.get(name, expected[
                "token_embd.weight"]), rtol=1e-6)


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a model" * 100)
    with pytest.raises(ValueError, match="not a GGUF file"):
        pyggml.GGUFFile(bad)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        pyggml.GGUFFile(empty)
    with pytest.raises(FileNotFoundError, match="No GGUF file"):
        pyggml.GGUFFile(tmp_path / "missing.gguf")


def test_truncated_file(model_file, tmp_path):
    path, _ = model_file
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(ValueError, match="truncated"):
        pyggml.GGUFFile(cut)
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        pyggml.GGUFFile(header_only)


def test_header_agrees_with_the_gguf_package_reader(model_file):
    path, _ = model_file
    ours = pyggml.GGUFFile(path)
    reader = gguf.GGUFReader(path)
    theirs = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert ours.metadata == theirs
    assert [(t.name, t.type, t.ne, t.offset, t.n_bytes) for t in ours.header.tensors] == [
        (t.name, int(t.tensor_type), tuple(int(n) for n in t.shape), t.data_offset, t.n_bytes)
        for t in reader.tensors]


def test_repacked_weights_multiply_like_the_plain_ones(tmp_path, sched, rng, monkeypatch):
    # chunks smaller than the tensor: repacking must still get the whole tensor at once
    monkeypatch.setattr(pyggml.gguf_weights, "CHUNK_BYTES", 1024)
    cpu = pyggml.cpu_backend(threads=1)
    weights = rng.standard_normal((64, 256)).astype(np.float32)
    raw = pyggml.quantize(weights, "Q4_0")
    with pyggml.Context(max_tensors=1) as ctx:
        if pyggml.gguf_weights.repacked_layout(cpu.device, ctx.new_tensor("Q4_0", (64, 256))) \
                is None:         # ggml repacks Q4_0 with AVX2, AVX-512, NEON or RVV kernels
            pytest.skip("this CPU has no repacked layout for Q4_0")
    path = tmp_path / "q.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("w.weight", raw, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    writer.add_tensor("norm.weight", np.ones(256, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    x = rng.standard_normal((4, 256)).astype(np.float32)
    results = {}
    for repack in (False, True):
        with pyggml.GGUFFile(path) as f, pyggml.Context() as ctx:
            tensors = f.load(cpu, repack=(lambda name: True) if repack else None,
                             aliases={"copy.weight": "w.weight"})
            buffer = pyggml._ggml.ffi.string(pyggml._ggml.lib.ggml_backend_buffer_name(
                tensors["w.weight"].ptr.buffer)).decode()
            repacked = {t.name for t in cpu.device.extra_buffer_types()}  # CPU_REPACK, AMX..
            assert (buffer in repacked) == repack
            assert tensors["norm.weight"].shape == (256,)       # 1-D: never repacked
            inp = ctx.new_tensor("F32", (4, 256)).set_input()
            out = tensors["w.weight"].mul_mat(inp).set_output()
            alias = tensors["copy.weight"].mul_mat(inp).set_output()
            sched.compute(ctx.graph(out, alias), {inp: x})
            results[repack] = out.numpy(copy=True)
            np.testing.assert_array_equal(alias.numpy(), results[repack])
    expected = x @ gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_0).T
    for value in results.values():
        np.testing.assert_allclose(value, expected, atol=0.03 * np.abs(expected).max())


def test_small_float_tensors_are_read_straight_from_the_file(model_file):
    path, expected = model_file
    f = pyggml.GGUFFile(path)
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_norm.weight"):
        values = f.read(name)
        assert values.dtype == np.float32
        np.testing.assert_array_equal(values, expected[name].astype(np.float32))
    with pytest.raises(ValueError, match="only F32 and F16"):
        f.read("blk.0.ffn_down.weight")
    f.close()
