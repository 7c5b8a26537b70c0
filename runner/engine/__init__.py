"""The engine: requests in cache slots, advanced together by one batch loop thread.

batch.py (what one compute takes), executor.py (a batch to a ggml graph and its logits),
options.py (what a generation asks for beyond sampling; stop strings), request.py (a request
and its sequence's state), slots.py (the input cache), flight.py (a batch in flight),
loop.py (the batch loop), pooling.py (embeddings)."""
