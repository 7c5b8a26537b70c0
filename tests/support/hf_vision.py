"""Tiny random multimodal checkpoints made at test time with transformers, and the
reference's outputs for them: image features and text logits with images.

Their vocabularies are the tiny trained BPE of hf_tiny with the family's image tokens added,
and the config's image token ids point at those (so the embedding tables stay small).
Norm weights and the zero-initialised projector get random values, so that a model which
ignored one would not match.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from tests.support import hf_tiny
from tests.support.parity import table_gelu

IMAGE_TOKENS = {"gemma3": ["<start_of_image>", "<end_of_image>", "<image_soft_token>"],
               "llama": ["<image>"], "gemma4": ["<|image>", "<image|>", "<|image|>"],
               "mistral": ["[IMG]", "[IMG_BREAK]", "[IMG_END]"],
               "qwen2": ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]}
GEMMA3_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8,
                   query_pre_attn_scalar=16, rms_norm_eps=1e-6, pad_token_id=0)
SIGLIP = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
              image_size=32, patch_size=8)
# three layers, so that the features read at the second-to-last differ from the last's
CLIP = dict(SIGLIP, num_hidden_layers=3, projection_dim=32)
# with every optional part on: clamped linears, standardisation (set by hand: the reference
# leaves them at infinity and uninitialised), and images that attend both ways on the text
# model's sliding layers
GEMMA4_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, head_dim=16, patch_size=4,
                     pooling_kernel_size=3, position_embedding_size=64,
                     use_clipped_linears=True, standardize=True)
# patches of 4 merged 2 x 2, images at most 48 pixels a side
PIXTRAL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
               image_size=48, patch_size=4, hidden_act="silu")
PIXTRAL_PROCESSOR = dict(size={"longest_edge": 48}, patch_size=8)
PIXTRAL_12B_PROCESSOR = dict(size={"longest_edge": 48}, patch_size=4)       # no merge
# patches of 4 merged 2 x 2 (cells of 8 pixels), windows of 2 x 2 cells but in every second
# block, between 4 and 64 cells an image
QWEN25_VISION = dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=4,
                     spatial_merge_size=2, temporal_patch_size=2, window_size=16,
                     fullatt_block_indexes=[1, 3])
QWEN2_VISION = dict(depth=2, embed_dim=32, hidden_size=hf_tiny.SHAPE["hidden_size"],
                    mlp_ratio=2, num_heads=2, patch_size=4, spatial_merge_size=2,
                    temporal_patch_size=2)
# Qwen3-VL: LayerNorm blocks, a learned 4 x 4 position table, deepstack after blocks 0 and 2
QWEN3_VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=4,
                    spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                    deepstack_visual_indexes=[0, 2], out_hidden_size=hf_tiny.SHAPE["hidden_size"])
# Qwen 3.5: Qwen3-VL's tower without deepstack, before a hybrid text model (DeltaNet layers
# 0-2, attention 3; half of each head rotated, interleaved M-RoPE over pairs 2, 1 and 1)
QWEN35_VISION = {k: v for k, v in QWEN3_VISION.items() if k != "deepstack_visual_indexes"}
QWEN35_TEXT = dict({k: v for k, v in hf_tiny.QWEN35.items() if k != "head_dim"},
                   num_hidden_layers=4)
QWEN35_ROPE = {"mrope_section": [2, 1, 1], "mrope_interleaved": True,
               "partial_rotary_factor": 0.5}
QWEN_PROCESSOR = dict(size={"shortest_edge": 4 * 64, "longest_edge": 64 * 64}, patch_size=4,
                      merge_size=2, temporal_patch_size=2)
# Qwen's turns (its images stand where the server's [img-N] tags put them)
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Mistral's turns (its v7 template, tool calls aside)
MISTRAL = ("{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}"
           "[SYSTEM_PROMPT]{{ m.content }}[/SYSTEM_PROMPT]{% elif m.role == 'user' %}"
           "[INST]{{ m.content }}[/INST]{% else %}{{ m.content }}{{ eos_token }}{% endif %}"
           "{% endfor %}")
# the reference's input naming which positions hold image rows (for its attention masks)
TYPE_IDS = {"gemma3": "token_type_ids", "gemma4": "mm_token_type_ids",
            "qwen2_5_vl": "mm_token_type_ids", "qwen2_vl": "mm_token_type_ids",
            "qwen3_vl": "mm_token_type_ids", "qwen3_vl_moe": "mm_token_type_ids",
            "qwen3_5": "mm_token_type_ids"}
GEMMA4_PROCESSOR = dict(patch_size=4, max_soft_tokens=70, pooling_kernel_size=3)


def tokenizer(kind: str):
    base = {"mistral": "llama"}.get(kind, kind)               # Mistral's: Llama's, tags aside
    hf_tiny.SPECIAL.setdefault(f"{kind}_vision", hf_tiny.SPECIAL[base] + IMAGE_TOKENS[kind])
    hf_tiny.PATTERN.setdefault(f"{kind}_vision", hf_tiny.PATTERN[base])
    return hf_tiny.tokenizer(f"{kind}_vision")


def gemma3(directory: Path, seed: int = 0) -> Path:
    from transformers import (Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig,
                              SiglipVisionConfig)

    tok = tokenizer("gemma3")
    ids = {t: tok.convert_tokens_to_ids(t) for t in IMAGE_TOKENS["gemma3"]}
    text = Gemma3TextConfig(**GEMMA3_TEXT, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                            eos_token_id=tok.eos_token_id)
    config = Gemma3Config(text_config=text.to_dict(),
                          vision_config=SiglipVisionConfig(**SIGLIP).to_dict(),
                          mm_tokens_per_image=4, boi_token_index=ids["<start_of_image>"],
                          eoi_token_index=ids["<end_of_image>"],
                          image_token_index=ids["<image_soft_token>"])
    return _saved(Gemma3ForConditionalGeneration, config, tok, directory, seed)


def llava(directory: Path, seed: int = 0) -> Path:
    from transformers import (CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration)

    tok = tokenizer("llama")
    text = LlamaConfig(**hf_tiny.SHAPE, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id)
    config = LlavaConfig(text_config=text.to_dict(),
                         vision_config=CLIPVisionConfig(**CLIP).to_dict(),
                         image_token_index=tok.convert_tokens_to_ids("<image>"),
                         image_seq_length=16)
    return _saved(LlavaForConditionalGeneration, config, tok, directory, seed)


def mistral3(directory: Path, seed: int = 0) -> Path:
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    # the projector's norm takes the text model's epsilon, llama.cpp's the tower's (1e-5)
    return _pixtral_checkpoint(directory, seed, Mistral3Config,
                               Mistral3ForConditionalGeneration, PIXTRAL_PROCESSOR,
                               {"rms_norm_eps": 1e-5},
                               dict(spatial_merge_size=2, vision_feature_layer=-1))


def pixtral(directory: Path, seed: int = 0) -> Path:
    """Pixtral 12B's layout: LLaVA with a Pixtral tower, patches unmerged, biased
    projector."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    return _pixtral_checkpoint(directory, seed, LlavaConfig, LlavaForConditionalGeneration,
                               PIXTRAL_12B_PROCESSOR, {},
                               dict(vision_feature_select_strategy="full",
                                    vision_feature_layer=-1, multimodal_projector_bias=True))


