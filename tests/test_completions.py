"""``POST /api/completions`` and ``/metrics`` with the fake backend."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import TestClient

from llm.params import ContextOverflow, Overloaded
from tests.conftest import fake_model, sse_events, wait_for


def ready(client: TestClient[Any]) -> None:
    wait_for(lambda: client.get("/health/ready").status_code == 200)


def test_completion_reports_text_model_and_usage(client: TestClient[Any]) -> None:
    ready(client)
    fake_model(client).enqueue(["Hello", " there", "!"])
    response = client.post("/api/completions", json={"prompt": "Say hi", "max_tokens": 8})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["text"] == "Hello there!" and body["model"] == "fake"
    assert body["usage"]["completion_tokens"] == 3 and body["usage"]["prompt_tokens"] == 2
    assert body["finish_reason"] == "stop"


def test_streamed_completion_sends_tokens_then_done(client: TestClient[Any]) -> None:
    ready(client)
    fake_model(client).enqueue(["a", "b", "c", "d"])
    response = client.post(
        "/api/completions", json={"prompt": "x", "max_tokens": 2, "stream": True, "stop": ["zz"]}
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert [name for name, _ in events] == ["token", "token", "done"]
    assert '"finish_reason":"length"' in events[-1][1] and '"model":"fake"' in events[-1][1]
    request = fake_model(client).history[-1]
    assert request.params.stop == ("zz",) and request.params.max_tokens == 2


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": ""},
        {"prompt": "x", "temperature": 9},
        {"prompt": "x", "top_p": 0},
        {"prompt": "x", "max_tokens": 0},
        {"prompt": "x", "seed": -1},
        {"prompt": "x", "stop": [""]},
        {"prompt": "x", "unknown": 1},
        {"prompt": 5},
    ],
)
def test_absurd_parameters_are_unprocessable(client: TestClient[Any], body: Any) -> None:
    ready(client)
    assert client.post("/api/completions", json=body).status_code == 422


def test_refusals_keep_their_status(client: TestClient[Any], monkeypatch: Any) -> None:
    ready(client)
    backend = fake_model(client)

    def overloaded(_: Any) -> Any:
        raise Overloaded("too many requests are waiting", 3)

    monkeypatch.setattr(backend, "submit", overloaded)
    busy = client.post("/api/completions", json={"prompt": "x", "stream": True})
    assert busy.status_code == 503 and busy.headers["retry-after"] == "3"

    def too_long(_: Any) -> Any:
        raise ContextOverflow(5000, 100, 4096)

    monkeypatch.setattr(backend, "submit", too_long)
    long = client.post("/api/completions", json={"prompt": "x"})
    assert long.status_code == 400 and "5000" in long.json()["error"]["detail"]
    unknown = client.post("/api/completions", json={"prompt": "x", "model": "nope"})
    assert unknown.status_code == 404


def test_grammar_and_schema_are_validated(client: TestClient[Any]) -> None:
    ready(client)
    both = {"prompt": "x", "grammar": 'root ::= "a"', "json_schema": {"type": "object"}}
    assert client.post("/api/completions", json=both).status_code == 400
    bad = {"prompt": "x", "json_schema": {"type": "nonsense"}}
    response = client.post("/api/completions", json=bad)
    assert response.status_code == 400 and "schema" in response.json()["error"]["detail"]


def test_metrics_are_prometheus_text_labelled_by_model(client: TestClient[Any]) -> None:
    ready(client)
    client.post("/api/completions", json={"prompt": "x", "max_tokens": 2})
    text = client.get("/metrics").text
    assert 'ragdesk_requests_running{model="fake"} 0.0' in text
    assert "ragdesk_requests_waiting" in text and "ragdesk_kv_cells_used" in text
    assert "ragdesk_time_to_first_token_seconds_bucket" in text
