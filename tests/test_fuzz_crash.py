"""Fuzzing a real server for anything that kills it or answers 5xx.

A real server process with the bundled model takes random and adversarial grammars (from
a grammar-aware generator), JSON schemas, sampler parameters, prompts full of control
tokens and broken Unicode, deeply nested JSON, odd paths and odd headers. The oracle, after
every request: the process is alive and no answer is a 5xx other than an honest 503 (or 507
for a full disk). Each property has a fixed example budget so CI time stays bounded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server import ServerProcess

pytestmark = pytest.mark.real

HONEST_5XX = {503, 507}
BUDGET = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    process = ServerProcess(root / "data", root / "server.log", request_timeout_s=30).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
        yield client


def survived(server: ServerProcess, reply: httpx.Response | None) -> None:
    assert server.process is not None and server.process.poll() is None, (
        f"the server died; see {server.log_path}"
    )
    if reply is not None:
        assert reply.status_code < 500 or reply.status_code in HONEST_5XX, (
            reply.request.method,
            reply.request.url,
            reply.status_code,
            Path(server.log_path).read_text(errors="replace")[-3000:],
        )


def send(client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
    """The reply, or None when no reply came: the connection dropped, or the client
    itself refused to send what was generated (a URL or header httpx will not write).
    ``survived`` then checks the process: a dead server fails there."""
    try:
        return client.request(method, path, **kwargs)
    except Exception:  # the server's health is the oracle, not the client's
        return None


# --- grammars -------------------------------------------------------------------------------
RULE_NAMES = ["root", "a", "b", "item", "x-y"]
ESCAPES = ["\\x00", "\\x7f", "\\n", "\\t", "\\\\", '\\"', "\\u0000", "\\U0001F600", "\\xff"]
chars = st.one_of(
    st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\\n'),
    st.sampled_from(ESCAPES),
)
literal = st.lists(chars, max_size=6).map(lambda cs: '"' + "".join(cs) + '"')
char_class = st.tuples(st.booleans(), st.lists(chars, min_size=1, max_size=4)).map(
    lambda t: "[" + ("^" if t[0] else "") + "".join(c.replace("]", "\\]") for c in t[1]) + "]"
)
token_ref = st.integers(-5, 300_000).map(lambda n: f"<[{n}]>")
reference = st.sampled_from(RULE_NAMES)
atom = st.one_of(literal, char_class, reference, st.just("."), token_ref)
repeat = st.sampled_from(["", "*", "+", "?", "{0,3}", "{2}", "{1,}", "{99999}"])


def _expression(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    sequence = st.lists(st.tuples(children, repeat).map("".join), min_size=1, max_size=4)
    group = sequence.map(lambda items: "(" + " ".join(items) + ")")
    alternatives = st.lists(sequence.map(" ".join), min_size=2, max_size=3).map(" | ".join)
    return st.one_of(group, alternatives)


expression = st.recursive(atom, _expression, max_leaves=12)
grammar = st.lists(st.tuples(st.sampled_from(RULE_NAMES), expression), min_size=1, max_size=4).map(
    lambda rules: "\n".join(f"{name} ::= {body}" for name, body in rules)
)
raw_grammar = st.text(max_size=80)


@BUDGET
@given(
    text=st.one_of(grammar, grammar.map(lambda g: "root ::= " + g.split("::=", 1)[1]), raw_grammar)
)
def test_random_grammars(server: ServerProcess, http: httpx.Client, text: str) -> None:
    body = {"prompt": "Answer:", "max_tokens": 4, "temperature": 0.7, "grammar": text}
    survived(server, send(http, "POST", "/api/completions", json=body))


# --- JSON schemas ---------------------------------------------------------------------------
scalar_schema = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])}
    ),
    st.fixed_dictionaries({"const": st.one_of(st.text(max_size=4), st.integers(), st.none())}),
    st.fixed_dictionaries(
        {"enum": st.lists(st.one_of(st.text(max_size=3), st.integers()), max_size=3)}
    ),
    st.fixed_dictionaries(
        {"type": st.just("string"), "pattern": st.text(max_size=10)},
        optional={"minLength": st.integers(-2, 50), "maxLength": st.integers(-2, 50)},
    ),
    st.fixed_dictionaries(
        {"type": st.just("integer")},
        optional={"minimum": st.integers(-(10**20), 10**20), "maximum": st.integers()},
    ),
    st.fixed_dictionaries({"$ref": st.sampled_from(["#", "#/defs/x", "#/$defs/nope", "http://x"])}),
    st.fixed_dictionaries({"type": st.text(max_size=6)}),
    st.fixed_dictionaries({"format": st.sampled_from(["date", "uuid", "date-time", "nonsense"])}),
)


def _schema_of(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("array"), "items": children},
            optional={"minItems": st.integers(-1, 9), "maxItems": st.integers(-1, 9)},
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("object"),
                "properties": st.dictionaries(st.text(max_size=5), children, max_size=3),
            },
            optional={
                "required": st.lists(st.text(max_size=5), max_size=3),
                "additionalProperties": st.one_of(st.booleans(), children),
            },
        ),
        st.sampled_from(["anyOf", "oneOf", "allOf"]).flatmap(
            lambda key: st.fixed_dictionaries({key: st.lists(children, max_size=3)})
        ),
    )


schema = st.recursive(scalar_schema, _schema_of, max_leaves=8)


@BUDGET
@given(value=schema)
def test_random_json_schemas(server: ServerProcess, http: httpx.Client, value: Any) -> None:
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "Give me JSON."}],
        "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": value}},
    }
    survived(server, send(http, "POST", "/v1/chat/completions", json=body))


# --- sampler parameters ---------------------------------------------------------------------
anything_numeric = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-0", '"3"', "null", "true", "[]"]),
)
SAMPLER_FIELDS = [
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty",
    "n",
    "logprobs",
    "top_logprobs",
]


@BUDGET
@given(
    values=st.dictionaries(st.sampled_from(SAMPLER_FIELDS), anything_numeric, min_size=1),
    path=st.sampled_from(["/api/completions", "/v1/completions", "/v1/chat/completions"]),
    stop=st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=6), st.text(max_size=5)),
)
def test_absurd_sampler_parameters(
    server: ServerProcess, http: httpx.Client, values: dict[str, Any], path: str, stop: Any
) -> None:
    fields = [
        f'"{key}": {value if isinstance(value, str) else json.dumps(value)}'
        for key, value in values.items()
    ]
    if "max_tokens" not in values:
        fields.append('"max_tokens": 3')
    if stop is not None:
        fields.append(f'"stop": {json.dumps(stop)}')
    if path == "/v1/chat/completions":
        fields.append('"model": "default", "messages": [{"role": "user", "content": "Hi"}]')
    else:
        fields.append('"model": "default", "prompt": "Hi"')
    body = "{" + ", ".join(fields) + "}"
    headers = {"Content-Type": "application/json"}
    survived(server, send(http, "POST", path, content=body, headers=headers, timeout=120))


# --- prompts --------------------------------------------------------------------------------
CONTROL_TOKENS = [
    "<start_of_turn>",
    "<end_of_turn>",
    "<eos>",
    "<bos>",
    "<pad>",
    "<unused24>",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<mask>",
    "[INST]",
    "{{ raise('x') }}",
    "{% for i in range(999999) %}",
    "\x00",
    "\ufffe",
    "\U0010ffff",
]
prompt_text = st.lists(
    st.one_of(st.sampled_from(CONTROL_TOKENS), st.text(max_size=20)), max_size=12
).map("".join)
broken_json_string = st.sampled_from(
    ['"\\ud800"', '"\\udfff x"', '"a\\u0000b"', '"\\uDBFF\\uDFFF"']
)


@BUDGET
@given(text=prompt_text, raw=broken_json_string, which=st.integers(0, 3))
def test_prompts_of_control_tokens_and_broken_unicode(
    server: ServerProcess, http: httpx.Client, text: str, raw: str, which: int
) -> None:
    headers = {"Content-Type": "application/json"}
    content = json.dumps(text)[:-1] + raw[1:] if which % 2 else json.dumps(text)
    user = '{"role": "user", "content": ' + content + "}"
    bodies = [
        ("/api/completions", '{"max_tokens": 3, "prompt": ' + content + "}"),
        (
            "/v1/chat/completions",
            '{"model": "default", "max_tokens": 3, "messages": [' + user + "]}",
        ),
        ("/api/search", '{"query": ' + content + "}"),
        ("/v1/embeddings", '{"model": "all-MiniLM-L6-v2", "input": [' + content + "]}"),
    ]
    path, body = bodies[which]
    survived(server, send(http, "POST", path, content=body, headers=headers))
    invalid_utf8 = body.encode()[:-2] + b"\xff\xfe\xc0\x80" + body.encode()[-2:]
    survived(server, send(http, "POST", path, content=invalid_utf8, headers=headers))


# --- structure, paths, headers --------------------------------------------------------------
@settings(max_examples=15, deadline=None, database=None)
@given(depth=st.integers(100, 20_000), opener=st.sampled_from(["[", '{"a":']))
def test_deeply_nested_json(
    server: ServerProcess, http: httpx.Client, depth: int, opener: str
) -> None:
    closer = "]" if opener == "[" else "}"
    body = '{"prompt": ' + opener * depth + "1" + closer * depth + "}"
    for path in ("/api/completions", "/v1/chat/completions", "/api/chat"):
        reply = send(http, "POST", path, content=body, headers={"Content-Type": "application/json"})
        survived(server, reply)


segment = st.one_of(
    st.text(max_size=8),
    st.sampled_from(
        ["..", ".", "%00", "%2e%2e", "%2f", "%ff", "%", "~", "\\", "static", "api", "v1"]
    ),
)


@settings(max_examples=60, deadline=None, database=None)
@given(
    parts=st.lists(segment, min_size=1, max_size=5),
    method=st.sampled_from(["GET", "HEAD", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]),
    header=st.sampled_from(
        [
            {},
            {"Host": "127.0.0.1:1@evil"},
            {"Content-Type": "multipart/form-data; boundary=" + "x" * 5000},
            {"Content-Type": "application/json; charset=utf-7"},
            {"Range": "bytes=99999999999-"},
            {"Accept": "text/event-stream"},
            {"Authorization": "Bearer " + "A" * 9000},
            {"X-CSRF-Token": "\x7f"},
            {"Cookie": "ragdesk_session=" + "%" * 200},
        ]
    ),
)
def test_odd_paths_and_headers(
    server: ServerProcess, http: httpx.Client, parts: list[str], method: str, header: dict[str, str]
) -> None:
    from urllib.parse import quote

    path = "/" + "/".join(p if p.startswith("%") else quote(p, safe=".~\\") for p in parts)
    survived(
        server, send(http, method, path, headers=header, content=b"" if method == "GET" else b"{}")
    )


def test_the_server_is_still_alive_after_all(server: ServerProcess) -> None:
    survived(server, httpx.get(f"{server.url}/health/live", timeout=10))
    assert Path(server.log_path).read_text(errors="replace").count("Traceback") == 0
