"""One answering pipeline: the web chat, ``/api/chat`` and grounded ``/v1`` build the same
prompt from the same sources and cite the same passages, with the same viewer links."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from litestar.testing import TestClient

from app.chat.answering import NO_ANSWER, POINTED, Grounding, citation_of
from app.schemas import CitationOut
from llm.backend import FakeBackend
from retrieval.types import Hit
from tests.conftest import fake_model, sse_events, upload, wait_indexed
from tests.test_ui_routes import ask as ask_in_the_ui

QUESTION = "What is the meal allowance abroad?"
ANSWER = [" The allowance is 40 euros", " per day [1].", " Receipts go to finance [2]."]
HANDBOOK = b"# Travel\n\nThe meal allowance abroad is 40 euros per day.\n"
FINANCE = b"# Finance\n\nReceipts for the meal allowance go to finance within a month.\n"


def test_the_web_chat_the_api_and_grounded_v1_cite_alike(client: TestClient[Any]) -> None:
    for name, body in (("travel.md", HANDBOOK), ("finance.md", FINANCE)):
        wait_indexed(client, upload(client, (name, body)).json()["documents"][0]["id"])
    model = fake_model(client)

    model.enqueue(ANSWER)
    conversation = ask_in_the_ui(client, QUESTION)
    stored = client.app.state.services.conversations.messages(conversation)[-1]
    web = [{**msgspec.to_builtins(CitationOut.of(c))} for c in stored.citations]
    web_prompt = model.history[-1].prompt

    model.enqueue(ANSWER)
    events = sse_events(client.post("/api/chat", json={"message": QUESTION}).text)
    api = json.loads(events[-1][1])["citations"]
    api_prompt = model.history[-1].prompt

    model.enqueue(ANSWER)
    body = {"model": "rag", "messages": [{"role": "user", "content": QUESTION}]}
    reply = client.post("/v1/chat/completions", json=body).json()
    v1 = reply["choices"][0]["message"]["citations"]
    v1_prompt = model.history[-1].prompt

    assert len(web) == 2 and web == api == v1
    assert [c["number"] for c in web] == [1, 2]
    assert web_prompt == api_prompt == v1_prompt  # the same sources, numbered alike
    for citation in web:
        assert citation["url"] == (
            f"/documents/{citation['document_id']}/pages/{citation['page']}"
            f"?chunk={citation['chunk_id']}#passage"
        )


def test_a_passage_becomes_a_citation_in_one_place() -> None:
    hit = Hit(7, 3, "Travel", 2, 10, 50, "x" * 400, 0.9)
    citation = citation_of(hit, 4)
    assert (citation.chunk_id, citation.document_id, citation.page) == (7, 3, 2)
    assert citation.number == 4 and len(citation.snippet) == 300
    assert citation.url == "/documents/3/pages/2?chunk=7#passage"


def test_cite_attributes_bare_sentences_and_numbers_citations() -> None:
    hits = [
        Hit(1, 1, "Travel", 1, 0, 40, "The meal allowance abroad is 40 euros per day.", 0.9),
        Hit(2, 2, "Parking", 1, 0, 30, "Visitors park in the north car park.", 0.5),
    ]
    grounding = Grounding.build(FakeBackend("fake"), question=QUESTION, hits=hits, answer_tokens=64)
    assert [(c.number, c.chunk_id) for c in grounding.listed()] == [(1, 1), (2, 2)]
    answer, cited = grounding.cite(" The meal allowance abroad is 40 euros per day.")
    assert answer.endswith("[1]") or "[1]" in answer
    assert [(c.number, c.chunk_id) for c in cited] == [(1, 1)]


def test_an_answer_of_markers_only_quotes_the_cited_passage_nearest_the_question() -> None:
    text = "Staff eat in the canteen. The meal allowance abroad is 40 euros per day. Ask HR."
    hits = [
        Hit(1, 1, "Parking", 1, 0, 30, "Visitors park in the north car park.", 0.9),
        Hit(2, 2, "Travel", 1, 0, len(text), text, 0.8),
    ]
    grounding = Grounding.build(FakeBackend("fake"), question=QUESTION, hits=hits, answer_tokens=64)
    answer, cited, unsupported = grounding.checked(" [2]")
    assert answer == POINTED.format(
        quote="The meal allowance abroad is 40 euros per day.", number=2
    )
    assert [(c.number, c.chunk_id) for c in cited] == [(2, 2)] and unsupported == ()
    # A cited passage sharing no word with the question is not quoted: the plain message.
    assert grounding.checked("[1]") == (NO_ANSWER, (), ())
    assert grounding.checked(" ") == (NO_ANSWER, (), ())
