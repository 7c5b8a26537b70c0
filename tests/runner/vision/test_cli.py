"""`python -m runner run MODEL PROMPT --image PATH`, in process (--local --mmproj) and
through a server."""

from __future__ import annotations

import subprocess
import sys

import runner

from tests.support.hf_vision import png


def test_run_with_an_image_in_process(vision_models, tmp_path):
    paths = vision_models("gemma3")
    image = tmp_path / "photo.png"
    image.write_bytes(png(21, 30, 44))
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", str(paths["model"]), "What is it?", "--local",
         "--mmproj", str(paths["mmproj"]), "--image", str(image), "--temperature", "0",
         "--num-predict", "4", "--threads", "2"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    model = runner.load(paths["model"], projector=paths["mmproj"], threads=2)
    try:
        expected = model.chat([{"role": "user", "content": "What is it?",
                                "images": [image.read_bytes()]}], stream=False,
                              temperature=0, num_predict=4)
    finally:
        model.close()
    assert done.stdout == expected + "\n"


def test_an_image_that_is_not_one_is_a_clear_error(vision_models, tmp_path):
    paths = vision_models("gemma3")
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", str(paths["model"]), "Hi", "--local",
         "--mmproj", str(paths["mmproj"]), "--image", str(bad), "--threads", "2"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode != 0
    assert "not an image" in done.stderr and "Traceback" not in done.stderr
