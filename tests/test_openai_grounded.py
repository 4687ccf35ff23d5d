"""Grounded answers through ``/v1/chat/completions`` with the fake backend: ``rag`` models
and the ``ragdesk`` body field, numbered sources in the prompt, citations, scoping."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from litestar.testing import TestClient

from app.chat.answering import NOTHING_FOUND
from tests.conftest import add_key, fake_model, upload, wait_for, wait_indexed
from tests.test_openai import assert_openai_error, chunks
from tests.test_permissions import CANARY, SHARED, sign_in_as, two_teams  # noqa: F401

HANDBOOK = b"# Travel\n\nThe meal allowance abroad is 40 euros per day. Receipts go to finance.\n"


@pytest.fixture
def api(client: TestClient[Any]) -> TestClient[Any]:
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    document = upload(client, ("travel.md", HANDBOOK)).json()["documents"][0]
    assert wait_indexed(client, document["id"])["status"] == "indexed"
    client.headers["Authorization"] = f"Bearer {add_key(client)}"
    return client


def ask(api: TestClient[Any], question: str, **body: Any) -> Any:
    messages = body.pop("messages", [])
    payload = {"model": "rag", "messages": [*messages, {"role": "user", "content": question}]}
    return api.post("/v1/chat/completions", json={**payload, **body})


def test_rag_model_answers_from_numbered_sources_with_citations(api: TestClient[Any]) -> None:
    model = fake_model(api)
    model.enqueue([" The allowance is 40 euros", " per day [1]."])
    history = [
        {"role": "system", "content": "ignored"},
        {"role": "user", "content": "Hello?"},
        {"role": "assistant", "content": "Hi."},
    ]
    response = ask(api, "What is the meal allowance abroad?", messages=history)
    assert response.status_code == 200, response.text
    body = response.json()
    message = body["choices"][0]["message"]
    assert message["content"] == "The allowance is 40 euros per day [1]."
    assert body["model"] == "fake" and body["id"].startswith("chatcmpl-")
    [citation] = message["citations"]
    assert citation["number"] == 1 and citation["title"] and citation["page"] == 1
    assert "40 euros" in citation["snippet"] and citation["end"] > citation["start"]
    assert citation["url"].startswith(
        f"/documents/{citation['document_id']}/pages/1?chunk={citation['chunk_id']}"
    )
    prompt = model.history[-1].prompt
    assert "[1] " in prompt and "meal allowance abroad is 40 euros" in prompt
    assert prompt.rstrip().endswith("Question: What is the meal allowance abroad?\nAnswer:")
    assert "Question: Hello?\nAnswer:\nHi." in prompt  # history: a turn without sources
    assert "ignored" not in prompt
    # The audit holds what the model was shown, under the response id.
    shown = api.app.state.services.auth.audit.shown_by_request(body["id"])
    assert {chunk for chunk, _, _ in shown} == {citation["chunk_id"]}


def test_streamed_grounded_answer_ends_with_citations(api: TestClient[Any]) -> None:
    fake_model(api).enqueue([" 40 euros", " a day [1]."])
    response = ask(
        api,
        "meal allowance abroad?",
        model="default",
        ragdesk={"collections": ["default"]},
        stream=True,
        stream_options={"include_usage": True},
    )
    received = chunks(response)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in received if c["choices"])
    assert text == "40 euros a day [1]."
    last = [c for c in received if c["choices"] and c["choices"][0]["finish_reason"]][-1]
    assert [c["number"] for c in last["citations"]] == [1]
    assert received[-1]["usage"]["completion_tokens"] == 2


def test_no_relevant_source_answers_without_the_model(api: TestClient[Any]) -> None:
    before = len(fake_model(api).history)
    response = ask(api, "zzzz qqqq xxxx")
    assert response.status_code == 200
    message = response.json()["choices"][0]["message"]
    assert message == {
        "content": NOTHING_FOUND,
        "role": "assistant",
        "refusal": None,
        "citations": [],
        "unsupported": [],
        "grounded": False,
        "query": "zzzz qqqq xxxx",
    }
    streamed = chunks(ask(api, "zzzz qqqq xxxx", stream=True))
    assert NOTHING_FOUND in json.dumps(streamed) and streamed[-1]["citations"] == []
    assert streamed[-1]["grounded"] is False and streamed[-1]["unsupported"] == []
    assert len(fake_model(api).history) == before


def test_bad_grounded_requests_are_openai_4xx(api: TestClient[Any]) -> None:
    assert_openai_error(ask(api, "x", model="rag:nope"), 404, "model")
    unknown = ask(api, "x", ragdesk={"collections": ["nope"]})
    assert_openai_error(unknown, 404, "ragdesk.collections")
    assert_openai_error(ask(api, "x", ragdesk={"collections": []}), 400)
    assert_openai_error(ask(api, "x", ragdesk={"collections": "default"}), 400)
    trailing = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    reply = api.post("/v1/chat/completions", json={"model": "rag", "messages": trailing})
    assert_openai_error(reply, 400, "messages")
    assert_openai_error(ask(api, "x" * 5000), 400, "messages")


def test_models_list_rag_per_readable_collection(api: TestClient[Any]) -> None:
    ids = [m["id"] for m in api.get("/v1/models").json()["data"]]
    assert ids[-2:] == ["rag", "rag:default"]
    assert api.get("/v1/models/rag:default").json()["id"] == "rag:default"


def test_the_canary_never_reaches_a_grounded_v1_answer(
    client: TestClient[Any],
    two_teams: dict[str, Any],  # noqa: F811
) -> None:
    model = fake_model(client)
    sign_in_as(client, "ann")
    client.cookies.clear()
    client.headers["Authorization"] = f"Bearer {add_key(client, 'ann')}"
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert "rag:team-a" in ids and "rag:team-b" not in ids
    assert_openai_error(ask(client, "secret soup?", model="rag:team-b"), 404, "model")
    b_field = ask(client, "secret soup?", ragdesk={"collections": ["team-a", "team-b"]})
    assert_openai_error(b_field, 404, "ragdesk.collections")
    for body in ({"model": "rag"}, {"model": "default", "ragdesk": {"collections": ["team-a"]}}):
        before = len(model.history)
        model.enqueue([" Soup [1] [2]."])
        reply = ask(client, "What is the secret soup?", **body)
        assert reply.status_code == 200, reply.text
        prompts = " ".join(r.prompt for r in model.history[before:])
        assert SHARED.split()[1] in prompts and CANARY not in prompts
        citations = reply.json()["choices"][0]["message"]["citations"]
        assert citations and {c["document_id"] for c in citations} == {two_teams["a_doc"]}
        shown = client.app.state.services.auth.audit.shown_by_request(reply.json()["id"])
        assert {document for _, document, _ in shown} == {two_teams["a_doc"]}


def test_each_citation_field_comes_from_its_own_hit_field() -> None:
    """Ids that differ, so a document id can never pass for a chunk id."""
    from app.chat.answering import citation_of
    from app.schemas import CitationOut
    from retrieval.types import Hit

    hit = Hit(chunk_id=41, document_id=7, title="Handbook", page=3, start=10, end=52,
              text="The canteen opens at noon.", score=0.9)  # fmt: skip
    assert msgspec.to_builtins(CitationOut.of(citation_of(hit, 2))) == {
        "number": 2,
        "chunk_id": 41,
        "document_id": 7,
        "title": "Handbook",
        "page": 3,
        "start": 10,
        "end": 52,
        "snippet": "The canteen opens at noon.",
        "url": "/documents/7/pages/3?chunk=41#passage",
        "boxes": [],  # not a PDF
        "label": "",  # a page, not a slide or a sheet
    }


def _example_words() -> list[str]:
    from llm.prompt import EXAMPLE

    return [word + " " for word in EXAMPLE.answer.split()]


def _streamed(response: Any) -> tuple[list[str], dict[str, Any]]:
    """The content deltas of a streamed answer, and its last chunk (with citations)."""
    received = chunks(response)
    deltas = [c["choices"][0]["delta"].get("content") for c in received if c["choices"]]
    ends = [c for c in received if c["choices"] and c["choices"][0]["finish_reason"]]
    return [d for d in deltas if d], ends[-1]


def test_n_the_prompts_worked_example_never_comes_out_of_grounded_v1(api: TestClient[Any]) -> None:
    """#30: the web chat withholds the worked example's answer ("The office opens at 8:00
    on weekdays [1].") when a document asks the model for it; grounded /v1 let it out,
    cited to the document's own passage [1]. Chat's guard now runs here too."""
    from llm.prompt import EXAMPLE

    model = fake_model(api)
    question = "What is the meal allowance abroad?"
    answer = ["The allowance is 40 euros a day [1]. ", *_example_words(), "More after it."]
    model.enqueue(answer)
    reply = ask(api, question)
    assert EXAMPLE.answer in model.history[-1].prompt  # the prompt shows it
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["message"]["content"] == "The allowance is 40 euros a day [1]."
    assert choice["finish_reason"] == "stop"  # cut there, as chat cuts it
    model.enqueue(answer)
    deltas, last = _streamed(ask(api, question, stream=True))
    assert "".join(deltas).strip() == "The allowance is 40 euros a day [1]."
    assert not any("office" in delta.lower() for delta in deltas)  # never streamed, even held
    assert [c["number"] for c in last["citations"]] == [1]
    model.enqueue(_example_words())  # the example alone
    alone = ask(api, question).json()["choices"][0]["message"]
    assert "office" not in alone["content"].lower() and alone["citations"] == []
    model.enqueue(_example_words())
    deltas, last = _streamed(ask(api, question, stream=True))
    assert "".join(deltas).strip() == "" and last["citations"] == []


def test_the_worked_example_without_its_full_stop_or_cut_short_stays_out_of_v1(
    api: TestClient[Any],
) -> None:
    model = fake_model(api)
    question = "What is the meal allowance abroad?"
    no_stop = [*_example_words()[:-1], "[1]"]  # the example, its full stop left off
    for cut in (no_stop, _example_words()[:5]):  # ... or cut by max_tokens mid-way
        for stream in (False, True):
            model.enqueue(["40 euros a day [1]. ", *cut])
            reply = ask(api, question, stream=stream)
            if stream:
                text = "".join(_streamed(reply)[0]).strip()
            else:
                text = reply.json()["choices"][0]["message"]["content"]
            assert text == "40 euros a day [1].", (cut, stream)


def test_a_sentence_that_only_begins_like_the_worked_example_streams_whole(
    api: TestClient[Any],
) -> None:
    """Held back only while it could still be the example: then streamed, nothing lost."""
    model = fake_model(api)
    model.enqueue(["The", " office", " opens", " at", " 9:00", " for", " 40 euros", " [1]."])
    deltas, last = _streamed(ask(api, "meal allowance abroad?", stream=True))
    assert "".join(deltas) == "The office opens at 9:00 for 40 euros [1]."
    assert deltas[-1] == " [1]." and len(deltas) >= 3  # released when it diverged, then live
    assert [c["number"] for c in last["citations"]] == [1]