def qwen2_5_vl(directory: Path, seed: int = 0) -> Path:
    """A tiny Qwen2.5-VL: M-RoPE over (time, row, column) pairs 2, 3 and 3 of 8."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    vision = dict(QWEN25_VISION, out_hidden_size=hf_tiny.SHAPE["hidden_size"])
    return _qwen_checkpoint(directory, seed, Qwen2_5_VLConfig,
                            Qwen2_5_VLForConditionalGeneration, vision)


def qwen2_vl(directory: Path, seed: int = 0) -> Path:
    """A tiny Qwen2-VL: LayerNorms, quick GELU MLPs, no windows."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    return _qwen_checkpoint(directory, seed, Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                            QWEN2_VISION)


def qwen3_vl(directory: Path, seed: int = 0) -> Path:
    """A tiny Qwen3-VL: interleaved M-RoPE over pairs 4, 2 and 2 of 8, two deepstack layers."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    return _qwen_checkpoint(directory, seed, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                            QWEN3_VISION, {"mrope_section": [4, 2, 2], "mrope_interleaved": True},
                            {"image_mean": [0.5] * 3, "image_std": [0.5] * 3})


def qwen3_vl_moe(directory: Path, seed: int = 0) -> Path:
    """Qwen3-VL's tower before a text model of 4 experts, 2 chosen."""
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    return _qwen_checkpoint(directory, seed, Qwen3VLMoeConfig,
                            Qwen3VLMoeForConditionalGeneration, QWEN3_VISION,
                            {"mrope_section": [4, 2, 2], "mrope_interleaved": True},
                            {"image_mean": [0.5] * 3, "image_std": [0.5] * 3},
                            dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                 decoder_sparse_step=1))


