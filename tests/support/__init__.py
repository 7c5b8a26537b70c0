"""What tests share that is not a fixture: servers and runners started as subprocesses
(server.py, runner_process.py), RPC servers (rpc_servers.py), the chat templates of the
pinned llama.cpp archive (official_templates.py), text fed to a streaming parser in pieces
(streaming.py). Fixtures stay in the conftest.py beside the tests that use them."""
