"""``/v1`` through the official ``openai`` client and plain httpx, against a real server
with the bundled models. Generations are few and short: CPU time is scarce."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import openai
import pytest

from tests.server import ServerProcess, http

pytestmark = pytest.mark.real

GEMMA = "gemma-3-270m-q4_k_m"
ASK = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What colour is the sky on a clear day?"},
]


@pytest.fixture
def sdk(real_server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{real_server.url}/v1", api_key=real_server.api_key, max_retries=0, timeout=120
    )


def test_models_and_chat_completion(sdk: openai.OpenAI) -> None:
    assert {m.id for m in sdk.models.list()} >= {GEMMA, "default", "all-MiniLM-L6-v2"}
    reply = sdk.chat.completions.create(model="default", messages=ASK, max_tokens=8, temperature=0)
    assert reply.model == GEMMA  # the model that served the alias
    choice = reply.choices[0]
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 8
    assert reply.usage.prompt_tokens > 10
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.cached_tokens is not None


def test_streamed_chat_with_usage(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model=GEMMA,
        messages=ASK,
        max_tokens=6,
        temperature=0,
        seed=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    received = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in received if c.choices)
    finishes = [c.choices[0].finish_reason for c in received if c.choices]
    assert text.strip() and finishes[-1] in ("stop", "length")
    assert received[-1].choices == [] and received[-1].usage is not None
    assert received[-1].usage.completion_tokens <= 6 and received[-1].model == GEMMA


def test_text_completions_plain_and_streamed(sdk: openai.OpenAI) -> None:
    plain = sdk.completions.create(
        model=GEMMA, prompt="The capital of France is", max_tokens=4, temperature=0
    )
    assert plain.choices[0].text and plain.choices[0].finish_reason in ("stop", "length")
    assert plain.usage is not None and plain.usage.completion_tokens <= 4
    stream = sdk.completions.create(
        model=GEMMA, prompt="The capital of France is", max_tokens=4, temperature=0, stream=True
    )
    streamed = "".join(c.choices[0].text for c in stream if c.choices)
    assert streamed == plain.choices[0].text  # greedy: the same words either way


def test_json_schema_output_parses_and_matches(sdk: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "colour": {"enum": ["red", "green", "blue"]},
            "name": {"type": "string", "maxLength": 12},
        },
        "required": ["colour", "name"],
        "additionalProperties": False,
    }
    reply = sdk.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Describe the sky as JSON."}],
        max_tokens=48,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "sky", "schema": schema}},
    )
    assert reply.choices[0].finish_reason == "stop", reply.choices[0].message.content
    value = json.loads(reply.choices[0].message.content or "")
    assert set(value) == {"colour", "name"}
    assert value["colour"] in ("red", "green", "blue")
    assert isinstance(value["name"], str) and len(value["name"]) <= 12


def test_embeddings_float_and_base64_agree(sdk: openai.OpenAI, real_server: ServerProcess) -> None:
    texts = ["How do I upload a file?", "Uploading documents"]
    packed = sdk.embeddings.create(model="all-MiniLM-L6-v2", input=texts)  # SDK asks base64
    floats = sdk.embeddings.create(model="all-MiniLM-L6-v2", input=texts, encoding_format="float")
    assert packed.model == "all-MiniLM-L6-v2" and packed.usage.prompt_tokens > 4
    a, b = np.array(packed.data[0].embedding), np.array(floats.data[0].embedding)
    assert a.shape == (384,) and np.allclose(a, b, atol=1e-6)
    assert abs(np.linalg.norm(a) - 1) < 1e-3
    plain = http.post(
        f"{real_server.url}/v1/embeddings", json={"input": "x", "model": "default"}, timeout=60
    )
    assert plain.status_code == 200 and len(plain.json()["data"][0]["embedding"]) == 384


def test_sdk_raises_the_expected_exceptions(sdk: openai.OpenAI) -> None:
    one = [{"role": "user", "content": "x"}]
    with pytest.raises(openai.NotFoundError) as unknown:
        sdk.chat.completions.create(model="gpt-4o", messages=one)
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as many:
        sdk.chat.completions.create(model="default", messages=one, n=2)
    assert many.value.param == "n"
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model="default", messages=one, response_format={"type": "xml"})  # type: ignore[arg-type,misc]
    with pytest.raises(openai.BadRequestError, match="schema"):
        sdk.chat.completions.create(
            model="default",
            messages=one,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "nonsense"}},
            },
        )
    long = [{"role": "user", "content": "word " * 6000}]
    with pytest.raises(openai.BadRequestError) as overflow:
        sdk.chat.completions.create(model="default", messages=long, max_tokens=8)
    assert overflow.value.code == "context_length_exceeded" and "4096" in overflow.value.message
    with pytest.raises(openai.BadRequestError):
        sdk.completions.create(model="default", prompt="word " * 6000, max_tokens=8, stream=True)
    with pytest.raises(openai.BadRequestError):
        sdk.embeddings.create(model="all-MiniLM-L6-v2", input="")


def test_plain_httpx_stream(real_server: ServerProcess) -> None:
    payload: dict[str, Any] = {"messages": ASK, "max_tokens": 4, "temperature": 0, "stream": True}
    with http.stream(
        "POST", f"{real_server.url}/v1/chat/completions", json=payload, timeout=120
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    error = http.post(f"{real_server.url}/v1/chat/completions", json={"messages": []}, timeout=30)
    assert error.status_code == 400 and set(error.json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }


def test_grounded_answer_through_the_sdk(sdk: openai.OpenAI, real_server: ServerProcess) -> None:
    """``rag:<collection>``: the answer comes with citations pointing at the document."""
    text = b"# Bicycle policy\n\nStaff bicycles are parked in the basement garage, level minus two."
    files = [("file", ("bicycles.md", text))]
    uploaded = http.post(f"{real_server.url}/api/documents", files=files, timeout=60)
    assert uploaded.status_code == 201, uploaded.text
    document_id = uploaded.json()["documents"][0]["id"]
    for _ in range(600):
        status = http.get(f"{real_server.url}/api/documents/{document_id}").json()["status"]
        if status in ("indexed", "failed"):
            break
        time.sleep(0.1)
    assert status == "indexed"
    assert "rag:default" in {m.id for m in sdk.models.list()}
    question = [{"role": "user", "content": "Where are staff bicycles parked?"}]
    reply = sdk.chat.completions.create(
        model="rag:default", messages=question, max_tokens=24, temperature=0
    )
    message = reply.model_dump()["choices"][0]["message"]
    assert reply.model == GEMMA and message["content"].strip()
    # Extra fields survive the SDK's models: the citations of the [n] markers it wrote.
    assert isinstance(message["citations"], list)
    for citation in message["citations"]:
        assert citation["url"].startswith(f"/documents/{citation['document_id']}/pages/")
    stream = sdk.chat.completions.create(
        model="default",
        messages=question,
        max_tokens=16,
        temperature=0,
        stream=True,
        extra_body={"ragdesk": {"collections": ["default"]}},
    )
    received = [c.model_dump() for c in stream]
    assert "citations" in received[-1] and received[-1]["choices"][0]["finish_reason"]
