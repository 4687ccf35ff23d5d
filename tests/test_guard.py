"""The sampler guard: a request whose grammar llama.cpp cannot follow ends that request with
a clear error; the server process lives on (it used to die in ``std::terminate``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.engine.guard import GuardUnavailable, build_guard
from tests.server import ServerProcess, http

pytestmark = pytest.mark.real

NUL_GRAMMAR = "root ::= [\\x00]"  # no token's text starts with NUL: nothing is allowed
NUL_SCHEMA = {"type": "string", "const": "\u0000"}


def _alive(server: ServerProcess) -> None:
    assert server.process is not None and server.process.poll() is None, "the server died"
    assert http.get(f"{server.url}/health/live", timeout=10).status_code == 200


def test_an_unsatisfiable_grammar_is_a_400_and_the_server_lives(
    real_server: ServerProcess,
) -> None:
    for _ in range(3):
        reply = http.post(
            f"{real_server.url}/api/completions",
            json={"prompt": "x", "max_tokens": 5, "grammar": NUL_GRAMMAR},
            timeout=60,
        )
        assert reply.status_code == 400, reply.text
        assert "grammar" in reply.json()["error"]["detail"]
        _alive(real_server)


def test_the_same_through_a_v1_json_schema(real_server: ServerProcess) -> None:
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 5,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": NUL_SCHEMA},
        },
    }
    reply = http.post(f"{real_server.url}/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error"
    _alive(real_server)


def test_a_grammar_that_dead_ends_mid_stream_ends_only_that_stream(
    real_server: ServerProcess,
) -> None:
    """``"a"`` then NUL: the first token is allowed, the second can never be."""
    body = {"prompt": "x", "max_tokens": 8, "grammar": 'root ::= "a" [\\x00]', "stream": True}
    with http.stream("POST", f"{real_server.url}/api/completions", json=body, timeout=60) as r:
        events = r.read().decode()
    assert r.status_code == 200 and "event: error" in events and "grammar" in events
    reply = http.post(
        f"{real_server.url}/api/completions",
        json={"prompt": "The sky is", "max_tokens": 3, "temperature": 0},
        timeout=60,
    )
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] >= 1
    _alive(real_server)


def test_the_guard_builds_once_and_is_cached(tmp_path: Path) -> None:
    first = build_guard(tmp_path)
    assert first.is_file() and build_guard(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temp files left


def test_no_compiler_means_no_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(GuardUnavailable, match="could not run"):
        build_guard(tmp_path / "cache")
