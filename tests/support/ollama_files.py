"""Ollama's single-file multimodal GGUFs, written from a converted model and its mmproj."""

from __future__ import annotations

import gguf
import numpy as np

# mmproj name -> Ollama's, per family (Gemma 4's Ollama names are llama.cpp's)
OLLAMA_NAMES = {
    "gemma3": [("v.patch_embd.", "v.patch_embedding."),
               ("v.position_embd.", "v.position_embedding."),
               ("v.post_ln.", "v.post_layernorm."), (".attn_out.", ".attn_output."),
               (".ln1.", ".layer_norm1."), (".ln2.", ".layer_norm2."),
               (".ffn_up.", ".mlp.fc1."), (".ffn_down.", ".mlp.fc2."),
               ("mm.soft_emb_norm.", "mm.mm_soft_emb_norm."),
               ("mm.input_projection.", "mm.mm_input_projection.")],
    "gemma4": [],
    "mistral3": [("v.patch_embd.", "v.patch_conv."), ("v.pre_ln.", "v.encoder_norm."),
                 (".ln1.", ".attn_norm."), (".attn_out.", ".attn_output."),
                 (".ln2.", ".ffn_norm."), ("mm.input_norm.", "mm.norm."),
                 ("mm.patch_merger.", "mm.patch_merger.merging_layer."),
                 ("mm.1.", "mm.linear_1."), ("mm.2.", "mm.linear_2.")],
    "qwen2_5_vl": [("v.patch_embd.weight.1", "v.patch_embd_1.weight"),
                   ("v.patch_embd.weight", "v.patch_embd_0.weight"),
                   ("v.post_ln.", "v.merger.ln_q."), ("mm.0.", "v.merger.mlp.0."),
                   ("mm.2.", "v.merger.mlp.2.")],
    "qwen3_5": [("v.patch_embd.", "v.patch_embed."), ("v.position_embd.", "v.pos_embed."),
                (".ln1.", ".norm1."), (".ln2.", ".norm2."), (".ffn_up.", ".mlp.linear_fc1."),
                (".ffn_down.", ".mlp.linear_fc2."), ("v.post_ln.", "v.merger.norm."),
                ("mm.0.", "v.merger.linear_fc1."), ("mm.2.", "v.merger.linear_fc2.")],
}
# how Ollama's files differ beyond names: the text's architecture, the keys it does not write,
# the arch-level keys it writes, the rows it leaves out (Pixtral's [IMG_BREAK]: the text
# model's) and Q and K rows kept as the reference has them (pairs split into halves)
OLLAMA_ARCH = {"mistral3": "mistral3", "qwen2_5_vl": "qwen25vl"}
UNWRITTEN = {"mistral3": {"attention.layer_norm_epsilon"},
             "qwen2_5_vl": {"feed_forward_length", "image_size"},
             "qwen3_5": {"feed_forward_length", "image_size", "attention.layer_norm_epsilon"}}
ARCH_KEYS = {"mistral3": {"spatial_merge_size": "clip.vision.spatial_merge_size"},
             "qwen2_5_vl": {"vision.spatial_merge_size": "clip.vision.spatial_merge_size",
                            "vision.window_size": "clip.vision.window_size",
                            "vision.max_pixels": "clip.vision.image_max_pixels"},
             "qwen3_5": {"vision.spatial_merge_size": "clip.vision.spatial_merge_size",
                         "vision.shortest_edge": "clip.vision.image_min_pixels",
                         "vision.image_mean": "clip.vision.image_mean",
                         "vision.image_std": "clip.vision.image_std"}}
# text keys under Ollama's own names
TEXT_KEYS = {"qwen2_5_vl": {"rope.dimension_sections": "rope.mrope_section"}}
LEFT_OUT = {"mistral3": {"v.token_embd.img_break"}}
HALVES = {"mistral3"}
VISION_KEYS = ("embedding_length", "feed_forward_length", "block_count", "attention.head_count",
               "attention.layer_norm_epsilon", "image_size", "patch_size",
               "projector.scale_factor", "image_max_tokens")
AUDIO_KEYS = ("embedding_length", "feed_forward_length", "block_count", "attention.head_count",
              "attention.layer_norm_epsilon", "num_mel_bins")


