"""Requests a stranger may send to a running server: grammar bombs (a format or a forced
call's tools whose schema is too long, too deep, a chain of $refs, too many choices for the
parser), template bombs (a model's Go template, a request's Jinja template) and clients who
give up waiting for a busy model. Each probe runs under the memory watchdog around the
server, bounded in time; each ends in a 4xx whose message is a sentence (or, for a grammar
that is only large, an answer), with the server and its runner still answering others, and
a waiting client that leaves loads nothing."""

from __future__ import annotations

import threading

import httpx
import pytest

from runner.serve.library.store import Library

from tests.support.gguf_edit import rewrite
from tests.support.server import QWEN_TOOLS_TEMPLATE, ServerProcess, eventually
from tests.support.watchdog import MemoryWatchdog, tree_rss

pytestmark = pytest.mark.server

MiB = 1 << 20
GROWTH_MIB = 300                        # what a probe may cost the server, at most
QWEN = "tiny-qwen"
OTHER = "tiny-other"                    # the same file under another name: another runner
SHORT = {"num_predict": 2}
ENDLESS = {"type": "string", "minLength": 1_000_000}   # a reply no end token can cut short
ANY = {"anyOf": [{"type": "string"}, {"type": "number"}]}
GO_TEMPLATES = {                        # a model's Go template -> what its error says
    "break": ("{{ break }}", "{{break}} outside {{range}}"),
    "continue": ("{{ range .Messages }}{{ else }}{{ continue }}{{ end }}",
                 "{{continue}} outside {{range}}"),
    "unclosed": ("{{ .System }}{{ range .Messages }}{{ .Content", "unclosed action"),
    "undefined": ("{{ nosuch .Messages }}", 'function "nosuch" not defined'),
    "template": ('{{ define "x" }}{{ template "x" }}{{ end }}{{ template "x" }}',
                 "unexpected {{end}}"),
    "ranges": ("{{ range 100000 }}{{ range 100000 }}{{ . }}{{ end }}{{ end }}",
               "the template "),
    "printf": ('{{ printf "%099999999d" 1 }}', "width or precision is above the limit"),
    "assign": ("{{ $x = .Messages }}", "undefined variable $x"),
    "constant": ("{{ " + "9" * 5000 + " }}", "cannot read the constant"),
}
JINJA_BOMBS = {                         # a request's template -> what its error says
    "range": ("{% for i in range(200000) %}x{% endfor %}", "Range too big"),
    "recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion"),
    "replace": ('{{ ("a" * 20000) | replace("a", "a" * 20000) }}', "more than"),
    "method": ('{{ ("a" * 20000).replace("a", "a" * 20000) | length }}', "more than"),
    "join": ('{{ ([("a" * 30000000)] * 20) | join | length }}', "more than"),
    "string": ('{{ ([("a" * 30000000)] * 20) | string | length }}', "more than"),
    "tojson": ('{{ ([("a" * 30000000)] * 20) | tojson | length }}', "more than"),
    "expandtabs": ('{{ ("\\t" * 20000).expandtabs(20000) | length }}', "more than"),
    "lipsum": ("{{ lipsum(1000000) }}", "lipsum"),
}


# the tools template of the tiny Qwen, less the tools' schemas (a forced call's grammar is
# probed, not the context a prompt of large schemas would need)
LEAN = QWEN_TOOLS_TEMPLATE.replace("{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}",
                                   "{{ tools | length }} tools\n")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, tiny_models):
    """A server of one slot and one loaded model at a time, holding the tiny Qwen under two
    names and, for each Go template probe, a model whose only template is that one."""
    assert LEAN != QWEN_TOOLS_TEMPLATE
    store = tmp_path_factory.mktemp("store")
    library = Library(store)
    library.create(QWEN, tiny_models["qwen"], template=LEAN)
    library.create(OTHER, tiny_models["qwen"], template=LEAN)
    bare = rewrite(tiny_models["qwen"], tmp_path_factory.mktemp("bare") / "bare.gguf",
                   keys={"tokenizer.chat_template": None})
    for name, (template, _) in GO_TEMPLATES.items():
        library.add_pulled(f"go-{name}", {"model": str(bare), "go_template": template})
    server = ServerProcess(store, tmp_path_factory.mktemp("serve"), RUNNER_NUM_PARALLEL=1,
                           RUNNER_MAX_LOADED_MODELS=1)
    yield server
    server.stop()


def probed(server, path: str, body: dict, timeout: float = 120) -> httpx.Response:
    """One request, bounded in time, the server's memory watched; then the server still
    answers another."""
    limit = tree_rss(server.proc.pid) / MiB + GROWTH_MIB
    with MemoryWatchdog(server.proc.pid, limit):
        reply = server.client.post(path, json=body, timeout=timeout)
    answers = server.client.post("/api/generate", json={
        "model": QWEN, "prompt": "Hello", "stream": False, "options": SHORT}, timeout=120)
    assert answers.status_code == 200, answers.text
    return reply


def refused(reply: httpx.Response, message: str) -> str:
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text)
    error = reply.json()["error"]
    error = error["message"] if isinstance(error, dict) else error
    assert message in error and error.endswith(".") and "\n" not in error, error
    return error


