"""What tests share that is not a fixture: servers and runners started as subprocesses
(server.py, runner_process.py), the command line as a user runs it (cli.py), RPC servers
(rpc_servers.py), fake runners (fake_runner.py), a model registry on loopback
(registry_server.py), the chat templates of the pinned llama.cpp archive
(official_templates.py), text fed to a streaming parser in pieces (streaming.py). Tiny
models made at test time: GGUFs (tiny.py, unigram.py), transformers checkpoints (hf_tiny.py,
hf_released.py, hf_embedding.py, hf_vision.py, hf_audio.py), files rewritten as other
converters write them (gguf_edit.py, ollama_files.py); what they are compared with:
transformers' logits (parity.py), numpy RoPE (rope.py), llama.cpp's libmtmd (mtmd.py), and
the names each parity test converts to (architectures.py). The tokenizer corpus (corpus.py),
prompt items fed to a loaded model (prompt_items.py), a model's footprint measured before
loading (footprint.py). Fixtures stay in the conftest.py beside the tests that use them."""
