"""Prompts with images, through the engine and the model, against transformers' logits:
the rows spliced in place of tokens, an image's rows attending to each other, two images,
a prompt longer than the sliding window, batches cut before an image, parallel sequences
with different images, a cached second turn."""

from __future__ import annotations

import queue

import numpy as np
import pytest

import runner
from runner.api import split_options
from runner.engine.request import Request
from runner.multimodal.media import MediaRow

from tests.support import hf_vision
from tests.support.hf_vision import png
from tests.support.prompt_items import every_logit, run

KINDS = ["gemma3", "llava", "gemma4", "mistral3", "pixtral", "qwen2_5_vl", "qwen2_vl",
         "qwen3_vl", "qwen3_vl_moe", "qwen3_5"]
IMAGE_A, IMAGE_B = png(1, 40, 56), png(2, 20, 12)
IMG_BREAK = hf_vision.tokenizer("mistral").convert_tokens_to_ids("[IMG_BREAK]")
LONG = " and then".join(["The cat sat on the mat"] * 4)        # beyond the window of 8


@pytest.fixture(scope="module", params=KINDS)
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def model(vision_models, kind):
    paths = vision_models(kind)
    # checkpoints (Qwen 3.5's recurrent states): room for one where a prompt ends, which a
    # second turn that extends the prompt (not the reply) resumes from
    loaded = runner.load(paths["model"], projector=paths["mmproj"], num_ctx=256, parallel=2,
                         threads=2, kv_cache_type="f32", checkpoints=4)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def hf(reference, kind):
    return reference(kind)


def reference_logits(hf, items, images) -> np.ndarray:
    image_token = hf.config.image_token_id
    ids = [reference_id(hf, t) if isinstance(t, MediaRow) else t for t in items]
    kind = hf_vision.kind_of(hf.config)
    return hf_vision.logits(hf, ids, [hf_vision.processed(kind, i) for i in images],
                            image_token)


def reference_id(hf, row: MediaRow) -> int:
    """The token the reference's processor puts where a row is: the image token, or for
    Pixtral towers the [IMG_BREAK] that ends each row of cells but the last."""
    merge = getattr(hf.config, "spatial_merge_size", 1)
    if hf.config.vision_config.model_type == "pixtral":
        cols = row.media.pixels.grid[1] // merge
        if row.index % (cols + 1) == cols:
            return IMG_BREAK
    return hf.config.image_token_id


def close(ours, expected):
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1e-3
    assert (ours.argmax(-1) == expected.argmax(-1)).all()


@pytest.mark.parametrize("prompt,images", [
    ("Look: [img-0] what is it?", [IMAGE_A]),
    ("First [img-0] then [img-1] which is larger?", [IMAGE_A, IMAGE_B]),
    (LONG + " [img-0] " + LONG, [IMAGE_B]),
    ("Q: Hello there.\nA: Hi! How can I help?\nQ: What is in [img-0] now?\nA:", [IMAGE_A]),
], ids=["one", "two", "long", "between-turns"])
def test_logits_with_images_are_the_references(model, hf, prompt, images):
    items = model.prompt_items(prompt, images)
    rows = sum(model.multimodal.media(image)[0].rows for image in images)
    assert sum(isinstance(t, MediaRow) for t in items) == rows
    close(every_logit(model, items), reference_logits(hf, items, images))


def test_the_layout_around_an_image(model):
    items = model.prompt_items("[img-0]", [IMAGE_A])
    rows = [i for i, t in enumerate(items) if isinstance(t, MediaRow)]
    first, end = rows[0], rows[-1] + 1
    assert rows == list(range(first, end))
    before, after = model.multimodal.before["image"], model.multimodal.after["image"]
    assert items[first - len(before):first] == before
    assert items[end:end + len(after)] == after
    vocab = model.tokenizer.vocab.tokens
    layout = model.multimodal.encoders["image"].projector.layout
    specials = [t for t in layout.before + layout.after if t.startswith(("<", "["))]
    assert all(t in [vocab[i] for i in before + after] for t in specials)


def first_logprobs(events) -> np.ndarray:
    first = next(e for e in events if e.get("logprobs"))["logprobs"][0]
    return np.array([t["logprob"] for t in first["top_logprobs"]])


