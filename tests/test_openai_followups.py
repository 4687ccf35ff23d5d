"""Grounded ``/v1`` follow-ups read as chat's do: a follow-up that refers back to the last
answer, sent back as it was given by the same user, reads the documents that answer
cited. Anything else (an edited answer, another user's, an expired one) is searched for as
before. Fake embedder and generator, as in test_openai_grounded."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import add_key, add_user, fake_model, wait_for, wait_indexed
from tests.test_openai import chunks

NORWAY = b"# Norway\n\nNorway's only active volcano is Beerenberg, on the island of Jan Mayen.\n"
VOLCANOES = b"# Volcanoes\n\nHekla is an active volcano of Iceland, 1,491 metres high.\n"
ASKED = "Which is Norway's only active volcano?"
FOLLOW_UP = "How high is it?"
AS_SEARCHED = ["Norway", "Volcanoes"]  # the follow-up's query ranks Norway's passage first
CITED_FIRST = ["Volcanoes"]  # the answer cited Volcanoes [2]: the follow-up reads only it


@pytest.fixture
def api(client: TestClient[Any]) -> TestClient[Any]:
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    client.app.state.services.store.ensure_collection("iceland")
    for name, text, collection in (
        ("norway.md", NORWAY, "default"),
        ("volcanoes.md", VOLCANOES, "iceland"),
    ):
        response = client.post(
            f"/api/documents?collection={collection}", files=[("file", (name, text))]
        )
        document = response.json()["documents"][0]
        assert wait_indexed(client, document["id"])["status"] == "indexed"
    client.cookies.clear()  # the key alone says who asks
    client.headers.pop("X-CSRF-Token", None)
    client.headers["Authorization"] = f"Bearer {add_key(client)}"
    return client


def post(api: TestClient[Any], messages: list[dict[str, str]], **body: Any) -> Any:
    payload = {"model": "rag", "messages": messages, **body}
    response = api.post("/v1/chat/completions", json=payload)
    assert response.status_code == 200, response.text
    return response


def first_turn(api: TestClient[Any], *, stream: bool = False) -> str:
    """Ask the first question; the fake model answers from the second source (Volcanoes).
    The answer's text as the client has it."""
    fake_model(api).enqueue(["Hekla", " is", " one", " [2]."])
    response = post(api, [{"role": "user", "content": ASKED}], stream=stream)
    if stream:
        received = chunks(response)
        parts = [c["choices"][0]["delta"].get("content") or "" for c in received if c["choices"]]
        return "".join(parts)
    message = response.json()["choices"][0]["message"]
    assert [c["title"] for c in message["citations"]] == ["Volcanoes"]
    return str(message["content"])


def follow_up(api: TestClient[Any], answer: str, question: str = FOLLOW_UP) -> list[str]:
    """Send the conversation back with the follow-up: the titles of the sources listed for
    it in the prompt, in order (the citations returned number them the same way)."""
    model = fake_model(api)
    model.enqueue(["It is 1,491 metres high [1]."])
    messages = [
        {"role": "user", "content": ASKED},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": question},
    ]
    # Streamed: the citations keep the numbers the model wrote (a whole answer re-points
    # "[1]" to the source that supports the sentence best).
    before = len(model.history)
    last = chunks(post(api, messages, stream=True))[-1]
    assert len(model.history) == before + 1  # sources were found and the model asked
    assert last["query"].startswith(question)  # the earlier question's subject is carried
    this_turn = model.history[-1].prompt.rsplit("Sources:", 1)[1]
    listed = re.findall(r"^\[\d+\] (\w+) \(page", this_turn, flags=re.MULTILINE)
    assert [c["title"] for c in last["citations"]] == listed[:1]
    return listed


def test_a_follow_up_reads_the_documents_the_answer_it_sends_back_cited_first(
    api: TestClient[Any],
) -> None:
    answer = first_turn(api)
    assert answer == "Hekla is one [2]."
    assert follow_up(api, answer) == CITED_FIRST
    assert follow_up(api, f"\n {answer} \n") == CITED_FIRST  # surrounding space is no edit


def test_a_streamed_answer_is_remembered_as_the_client_put_it_together(
    api: TestClient[Any],
) -> None:
    answer = first_turn(api, stream=True)
    assert follow_up(api, answer) == CITED_FIRST


def test_an_edited_answer_or_a_question_not_referring_back_searches_as_before(
    api: TestClient[Any],
) -> None:
    answer = first_turn(api)
    assert follow_up(api, answer.replace("one", "the one")) == AS_SEARCHED
    assert follow_up(api, answer, "What about Beerenberg's height?") == AS_SEARCHED


def test_another_users_identical_answer_is_not_found(api: TestClient[Any]) -> None:
    answer = first_turn(api)
    add_user(api, "other", "admin")  # reads the same documents
    api.headers["Authorization"] = f"Bearer {add_key(api, 'other')}"
    assert follow_up(api, answer) == AS_SEARCHED


def test_a_follow_up_after_the_answer_expired_searches_as_before(
    api: TestClient[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.chat.cited_answers as cited_answers

    answer = first_turn(api)
    later = time.time() + 7 * cited_answers.DAY_S + 60  # the default keeps 7 days
    monkeypatch.setattr(cited_answers, "time", SimpleNamespace(time=lambda: later))
    assert follow_up(api, answer) == AS_SEARCHED


def test_a_cited_document_the_caller_may_no_longer_read_is_not_brought_back(
    api: TestClient[Any],
) -> None:
    """What was cited only reorders what the caller's search found: a key of the same
    user limited to the default collection never sees the Iceland collection's passage."""
    answer = first_turn(api)
    services = api.app.state.services
    scoped = add_key(api, collections={services.collection_id})
    api.headers["Authorization"] = f"Bearer {scoped}"
    assert follow_up(api, answer) == ["Norway"]
