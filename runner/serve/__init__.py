"""`runner serve`: the Ollama-, OpenAI- and Anthropic-compatible server.

One folder per layer, read top down as a request travels:
- web/: what every wire API shares: reading a body, the one error, streaming and folding a
  reply, who may call, the access log;
- ollama/, openai/, responses/, anthropic/: one folder per wire API, its request bodies, its
  routes and how it shapes replies (Ollama's also manages, creates and shows models);
- service/: the service every API calls, independent of the wire: a request's options, the
  scheduler that leases a loaded model, the handle on each runner subprocess (the runner
  protocol's client), and a reply's chunks as they stream;
- formats/: the text a model reads and writes: the chat template rendered into a prompt,
  thinking and tool calls taken out of the reply, family by family (harmony, fill-in-middle);
- library/: the models offered: the store `pull` fills, each entry, the catalog's names.
main.py starts it; app.py assembles the routes and the one error path."""
