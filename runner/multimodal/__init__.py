"""A model's images and audio: media bytes, prompts that hold them, the encoder and its cache, the projector's memory, transcription."""