def chain(links: int) -> dict:
    """A schema of $defs each referring to the next (llguidance's compiler recurses once a
    link: 2,000 crashed the runner)."""
    defs = {f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}}
            for i in range(links)}
    return {"$defs": {**defs, f"d{links}": {"type": "integer"}}, "$ref": "#/$defs/d0"}


def nested(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def optional(count: int, spec: dict) -> dict:
    return {"type": "object", "properties": {f"p{i}": spec for i in range(count)}}


def forced(parameters: dict, tools: int = 1) -> dict:
    return {"model": QWEN, "messages": [{"role": "user", "content": "Call it."}],
            "tools": [{"type": "function", "function": {"name": f"f{i}",
                                                        "parameters": parameters}}
                      for i in range(tools)],
            "tool_choice": "required", "max_tokens": 8}


@pytest.mark.parametrize("schema, message", [
    ({"enum": [f"value{i}" for i in range(20000)]}, "characters long"),
    (nested(90), "nested 181 levels deep"),
    (optional(1000, ANY), "Current row has"),
], ids=["long", "deep", "choices"])
def test_a_format_past_the_grammar_bounds_is_a_400_sentence(hostile, schema, message):
    reply = probed(hostile, "/api/generate", {"model": QWEN, "prompt": "JSON:",
                                              "format": schema, "stream": False,
                                              "options": SHORT})
    refused(reply, message)


def test_a_chain_of_refs_compiles_without_crashing_the_runner(hostile):
    assert hostile.client.post("/api/generate", json={
        "model": QWEN, "prompt": "hi", "stream": False, "options": SHORT}).status_code == 200
    runners = hostile.runner_pids()
    reply = probed(hostile, "/api/generate", {"model": QWEN, "prompt": "JSON:",
                                              "format": chain(2000), "stream": False,
                                              "options": SHORT})
    assert reply.status_code == 200, reply.text
    assert hostile.runner_pids() == runners


@pytest.mark.parametrize("parameters, tools, status", [
    (chain(2000), 1, 200),
    ({"type": "object", "properties": {f"p{i}": {"allOf": [ANY]} for i in range(200)}}, 1,
     200),
    ({"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 40}
                                       for i in range(60)}}, 60, 400),
], ids=["chain", "combinations", "too-long"])
def test_a_forced_calls_tool_schemas_are_bounded(hostile, parameters, tools, status):
    reply = probed(hostile, "/v1/chat/completions", forced(parameters, tools))
    assert reply.status_code == status, reply.text
    if status == 400:
        refused(reply, "tools' parameter schemas make a grammar of")


@pytest.mark.parametrize("name", list(GO_TEMPLATES))
def test_a_models_go_template_that_fails_is_a_400_sentence(hostile, name):
    reply = probed(hostile, "/api/chat", {"model": f"go-{name}", "stream": False,
                                          "messages": [{"role": "user", "content": "hi"}],
                                          "options": SHORT})
    refused(reply, GO_TEMPLATES[name][1])


@pytest.mark.parametrize("name", list(JINJA_BOMBS))
def test_a_requests_template_bomb_is_a_400_sentence(hostile, name):
    template, message = JINJA_BOMBS[name]
    reply = probed(hostile, "/api/generate", {"model": QWEN, "prompt": "hi",
                                              "template": template, "stream": False,
                                              "options": SHORT})
    refused(reply, message)


def test_clients_that_gave_up_waiting_load_nothing(hostile):
    """Six clients ask for another model while the only one loaded is busy and give up: when
    it is free again it stays loaded (no runner is started for them), and serves on."""
    server = hostile
    assert server.client.post("/api/generate", json={"model": QWEN, "prompt": "hi",
                                                     "stream": False,
                                                     "options": SHORT}).status_code == 200
    busy_runner = server.runner_pids()
    first, stop = threading.Event(), threading.Event()

    def busy() -> None:
        with server.client.stream("POST", "/api/generate", json={
                "model": QWEN, "prompt": "Count:", "options": {"num_predict": 1_000_000},
                "format": ENDLESS}, timeout=120) as reply:
            for _ in reply.iter_lines():
                first.set()
                if stop.is_set():
                    return

    holder = threading.Thread(target=busy)
    holder.start()
    try:
        assert first.wait(60)
        waiters = [threading.Thread(target=_give_up, args=(server.url,)) for _ in range(6)]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join(60)
    finally:
        stop.set()
        holder.join(60)
    again = server.client.post("/api/generate", json={"model": QWEN, "prompt": "hi",
                                                      "stream": False, "options": SHORT})
    assert again.status_code == 200, again.text
    assert server.runner_pids() == busy_runner
    assert f"Loaded {OTHER}" not in server.log.read_text()
    assert eventually(lambda: "| 499 |" in server.log.read_text(), 10)


def _give_up(url: str) -> None:
    try:
        httpx.post(url + "/api/chat", json={"model": OTHER, "stream": False,
                                            "messages": [{"role": "user", "content": "hi"}],
                                            "options": SHORT}, timeout=2)
    except httpx.TimeoutException:
        return
    raise AssertionError("a request for another model was answered while one was busy")
