"""A model's images and audio: media bytes (sound.py; images are decoded by their projector's
family, models/vision/images.py), prompts that hold them (prompts.py), media rows in the
input stream (media.py), the encoder and its cache (encoder.py), the projector's memory
(projector_memory.py) and speech to text (transcribe.py)."""
