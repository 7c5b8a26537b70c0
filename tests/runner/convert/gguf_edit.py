"""Rewriting a GGUF file the way another converter would have written it (the tests' way to
make Ollama's layouts of a model from ours): keys renamed, dropped or given new values,
tensors renamed or replaced."""

from __future__ import annotations

import gguf
import numpy as np

from pyggml.gguf_reader import Header


def rewrite(source, target, keys=None, values=None, tensors=None, arch=None):
    """keys: old key -> new key (None drops it); values: key -> new value (a key the file
    lacks, or one keys drops, is added anew: ints as uint32, floats as float32, strings,
    bools, lists as arrays);
    tensors: function (name, float32 array) -> {new name: array} (an empty dict drops it);
    arch: a new general.architecture (its keys renamed by the caller). Returns target."""
    keys, values = keys or {}, values or {}
    header = Header(source)
    writer = gguf.GGUFWriter(str(target), arch or header.metadata["general.architecture"])
    for name, value in header.metadata.items():
        if name in ("general.architecture", "general.alignment") or name.startswith("GGUF."):
            continue
        new = keys.get(name, name)
        if new is None:
            continue
        kind, sub = header.value_types[name]
        writer.add_key_value(new, values.get(name, value), gguf.GGUFValueType(kind),
                             sub_type=None if sub is None else gguf.GGUFValueType(sub))
    added = {bool: gguf.GGUFValueType.BOOL, int: gguf.GGUFValueType.UINT32,
             float: gguf.GGUFValueType.FLOAT32, str: gguf.GGUFValueType.STRING}
    for name, value in values.items():
        if name in header.metadata and keys.get(name, name) is not None:
            continue                                   # written above, with its own type
        if isinstance(value, list):
            writer.add_array(name, value)
        else:
            writer.add_key_value(name, value, added[type(value)])
    arrays = {t.name: np.array(t.data, dtype=np.float32).reshape(
        tuple(reversed([int(n) for n in t.shape]))) for t in gguf.GGUFReader(str(source)).tensors}
    for name, array in arrays.items():
        for new, data in (tensors(name, array, arrays) if tensors else {name: array}).items():
            writer.add_tensor(new, np.ascontiguousarray(data, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target