def qwen3_5(directory: Path, seed: int = 0) -> Path:
    """A tiny Qwen 3.5: Qwen3-VL's tower (no deepstack) before DeltaNet and attention layers."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    return _qwen_checkpoint(directory, seed, Qwen3_5Config, Qwen3_5ForConditionalGeneration,
                            QWEN35_VISION, QWEN35_ROPE,
                            {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}, QWEN35_TEXT)


def _qwen_checkpoint(directory: Path, seed: int, config_class, model_class, vision: dict,
                     rope: dict | None = None, processor: dict | None = None,
                     text_settings: dict | None = None) -> Path:
    import json

    tok = tokenizer("qwen2")
    ids = {t: tok.convert_tokens_to_ids(t) for t in IMAGE_TOKENS["qwen2"]}
    text = dict(hf_tiny.SHAPE, vocab_size=len(tok), head_dim=16, tie_word_embeddings=False,
                eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 **(rope or {"mrope_section": [2, 3, 3]})},
                **(text_settings or {}))
    config = config_class(
        text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"])
    tok.chat_template = CHATML
    _saved(model_class, config, tok, directory, seed)
    (directory / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Qwen2VLImageProcessor", **QWEN_PROCESSOR, **(processor or {})}))
    return directory


def _pixtral_checkpoint(directory: Path, seed: int, config_class, model_class, processor: dict,
                        text_settings: dict, settings: dict) -> Path:
    """A tiny Mistral text model and Pixtral tower in model_class, with its processor's
    settings saved."""
    import json

    from transformers import MistralConfig, PixtralVisionConfig

    tok = tokenizer("mistral")
    tok.chat_template = MISTRAL
    text = MistralConfig(**{**hf_tiny.SHAPE, **text_settings}, vocab_size=len(tok),
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         sliding_window=None)
    config = config_class(text_config=text.to_dict(),
                          vision_config=PixtralVisionConfig(**PIXTRAL).to_dict(),
                          image_token_index=tok.convert_tokens_to_ids("[IMG]"), **settings)
    _saved(model_class, config, tok, directory, seed)
    (directory / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "PixtralImageProcessor", **processor}))
    return directory


def gemma4(directory: Path, seed: int = 0, tok=None, audio_config: dict | None = None,
           bidirectional: str | None = "vision", bound: float = 1.5,
           template: str | None = None) -> Path:
    """A tiny Gemma 4 with its vision tower (and, given audio_config, an audio tower; tok
    then has the audio tokens), clamps near +-bound, and a chat template if given."""
    import torch
    from transformers import (Gemma4Config, Gemma4ForConditionalGeneration,
                              Gemma4ImageProcessorPil, Gemma4TextConfig, Gemma4VisionConfig)

    tok = tok or tokenizer("gemma4")
    ids = tok.convert_tokens_to_ids
    both_ways = {"use_bidirectional_attention": bidirectional} if bidirectional else {}
    text = Gemma4TextConfig(**{**hf_tiny.SHAPE, **hf_tiny.GEMMA4_KINDS["gemma4"]},
                            vocab_size=len(tok), vocab_size_per_layer_input=len(tok),
                            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                            pad_token_id=0, **both_ways)
    audio_ids = dict(boa_token_id=ids("<|audio>"), eoa_token_index=ids("<audio|>"),
                     audio_token_id=ids("<|audio|>")) if audio_config else {}
    config = Gemma4Config(text_config=text.to_dict(),
                          vision_config=Gemma4VisionConfig(**GEMMA4_VISION).to_dict(),
                          audio_config=audio_config, boi_token_id=ids("<|image>"),
                          eoi_token_id=ids("<image|>"), image_token_id=ids("<|image|>"),
                          **audio_ids)
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(config).eval()
    hf_tiny._vary_unit_weights(model)
    _randomize(model)
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("per_dim_scale"):               # the audio tower's
                value.copy_(0.5 * torch.randn_like(value))
    set_gemma4_buffers(model, bound)
    model.save_pretrained(directory)
    if template:
        tok.chat_template = template
    tok.save_pretrained(directory)
    Gemma4ImageProcessorPil(**GEMMA4_PROCESSOR).save_pretrained(directory)
    return directory


def set_gemma4_buffers(model, bound: float) -> None:
    """Finite clamps near +-bound (the reference leaves them infinite) and standardisation
    values (it leaves them uninitialised)."""
    import torch

    with torch.no_grad():
        for name, value in model.named_buffers():
            if name.endswith(("input_min", "output_min")):
                value.fill_(-bound + 0.2 * torch.rand(()).item())
            elif name.endswith(("input_max", "output_max")):
                value.fill_(bound + 0.2 * torch.rand(()).item())
            elif name.endswith("std_bias"):
                value.copy_(torch.randn_like(value))
            elif name.endswith("std_scale"):
                value.copy_(0.5 + torch.rand_like(value))


def _saved(model_class, config, tok, directory: Path, seed: int) -> Path:
    """A model of config, made with seed and randomized, saved with tok into directory."""
    import torch

    torch.manual_seed(seed)
    model = model_class(config).eval()
    _randomize(model)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def _randomize(model) -> None:
    import torch

    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight") or not value.abs().max():
                value.copy_(0.3 * torch.randn_like(value))


def table_quick_gelu():
    """Quick GELU as ggml's CPU backend computes it: looked up in a table of FP16 inputs with
    an FP16 result."""
    import torch

    class TableQuickGelu(torch.nn.Module):
        def forward(self, x):
            rounded = x.half().float()
            return (rounded * torch.sigmoid(1.702 * rounded)).half().float()

    return TableQuickGelu()


def reference_model(directory: Path):
    """The checkpoint in transformers, float32, its tanh and quick GELUs rounded as ggml's
    are."""
    import torch
    from transformers import AutoModelForImageTextToText
    from transformers.activations import GELUTanh, QuickGELUActivation

    model = AutoModelForImageTextToText.from_pretrained(directory, dtype=torch.float32).eval()
    tables = {GELUTanh: table_gelu, QuickGELUActivation: table_quick_gelu}
    for module in model.modules():
        for attribute in ("act_fn", "activation_fn", "act"):
            table = tables.get(type(getattr(module, attribute, None)))
            if table is not None:
                setattr(module, attribute, table())
    return model


def features(model, processed: dict) -> np.ndarray:
    """The projector's rows for one image's processor output (Qwen3-VL's: each followed by
    its deepstack rows)."""
    import torch

    inputs = {name: torch.tensor(value) for name, value in processed.items()}
    with torch.no_grad():
        out = model.model.get_image_features(**inputs)
    deep = [feature[0] for feature in getattr(out, "deepstack_features", None) or []]
    return torch.cat([out.pooler_output[0], *deep], dim=-1).numpy()


def logits(model, ids: list[int], processed: list[dict], image_token: int):
    """Logits (T, vocab) of ids with images (their processor outputs, in order); image rows
    attend to each other as the processor's token type ids say."""
    import torch

    ids_t = torch.tensor([ids])
    kwargs = {}
    if processed:
        kwargs = {name: torch.tensor(np.concatenate(padded([p[name] for p in processed])))
                  for name in processed[0]}
        types = TYPE_IDS.get(model.config.model_type)
        if types:
            kwargs[types] = (ids_t == image_token).long()
    with torch.no_grad():
        return model(input_ids=ids_t, **kwargs).logits[0].numpy()


