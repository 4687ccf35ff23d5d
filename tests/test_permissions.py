"""Two users, two collections: a canary string only in B's collection never reaches A
through search, chat (prompt, answer, citations), the document pages and downloads, the
document list or the OpenAI endpoint; conversations are their owners' own; keys are
scoped, read-only, revocable."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from litestar.testing import TestClient

from app.auth.sessions import COOKIE_NAME
from tests.conftest import add_key, add_user, fake_model, login, sse_events, wait_indexed

CANARY = "zanzibarquokka"
SHARED = "The canteen serves soup at noon on weekdays."


@pytest.fixture
def two_teams(client: TestClient[Any]) -> dict[str, Any]:
    """Collection A (ann may write), collection B (bob may write, holds the canary)."""
    services = client.app.state.services
    a, b = services.store.ensure_collection("team-a"), services.store.ensure_collection("team-b")
    ann, bob = add_user(client, "ann"), add_user(client, "bob")
    services.auth.members.add(a, ann.id, can_write=True)
    services.auth.members.add(b, bob.id, can_write=True)
    ids = {}
    for name, collection, text in (
        ("a.md", "team-a", f"# Canteen\n\n{SHARED}"),
        ("b.md", "team-b", f"# Canteen\n\n{SHARED} The secret soup is {CANARY}."),
    ):
        response = client.post(
            f"/api/documents?collection={collection}", files=[("file", (name, text.encode()))]
        )
        assert response.status_code == 201, response.text
        ids[name] = response.json()["documents"][0]["id"]
        assert wait_indexed(client, ids[name])["status"] == "indexed"
    return {"a_doc": ids["a.md"], "b_doc": ids["b.md"], "a": a, "b": b}


def sign_in_as(client: TestClient[Any], name: str) -> None:
    client.cookies.clear()
    client.headers.pop("Authorization", None)
    login(client, name)


def ask_api(client: TestClient[Any], message: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/api/chat", json={"message": message, **extra})
    assert response.status_code == 200, response.text
    done = [json.loads(d) for e, d in sse_events(response.text) if e == "done"]
    return dict(done[0])


def test_the_canary_never_reaches_the_other_team(
    client: TestClient[Any], two_teams: dict[str, Any]
) -> None:
    model = fake_model(client)
    sign_in_as(client, "ann")
    # search
    hits = client.post("/api/search", json={"query": f"soup {CANARY}", "k": 10}).json()["hits"]
    assert hits and all(h["document_id"] == two_teams["a_doc"] for h in hits)
    assert CANARY not in json.dumps(hits)
    # chat over the API: the prompt, the answer and the citations
    before = len(model.history)
    done = ask_api(client, "What is the secret soup?")  # B's passage would match best
    prompts = " ".join(r.prompt for r in model.history[before:])
    assert prompts and CANARY not in prompts
    assert CANARY not in json.dumps(done)
    assert {c["document_id"] for c in done["citations"]} <= {two_teams["a_doc"]}
    # chat in the UI
    turn = client.post("/ui/ask", data={"message": "Which secret soup is served?"})
    question_id = re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1)  # type: ignore[union-attr]
    stream = client.get(f"/ui/answers/{question_id}/stream").text
    assert CANARY not in stream and CANARY not in " ".join(r.prompt for r in model.history)
    # documents: list, status, pages, download, row partials
    listed = [d["id"] for d in client.get("/api/documents").json()["documents"]]
    assert listed == [two_teams["a_doc"]]
    b_doc = two_teams["b_doc"]
    for url in (
        f"/api/documents/{b_doc}",
        f"/documents/{b_doc}/pages/1",
        f"/documents/{b_doc}/original",
        f"/ui/documents/{b_doc}/row",
        f"/collections/{two_teams['b']}",
    ):
        response = client.get(url, follow_redirects=True)
        assert response.status_code == 404, url
        assert CANARY not in response.text, url
    assert client.delete(f"/api/documents/{b_doc}").status_code == 404
    assert "team-b" not in client.get("/").text
    # the OpenAI endpoint, with ann's key
    client.cookies.clear()
    client.headers["Authorization"] = f"Bearer {add_key(client, 'ann')}"
    reply = client.post(
        "/v1/chat/completions",
        json={"model": "default", "messages": [{"role": "user", "content": "secret soup?"}]},
    )
    assert reply.status_code == 200
    models = client.get("/v1/models")
    assert CANARY not in reply.text + models.text
    # The audit shows what ann was shown: team A's passages only.
    audit = client.app.state.services.auth.audit.shown()
    ann = client.app.state.services.auth.users.by_name("ann")
    assert audit and {row.document_id for row in audit if row.user_id == ann.id} == {
        two_teams["a_doc"]
    }


def test_bob_finds_his_canary_and_the_audit_says_so(
    client: TestClient[Any], two_teams: dict[str, Any]
) -> None:
    sign_in_as(client, "bob")
    hits = client.post("/api/search", json={"query": CANARY, "k": 5}).json()["hits"]
    assert any(CANARY in h["text"] for h in hits)
    before = len(fake_model(client).history)
    done = ask_api(client, "What is the secret soup?")
    assert CANARY in " ".join(r.prompt for r in fake_model(client).history[before:])
    bob = client.app.state.services.auth.users.by_name("bob")
    shown = client.app.state.services.auth.audit.shown(user_id=bob.id)
    assert {row.message_id for row in shown} == {done["message_id"]}
    assert two_teams["b_doc"] in {row.document_id for row in shown}


def test_other_peoples_conversations_are_404(
    client: TestClient[Any], two_teams: dict[str, Any]
) -> None:
    sign_in_as(client, "bob")
    done = ask_api(client, "When is soup served?")
    conversation_id, answer_id = done["conversation_id"], done["message_id"]
    turn = client.post("/ui/ask", data={"message": "soup?"})
    question_id = int(re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1))  # type: ignore[union-attr]
    sign_in_as(client, "ann")
    for url in (
        f"/c/{conversation_id}",
        f"/ui/answers/{question_id}/stream",
        f"/ui/messages/{answer_id}/sources",
        f"/ui/conversations/{conversation_id}/export",
    ):
        assert client.get(url).status_code == 404, url
    follow_up = client.post(
        "/api/chat", json={"message": "more?", "conversation_id": conversation_id}
    )
    assert follow_up.status_code == 404
    sneaky = client.post("/ui/ask", data={"message": "x", "conversation_id": str(conversation_id)})
    assert sneaky.status_code == 404
    assert client.post(f"/ui/questions/{question_id}/stop").status_code == 404
    assert "When is soup served" not in client.get("/").text


def test_keys_are_scoped_read_only_and_revocable(
    client: TestClient[Any], two_teams: dict[str, Any]
) -> None:
    auth = client.app.state.services.auth
    client.cookies.clear()
    scoped = add_key(client, "tester", collections={two_teams["a"]})  # an admin, narrowed
    headers = {"Authorization": f"Bearer {scoped}"}
    hits = client.post("/api/search", json={"query": CANARY, "k": 10}, headers=headers)
    assert CANARY not in hits.text
    assert client.get(f"/api/documents/{two_teams['b_doc']}", headers=headers).status_code == 404

    read_only = {"Authorization": f"Bearer {add_key(client, 'ann', read_only=True)}"}
    files = [("file", ("c.md", b"# More\n\nmore text"))]
    to_a = "/api/documents?collection=team-a"
    assert client.post(to_a, files=files, headers=read_only).status_code == 403
    a_doc = two_teams["a_doc"]
    assert client.delete(f"/api/documents/{a_doc}", headers=read_only).status_code == 403
    assert client.get(f"/api/documents/{a_doc}", headers=read_only).status_code == 200
    ann_key = add_key(client, "ann")
    ann = {"Authorization": f"Bearer {ann_key}"}
    upload_a = client.post("/api/documents?collection=team-a", files=files, headers=ann)
    assert upload_a.status_code == 201
    upload_b = client.post("/api/documents?collection=team-b", files=files, headers=ann)
    assert upload_b.status_code == 404  # a collection ann may not read does not exist for her
    upload_default = client.post("/api/documents", files=files, headers=ann)
    assert upload_default.status_code == 404  # not a member of the default collection

    key_id = auth.keys.authenticate(ann_key).key_id
    assert auth.keys.get(key_id).last_used_at is not None
    assert auth.keys.revoke(key_id)
    assert client.get("/api/documents", headers=ann).status_code == 401
    assert COOKIE_NAME not in client.cookies


def test_keys_never_reach_the_logs(
    client: TestClient[Any], two_teams: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    key = add_key(client, "ann")
    client.cookies.clear()
    with caplog.at_level("DEBUG"):
        client.get("/api/documents", headers={"Authorization": f"Bearer {key}"})
        client.get("/api/documents", headers={"Authorization": f"Bearer {key}x"})
    assert key not in caplog.text and key[:30] not in caplog.text