def reference_top(hf, items, images) -> np.ndarray:
    last = reference_logits(hf, items, images)[-1].astype(np.float64)
    logprobs = last - np.log(np.exp(last - last.max()).sum()) - last.max()
    return np.sort(logprobs)[::-1][:3]


def test_a_batch_is_cut_before_an_image_not_inside_it(vision_models, hf, kind):
    paths = vision_models(kind)
    small = runner.load(paths["model"], projector=paths["mmproj"], num_ctx=128, batch_size=6,
                        threads=2, kv_cache_type="f32")
    try:
        items = small.prompt_items("A bc [img-0] d", [IMAGE_A])
        rows = small.multimodal.max_rows
        assert small.engine.batch_size == max(6, rows)          # an image fits in a batch
        events = run(small, items)
        assert np.abs(first_logprobs(events) - reference_top(hf, items, [IMAGE_A])).max() < 1e-3
    finally:
        small.close()


def test_two_sequences_with_different_images_side_by_side(model, hf):
    prompts = [("Is this a cat? [img-0]", [IMAGE_A]), ("Is this a cat? [img-0]", [IMAGE_B])]
    items = [model.prompt_items(text, images) for text, images in prompts]
    streams, requests = [queue.Queue(), queue.Queue()], []
    sampling, generation = split_options(dict(temperature=0, num_predict=2))
    for item, stream in zip(items, streams):
        requests.append(Request(item, stream.put, sampling, generation, logprobs=True,
                                top_logprobs=3))
    model.engine.submit(*requests)
    for item, stream, (_, images) in zip(items, streams, prompts):
        events = []
        while not (events and events[-1].get("done")):
            events.append(stream.get(timeout=60))
        assert np.abs(first_logprobs(events) - reference_top(hf, item, images)).max() < 1e-3


def test_a_second_turn_reuses_the_image_and_matches_a_cold_one(model, hf):
    encoded = model.multimodal.encoders["image"].encoded
    first = model.prompt_items("Describe [img-0] briefly.", [png(9, 33, 17)])
    run(model, first)
    assert model.multimodal.encoders["image"].encoded == encoded + 1
    follow = first + model.tokenize(" And the colours?")
    events = run(model, follow)
    assert events[-1]["prompt_cached_count"] == len(first)      # only the new text evaluated
    assert model.multimodal.encoders["image"].encoded == encoded + 1           # nor encoded again
    expected = reference_top(hf, follow, [png(9, 33, 17)])
    assert np.abs(first_logprobs(events) - expected).max() < 1e-3


def test_a_different_image_in_the_same_place_is_evaluated_again(model):
    first = model.prompt_items("What is [img-0] here?", [png(10, 16, 16)])
    run(model, first)
    other = model.prompt_items("What is [img-0] here?", [png(11, 16, 16)])
    events = run(model, other)
    rows = model.multimodal.media(png(11, 16, 16))[0].rows
    assert events[-1]["prompt_eval_count"] - events[-1]["prompt_cached_count"] >= rows + 3


def test_generate_and_chat_take_images(model):
    text = model.generate("Look [img-0]", images=[IMAGE_A], stream=False, temperature=0,
                          num_predict=4)
    assert model.last.eval_count == 4 and isinstance(text, str)
    if model.template is None:
        return                                 # the tiny LLaVA has no chat template
    chat = model.chat([{"role": "user", "content": "What is this?", "images": [IMAGE_A]}],
                      stream=False, temperature=0, num_predict=2)
    assert isinstance(chat, str) and model.last.eval_count == 2


@pytest.mark.parametrize("prompt,images,message", [
    ("[img-1]", [IMAGE_A], r"refers to \[img-1\], but no image 1"),
    ("no tag here [img-0]", [IMAGE_A, IMAGE_B], r"no \[img-1\] tag"),
    ("[img-0]", [b"definitely not an image"], "not an image"),
])
def test_bad_images_and_tags_are_clear_errors(model, prompt, images, message):
    with pytest.raises(ValueError, match=message):
        model.generate(prompt, images=images, stream=False)


def test_a_text_only_model_refuses_images(vision_models, kind):
    text_only = runner.load(vision_models(kind)["model"], num_ctx=64, threads=2)
    try:
        with pytest.raises(ValueError, match="reads text only"):
            text_only.generate("[img-0]", images=[IMAGE_A], stream=False)
    finally:
        text_only.close()