def padded(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Pixel values of images of different sizes padded with zeros at the bottom and right
    to the largest (as Pixtral's processor batches them; its image_sizes say the real
    ones); other inputs as they are."""
    if len({a.shape for a in arrays}) == 1 or arrays[0].ndim != 4:
        return arrays
    height, width = max(a.shape[2] for a in arrays), max(a.shape[3] for a in arrays)
    return [np.pad(a, ((0, 0), (0, 0), (0, height - a.shape[2]), (0, width - a.shape[3])))
            for a in arrays]


def kind_of(config) -> str:
    """A checkpoint's kind here (its model type; Pixtral 12B is LLaVA with a Pixtral tower)."""
    if config.model_type == "llava" and config.vision_config.model_type == "pixtral":
        return "pixtral"
    return config.model_type


def processed(kind: str, data: bytes) -> dict:
    """The reference processor's model inputs for encoded image data (tiny sizes): pixel
    values, and Gemma 4's patch positions, each with a leading dimension of one image."""
    import transformers
    from PIL import Image

    processors = {
        "gemma3": lambda: transformers.Gemma3ImageProcessorPil(size={"height": 32, "width": 32}),
        "llava": lambda: transformers.LlavaImageProcessorPil(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        "gemma4": lambda: transformers.Gemma4ImageProcessorPil(**GEMMA4_PROCESSOR),
        "mistral3": lambda: transformers.PixtralImageProcessorPil(**PIXTRAL_PROCESSOR),
        "pixtral": lambda: transformers.PixtralImageProcessorPil(**PIXTRAL_12B_PROCESSOR),
        "qwen2_5_vl": lambda: transformers.Qwen2VLImageProcessorPil(**QWEN_PROCESSOR),
        "qwen2_vl": lambda: transformers.Qwen2VLImageProcessorPil(**QWEN_PROCESSOR),
        "qwen3_vl": lambda: transformers.Qwen2VLImageProcessorPil(
            **QWEN_PROCESSOR, image_mean=[0.5] * 3, image_std=[0.5] * 3),
        "qwen3_vl_moe": lambda: transformers.Qwen2VLImageProcessorPil(
            **QWEN_PROCESSOR, image_mean=[0.5] * 3, image_std=[0.5] * 3),
        "qwen3_5": lambda: transformers.Qwen2VLImageProcessorPil(
            **QWEN_PROCESSOR, image_mean=[0.5] * 3, image_std=[0.5] * 3),
    }
    out = processors[kind]()(Image.open(io.BytesIO(data)), return_tensors="np")
    return {name: out[name] for name in ("pixel_values", "image_position_ids", "image_sizes",
                                         "image_grid_thw") if name in out}


def png(seed: int, height: int, width: int, alpha: bool = False) -> bytes:
    """A random image, PNG-encoded."""
    from PIL import Image

    channels = 4 if alpha else 3
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, channels), np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGBA" if alpha else "RGB").save(out, "PNG")
    return out.getvalue()
