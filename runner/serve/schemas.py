"""The request bodies of the server's routes, for its OpenAPI schema (/openapi.json): what
clients read in /docs and what schema-driven fuzzing generates. The routes read their JSON
themselves (Ollama's messages for each malformed field), so these only describe it."""

from __future__ import annotations

STRING, INTEGER, NUMBER, BOOLEAN = ({"type": t} for t in ("string", "integer", "number",
                                                            "boolean"))
OPTIONS = {"type": "object", "additionalProperties": True, "properties": {
    "temperature": NUMBER, "top_k": INTEGER, "top_p": NUMBER, "min_p": NUMBER, "seed": INTEGER,
    "num_predict": INTEGER, "num_ctx": INTEGER, "stop": {"type": "array", "items": STRING},
    "repeat_penalty": NUMBER, "num_keep": INTEGER}}
KEEP_ALIVE = {"oneOf": [NUMBER, STRING]}
FORMAT = {"oneOf": [{"type": "string", "enum": ["json"]}, {"type": "object"}]}
THINK = {"oneOf": [BOOLEAN, {"type": "string", "enum": ["low", "medium", "high", "max"]}]}
MESSAGE = {"type": "object", "required": ["role", "content"], "properties": {
    "role": {"type": "string", "enum": ["system", "user", "assistant", "tool"]},
    "content": STRING, "images": {"type": "array", "items": STRING}}}
COMMON = {"model": STRING, "stream": BOOLEAN, "options": OPTIONS, "keep_alive": KEEP_ALIVE,
          "format": FORMAT, "think": THINK, "truncate": BOOLEAN, "shift": BOOLEAN,
          "logprobs": BOOLEAN, "top_logprobs": INTEGER}

BODIES = {
    "generate": {"required": ["model"], "properties": {
        **COMMON, "prompt": STRING, "suffix": STRING, "system": STRING, "template": STRING,
        "raw": BOOLEAN, "context": {"type": "array", "items": INTEGER},
        "images": {"type": "array", "items": STRING}}},
    "chat": {"required": ["model"], "properties": {
        **COMMON, "messages": {"type": "array", "items": MESSAGE},
        "tools": {"type": "array", "items": {"type": "object"}}}},
    "embed": {"required": ["model", "input"], "properties": {
        "model": STRING, "input": {"oneOf": [STRING, {"type": "array", "items": STRING}]},
        "truncate": BOOLEAN, "dimensions": INTEGER, "keep_alive": KEEP_ALIVE,
        "options": OPTIONS}},
    "embeddings": {"required": ["model"], "properties": {
        "model": STRING, "prompt": STRING, "keep_alive": KEEP_ALIVE, "options": OPTIONS}},
    "model": {"required": ["model"], "properties": {"model": STRING, "verbose": BOOLEAN,
                                                    "stream": BOOLEAN}},
    "copy": {"required": ["source", "destination"],
             "properties": {"source": STRING, "destination": STRING}},
    "create": {"required": ["model"], "properties": {
        "model": STRING, "from": STRING, "files": {"type": "object"}, "template": STRING,
        "system": STRING, "parameters": {"type": "object"}, "stream": BOOLEAN}},
    "openai_chat": {"required": ["model", "messages"], "properties": {
        "model": STRING, "messages": {"type": "array", "items": MESSAGE}, "stream": BOOLEAN,
        "max_tokens": INTEGER, "temperature": NUMBER, "top_p": NUMBER, "seed": INTEGER,
        "stop": {"oneOf": [STRING, {"type": "array", "items": STRING}]},
        "response_format": {"type": "object"}, "tools": {"type": "array"},
        "reasoning_effort": STRING, "logprobs": BOOLEAN, "top_logprobs": INTEGER}},
    "openai_completion": {"required": ["model", "prompt"], "properties": {
        "model": STRING, "prompt": STRING, "suffix": STRING, "max_tokens": INTEGER,
        "temperature": NUMBER, "stream": BOOLEAN, "logprobs": INTEGER}},
    "openai_embeddings": {"required": ["model", "input"], "properties": {
        "model": STRING, "input": {"oneOf": [STRING, {"type": "array", "items": STRING}]},
        "dimensions": INTEGER, "encoding_format": {"type": "string",
                                                   "enum": ["float", "base64"]}}},
}


def documented(name: str) -> dict:
    """openapi_extra for a route whose JSON body is BODIES[name]."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"type": "object", **BODIES[name]}}}}}
