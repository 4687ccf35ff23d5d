"""Holes found in review: restricted keys, the conversation list's limit, editing while
an answer is still retrieving."""

from __future__ import annotations

import re
import threading
from typing import Any

from litestar.testing import TestClient

from tests.conftest import add_key, add_user, login, upload, wait_indexed


def as_key(client: TestClient[Any], key: str) -> dict[str, str]:
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    return {"Authorization": f"Bearer {key}"}


def test_a_restricted_key_cannot_mint_keys_or_administer(client: TestClient[Any]) -> None:
    public = client.app.state.services.store.ensure_collection("public")
    scoped = add_key(client, read_only=True, collections=[public])
    full = add_key(client)  # the admin's own unrestricted key
    headers = as_key(client, scoped)
    minted = client.post("/account/keys", data={"name": "x"}, headers=headers)
    assert minted.status_code == 403 and "rdk_" not in minted.text
    assert client.post("/account/password", data={}, headers=headers).status_code == 403
    assert client.get("/api/keys", headers=headers).status_code == 403  # admin route
    # even an unrestricted key manages keys only through the API, not the account page
    assert (
        client.post("/account/keys", data={"name": "y"}, headers=as_key(client, full)).status_code
        == 403
    )
    assert client.get("/api/keys", headers=as_key(client, full)).status_code == 200


def test_a_collection_limited_key_sees_none_of_the_users_conversations(
    client: TestClient[Any],
) -> None:
    public = client.app.state.services.store.ensure_collection("public")
    assert client.post("/ui/ask", data={"message": "secret hr question"}).status_code == 200
    conversation = client.app.state.services.conversations.recent()[0]
    headers = as_key(client, add_key(client, collections=[public]))
    listing = client.get("/ui/conversations", headers=headers)
    assert "secret hr question" not in listing.text
    assert client.get(f"/c/{conversation.id}", headers=headers).status_code == 404
    assert client.get(f"/api/conversations/{conversation.id}", headers=headers).status_code == 404


def test_the_conversation_list_is_filtered_before_its_limit(client: TestClient[Any]) -> None:
    services = client.app.state.services
    add_user(client, "ann")
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    login(client, "ann")
    assert client.post("/ui/ask", data={"message": "ann-own-question"}).status_code == 200
    tester = services.auth.users.by_name("tester")
    for i in range(201):  # newer conversations of someone else
        other = services.conversations.create(f"other {i}")
        services.auth.ownership.claim(other.id, tester.id)
    assert "ann-own-question" in client.get("/ui/conversations").text


def test_editing_a_question_still_being_answered_is_a_conflict(client: TestClient[Any]) -> None:
    created = upload(client, ("a.md", b"# Office\n\nThe office opens at 8:00 on weekdays.\n"))
    wait_indexed(client, created.json()["documents"][0]["id"])
    services = client.app.state.services
    chat = services.require_chat()
    search = chat.retriever.search

    retrieving, release = threading.Event(), threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        retrieving.set()  # the answer is still retrieving: no completion is running yet
        release.wait(30)
        return search(*args, **kwargs)

    chat.retriever.search = slow  # type: ignore[method-assign]
    assert client.post("/ui/ask", data={"message": "when does the office open?"}).status_code == 200
    conversation = services.conversations.recent()[0]
    question = services.conversations.messages(conversation.id)[-1]
    streamed: list[str] = []
    reader = threading.Thread(
        target=lambda: streamed.append(client.get(f"/ui/answers/{question.id}/stream").text)
    )
    reader.start()
    assert retrieving.wait(30)
    edit = client.post(f"/ui/messages/{question.id}/edit", data={"message": "edited?"})
    release.set()
    reader.join(30)
    assert edit.status_code == 409
    assert "Server error" not in streamed[0]
    assert re.search(r"event: done", streamed[0])
