"""The OpenAI-compatible ``/v1`` API with the fake backend: shapes, parameters, errors."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from litestar.testing import TestClient

from llm.channel import Completion
from llm.chat_format import ChatTemplate
from llm.params import ContextOverflow, Finished, Overloaded, TextDelta, Usage
from tests.conftest import add_key, fake_model, fake_settings, signed_in, sse_events, wait_for

USER_HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def api(client: TestClient[Any]) -> TestClient[Any]:
    """Authenticated by an API key, as API clients are (``api.headers``, ``api_key(api)``)."""
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    client.headers["Authorization"] = f"Bearer {add_key(client)}"
    return client


def api_key(api: TestClient[Any]) -> str:
    return str(api.headers["Authorization"]).removeprefix("Bearer ")


def chunks(response: Any) -> list[Any]:
    assert response.headers["content-type"].startswith("text/event-stream")
    data = [body for _, body in sse_events(response.text)]
    assert data[-1] == "[DONE]"
    return [json.loads(body) for body in data[:-1]]


def assert_openai_error(response: Any, status: int, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error")
    if param is not None:
        assert error["param"] == param
    return error


def test_models_lists_models_aliases_and_the_embedder(api: TestClient[Any]) -> None:
    body = api.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [
        "fake",
        "default",
        "hashing-256",
        "rag",
        "rag:default",
    ]
    assert all(m["object"] == "model" and m["owned_by"] == "ragdesk" for m in body["data"])
    assert api.get("/v1/models/default").json()["id"] == "default"
    assert_openai_error(api.get("/v1/models/gpt-4"), 404)
    assert_openai_error(api.get("/v1/no-such-endpoint"), 404)
    assert_openai_error(api.get("/v1/chat/completions"), 405)


def test_chat_completion_shape_usage_and_transcript_prompt(api: TestClient[Any]) -> None:
    fake_model(api).enqueue([" Hello", " there"])
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "how"}, {"type": "text", "text": "are you"}],
        },
    ]
    payload = {"model": "default", "messages": messages, "stop": "END", "max_tokens": 7}
    response = api.post("/v1/chat/completions", json={**payload, "seed": -1, "temperature": 0})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == "fake"  # the model that served, not the alias asked for
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello there", "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    usage = body["usage"]
    assert usage["completion_tokens"] == 2 and usage["prompt_tokens_details"] == {
        "cached_tokens": 0
    }
    assert usage["total_tokens"] == usage["prompt_tokens"] + 2
    request = fake_model(api).history[-1]
    assert (
        request.prompt == "Be brief.\n\nUser: hi\nAssistant: Hello.\nUser: how\nare you\nAssistant:"
    )
    assert request.params.stop == ("\nUser:", "\nSystem:", "END")
    assert request.params.max_tokens == 7 and request.params.temperature == 0
    assert request.params.seed == 2**32 - 2 and request.grammar is None


def test_max_completion_tokens_wins_and_nulls_mean_defaults(api: TestClient[Any]) -> None:
    fake_model(api).enqueue(["a"])
    api.post(
        "/v1/chat/completions",
        json={"messages": USER_HI, "max_completion_tokens": 3, "max_tokens": 9},
    )
    assert fake_model(api).history[-1].params.max_tokens == 3
    fake_model(api).enqueue(["a"])
    nulls = dict.fromkeys(["temperature", "top_p", "n", "stream", "stop", "seed", "max_tokens"])
    assert api.post("/v1/chat/completions", json={"messages": USER_HI, **nulls}).status_code == 200
    params = fake_model(api).history[-1].params
    assert params.max_tokens is None  # as much as the context leaves, up to the cap
    assert (
        params.temperature == 1.0
        and params.top_p == 1.0
        and params.stop == ("\nUser:", "\nSystem:")
    )


def test_streamed_chat_sends_role_deltas_finish_and_usage(api: TestClient[Any]) -> None:
    fake_model(api).enqueue([" a", "b", "c"])
    payload = {"messages": USER_HI, "stream": True, "max_tokens": 2}
    response = api.post(
        "/v1/chat/completions", json={**payload, "stream_options": {"include_usage": True}}
    )
    received = chunks(response)
    assert {c["object"] for c in received} == {"chat.completion.chunk"}
    assert len({c["id"] for c in received}) == 1
    assert received[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"].get("content") for c in received[1:3]]
    assert deltas == ["a", "b"]  # the transcript's space after "Assistant:" is not content
    assert received[3]["choices"][0] == {
        "index": 0,
        "delta": {},
        "finish_reason": "length",
        "logprobs": None,
    }
    assert received[4]["choices"] == [] and received[4]["usage"]["completion_tokens"] == 2
    assert received[4]["model"] == "fake"
    fake_model(api).enqueue(["x"])
    plain = chunks(api.post("/v1/chat/completions", json={"messages": USER_HI, "stream": True}))
    assert plain[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"] for c in plain)  # no usage chunk unless asked


def test_the_models_own_chat_template_is_used(api: TestClient[Any]) -> None:
    backend = fake_model(api)
    template = (
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    backend.chat_template = ChatTemplate(template, bos_token="<s>", eos_token="</s>")
    backend.enqueue(["ok"])
    messages = [{"role": "developer", "content": "rules"}, {"role": "user", "content": "x </s>"}]
    response = api.post("/v1/chat/completions", json={"messages": messages})
    assert response.json()["choices"][0]["message"]["content"] == "ok"
    request = backend.history[-1]
    # BOS is the tokenizer's to add; a control token in a message is made inert.
    assert request.prompt == "<system>rules</s><user>x <\u2060/s></s><assistant>"
    assert request.params.stop == ("</s>",)
    backend.chat_template = ChatTemplate(
        "{{ raise_exception('roles must alternate') }}", bos_token="", eos_token=""
    )
    refused = api.post("/v1/chat/completions", json={"messages": USER_HI})
    assert "roles must alternate" in assert_openai_error(refused, 400)["message"]


def test_response_format_becomes_a_grammar(api: TestClient[Any]) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    formats = [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    ]
    for response_format in formats:
        fake_model(api).enqueue(["{}"])
        payload = {"messages": USER_HI, "response_format": response_format}
        assert api.post("/v1/chat/completions", json=payload).status_code == 200
        grammar = fake_model(api).history[-1].grammar
        assert grammar is not None and "root" in grammar
    fake_model(api).enqueue(["x"])
    payload = {"messages": USER_HI, "response_format": {"type": "text"}}
    api.post("/v1/chat/completions", json=payload)
    assert fake_model(api).history[-1].grammar is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": USER_HI, "n": 2}, "n"),
        ({"messages": []}, "messages"),
        ({}, None),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content",
        ),
        ({"messages": USER_HI, "temperature": 5}, "temperature"),
        ({"messages": USER_HI, "top_p": 0}, "top_p"),
        ({"messages": USER_HI, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER_HI, "stop": [""]}, None),
        ({"messages": USER_HI, "logprobs": True}, "logprobs"),
        ({"messages": USER_HI, "tools": [{"type": "function"}]}, "tools"),
        ({"messages": USER_HI, "response_format": {"type": "xml"}}, "response_format.type"),
        ({"messages": USER_HI, "response_format": {"type": "json_schema"}}, None),
        (
            {
                "messages": USER_HI,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"type": "nonsense"}},
                },
            },
            "response_format.json_schema.schema",
        ),
    ],
)
def test_bad_chat_requests_are_400_in_openai_shape(
    api: TestClient[Any], body: dict[str, Any], param: str | None
) -> None:
    assert_openai_error(api.post("/v1/chat/completions", json=body), 400, param)
    assert fake_model(api).history == []  # refused before the model saw anything


def test_malformed_json_and_unknown_model(api: TestClient[Any]) -> None:
    malformed = api.post(
        "/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert_openai_error(malformed, 400)
    unknown = api.post("/v1/chat/completions", json={"messages": USER_HI, "model": "gpt-4"})
    assert assert_openai_error(unknown, 404, "model")["code"] == "model_not_found"


def test_engine_refusals_come_before_the_stream(api: TestClient[Any], monkeypatch: Any) -> None:
    backend = fake_model(api)

    def overloaded(_: Any) -> Any:
        raise Overloaded("too many requests are waiting", 3)

    monkeypatch.setattr(backend, "submit", overloaded)
    payload = {"messages": USER_HI, "stream": True}
    busy = api.post("/v1/chat/completions", json=payload)
    assert_openai_error(busy, 503)
    assert busy.headers["retry-after"] == "3"

    def too_long(_: Any) -> Any:
        raise ContextOverflow(5000, 100, 4096)

    monkeypatch.setattr(backend, "submit", too_long)
    long = api.post("/v1/completions", json={"prompt": "x", "stream": True})
    error = assert_openai_error(long, 400)
    assert error["code"] == "context_length_exceeded" and "5000" in error["message"]


def test_a_failure_mid_stream_is_an_error_chunk(api: TestClient[Any], monkeypatch: Any) -> None:
    def failing(_: Any) -> Completion:
        completion = Completion()
        completion.push(TextDelta("partial"))
        completion.push(Finished("error", Usage(1, 0, 1), "fake", "llama_decode failed (-1)"))
        return completion

    monkeypatch.setattr(fake_model(api), "submit", failing)
    payload = {"messages": USER_HI, "stream": True}
    events = [
        json.loads(data)
        for _, data in sse_events(api.post("/v1/chat/completions", json=payload).text)
    ]
    assert events[1]["choices"][0]["delta"]["content"] == "partial"
    assert "llama_decode failed" in events[-1]["error"]["message"]
    whole = api.post("/v1/chat/completions", json={"messages": USER_HI})
    assert_openai_error(whole, 500)


def test_text_completions_plain_and_streamed(api: TestClient[Any]) -> None:
    fake_model(api).enqueue(["one", " two"])
    body = api.post("/v1/completions", json={"prompt": ["Count:"], "model": "fake"}).json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["choices"][0]["text"] == "one two" and body["choices"][0]["finish_reason"] == "stop"
    request = fake_model(api).history[-1]
    assert request.prompt == "Count:" and request.params.max_tokens == 16  # OpenAI's default
    fake_model(api).enqueue(["a", "b", "c"])
    payload = {
        "prompt": "x",
        "stream": True,
        "max_tokens": 2,
        "stream_options": {"include_usage": True},
    }
    received = chunks(api.post("/v1/completions", json=payload))
    assert [c["choices"][0]["text"] for c in received[:2]] == ["a", "b"]
    assert received[2]["choices"][0]["finish_reason"] == "length"
    assert received[3]["choices"] == [] and received[3]["usage"]["total_tokens"] == 3
    for bad in (
        {"prompt": ["a", "b"]},
        {"prompt": [1, 2]},
        {"prompt": "x", "echo": True},
        {"prompt": "x", "n": 3},
    ):
        assert_openai_error(api.post("/v1/completions", json=bad), 400)


def test_embeddings_as_floats_and_base64(api: TestClient[Any]) -> None:
    embedder = api.app.state.services.require_retrieval().embedder
    expected = embedder.embed_batch(["first text", "second"])
    floats = api.post(
        "/v1/embeddings", json={"input": ["first text", "second"], "model": "hashing-256"}
    )
    body = floats.json()
    assert body["object"] == "list" and body["model"] == "hashing-256"
    assert [row["index"] for row in body["data"]] == [0, 1]
    assert np.allclose([row["embedding"] for row in body["data"]], expected)
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    packed = api.post("/v1/embeddings", json={"input": "second", "encoding_format": "base64"})
    vector = np.frombuffer(base64.b64decode(packed.json()["data"][0]["embedding"]), dtype="<f4")
    assert vector.shape == (256,) and np.allclose(vector, expected[1])


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"input": ""}, 400),
        ({"input": []}, 400),
        ({"input": ["ok", "  "]}, 400),
        ({"input": [[1, 2, 3]]}, 400),
        ({"input": ["x"] * 2049}, 400),
        ({"input": "word " * 9000}, 400),
        ({"input": "x" * 100_001}, 400),
        ({"input": "x", "dimensions": 64}, 400),
        ({"input": "x", "encoding_format": "int8"}, 400),
        ({"input": "x", "model": "text-embedding-3-small"}, 404),
        ({}, 400),
    ],
)
def test_bad_embedding_requests(api: TestClient[Any], body: dict[str, Any], status: int) -> None:
    assert_openai_error(api.post("/v1/embeddings", json=body), status)


def test_oversize_body_is_413_in_openai_shape(tmp_path: Path) -> None:
    settings = fake_settings(tmp_path / "data", max_upload_bytes=10_000)
    with signed_in(settings) as small:
        small.app.state.services.wait_until_loaded(30)
        response = small.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 20_000}]}
        )
        assert assert_openai_error(response, 413)["code"] == "request_too_large"


def test_the_openai_sdk_works_against_the_app(api: TestClient[Any]) -> None:
    """The official client, its transport being the in-process test client."""
    import openai

    sdk = openai.OpenAI(
        base_url=f"{api.base_url}/v1", api_key=api_key(api), http_client=api, max_retries=0
    )
    fake_model(api).enqueue(["Hi", "!"])
    reply = sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "x"}]
    )
    assert reply.choices[0].message.content == "Hi!" and reply.usage is not None
    assert reply.usage.prompt_tokens_details is not None
    fake_model(api).enqueue(["a", "b"])
    stream = sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "x"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "ab"
    vectors = sdk.embeddings.create(model="hashing-256", input=["a b", "c"])  # base64 by default
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == 256
    assert [m.id for m in sdk.models.list()] == [
        "fake",
        "default",
        "hashing-256",
        "rag",
        "rag:default",
    ]
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="n=2"):
        sdk.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "x"}], n=2
        )