def qwen35_tensors(name: str, data: np.ndarray, tower: dict) -> list:
    """Ollama's Qwen 3.5 tower tensors for one of ours: Q, K and V split; the two frames'
    kernels one Conv3D, (D, 3, 2, p, p) stored as (3D, 2, p, p)."""
    if name == "v.patch_embd.weight.1":
        return []
    if name == "v.patch_embd.weight":
        both = np.stack([data, tower["v.patch_embd.weight.1"]], axis=2)
        return [("v.patch_embed.weight", both.reshape(-1, *both.shape[2:]))]
    if ".attn_qkv." in name:
        return [(name.replace("attn_qkv", f"attn_{letter}"), part)
                for letter, part in zip("qkv", np.split(data, 3))]
    return [(ollama_name(name, "qwen3_5"), data)]


# families whose tensors change beyond their names
RESHAPED = {"qwen3_5": qwen35_tensors}


def ollama_name(name: str, family: str) -> str:
    for ours, theirs in OLLAMA_NAMES[family]:
        name = name.replace(ours, theirs)
    return name


def single_file(model, mmproj, out, family: str, rename=ollama_name):
    """One GGUF of model's text and mmproj's towers, laid out as Ollama's (rename(name,
    family): a tower tensor's name there)."""
    text, tower = gguf.GGUFReader(model), gguf.GGUFReader(mmproj)
    ours = text.fields["general.architecture"].contents()
    arch = OLLAMA_ARCH.get(family, ours)
    writer = gguf.GGUFWriter(str(out), arch)
    for field in text.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value, kind = field.contents(), field.types[0]
        name = arch + field.name[len(ours):] if field.name.startswith(ours + ".") \
            else field.name
        for theirs, key in TEXT_KEYS.get(family, {}).items():
            name = name.replace(f"{arch}.{theirs}", f"{arch}.{key}")
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, value)
        else:
            writer.add_key_value(name, value, kind)
    for modality, keys in (("vision", VISION_KEYS), ("audio", AUDIO_KEYS)):
        for key in keys:
            field = tower.fields.get(f"clip.{modality}.{key}")
            if field is not None and not (family == "gemma3" and key.startswith("projector")) \
                    and key not in UNWRITTEN.get(family, ()):
                writer.add_key_value(f"{arch}.{modality}.{key}", field.contents(),
                                     field.types[0])
    for key, clip_key in ARCH_KEYS.get(family, {}).items():
        field = tower.fields[clip_key]
        writer.add_key_value(f"{arch}.{key}", field.contents(), field.types[0])
    if family == "qwen2_5_vl":             # the full-attention blocks, listed
        pattern = tower.fields["clip.vision.n_wa_pattern"].contents()
        blocks = tower.fields["clip.vision.block_count"].contents()
        writer.add_array(f"{arch}.vision.fullatt_block_indexes",
                         [i for i in range(blocks) if (i + 1) % pattern == 0])
    if family == "gemma3":
        side = tower.fields["clip.vision.image_size"].contents() // \
            tower.fields["clip.vision.patch_size"].contents()
        pool = tower.fields["clip.vision.projector.scale_factor"].contents()
        writer.add_uint32(f"{arch}.mm_tokens_per_image", (side // pool) ** 2)
    heads = tower.fields["clip.vision.attention.head_count"].contents() \
        if family in HALVES else 0
    arrays = {t.name: np.asarray(t.data).reshape(tuple(reversed(t.shape.tolist())))
              for t in tower.tensors}
    for reader, renamed in ((text, None), (tower, rename)):
        for tensor in reader.tensors:
            if renamed and tensor.name in LEFT_OUT.get(family, ()):
                continue
            name = renamed(tensor.name, family) if renamed else tensor.name
            data = np.asarray(tensor.data).reshape(tuple(reversed(tensor.shape.tolist())))
            if renamed and heads and name.endswith((".attn_q.weight", ".attn_k.weight")):
                data = halved(data, heads)
            pieces = RESHAPED[family](tensor.name, data, arrays) \
                if renamed and family in RESHAPED else [(name, data)]
            for piece, piece_data in pieces:
                writer.add_tensor(piece, np.ascontiguousarray(piece_data),
                                  raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def halved(rows: np.ndarray, heads: int) -> np.ndarray:
    """Q or K rows from each head's pairs adjacent back to the reference's halves."""
    return rows.reshape(heads, -1, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)
