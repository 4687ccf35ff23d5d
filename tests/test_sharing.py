"""Sharing a conversation read-only with users and groups, over HTTP: share, list and
revoke (API and the UI's dialog), the reader's side, a reader never writing, and the
no-leak probe: a member of group A never sees a passage of group B's collection in a
conversation shared with them, while a member of group B does."""

from __future__ import annotations

import html
import json
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from app.auth.share_audit import ShareAudit
from app.chat.answering import POINTED
from app.chat.records import Citation, Message
from app.chat.redaction import HIDDEN_TITLE, redact
from tests.conftest import add_key, add_user, fake_model, wait_indexed
from tests.test_permissions import sign_in_as

CANARY = "zanzibarquokka"  # only in group B's collection
A_TEXT = "The canteen serves soup at noon on weekdays."


@pytest.fixture
def teams(client: TestClient[Any]) -> dict[str, Any]:
    """Collections team-a and team-b, read through groups group-a and group-b. ``olga``
    is in both groups (she may read both), ``ann`` in group-a, ``bob`` in group-b, ``carl``
    in none. Olga's conversation cites a passage of each collection."""
    services = client.app.state.services
    ids: dict[str, Any] = {}
    for name, text in (("a", A_TEXT), ("b", f"{A_TEXT} The secret soup is {CANARY}.")):
        services.store.ensure_collection(f"team-{name}")
        response = client.post(
            f"/api/documents?collection=team-{name}",
            files=[("file", (f"{name}.md", f"# Canteen\n\n{text}".encode()))],
        )
        assert response.status_code == 201, response.text
        ids[f"{name}_doc"] = response.json()["documents"][0]["id"]
        assert wait_indexed(client, ids[f"{name}_doc"])["status"] == "indexed"
    for user in ("olga", "ann", "bob", "carl"):
        ids[user] = add_user(client, user).id
    for team, members in (("a", ("olga", "ann")), ("b", ("olga", "bob"))):
        group = client.post("/api/groups", json={"name": f"group-{team}"}).json()
        granted = client.post(
            f"/api/groups/{group['id']}/collections", json={"collection": f"team-{team}"}
        )
        assert granted.is_success, granted.text
        for member in members:
            added = client.post(f"/api/groups/{group['id']}/members", json={"user": member})
            assert added.is_success, added.text
    assert services.store.get_document(ids["b_doc"]) is not None

    sign_in_as(client, "olga")
    fake_model(client).enqueue(["The canteen serves soup [1] and more soup [2]."])
    done = client.post("/api/chat", json={"message": "What soup does the canteen serve?"})
    assert done.status_code == 200, done.text
    conversation_id = client.get("/api/conversations").json()["conversations"][0]["id"]
    detail = client.get(f"/api/conversations/{conversation_id}").json()
    cited = {c["document_id"] for m in detail["messages"] for c in m["citations"]}
    assert cited == {ids["a_doc"], ids["b_doc"]}, detail  # the probe needs both cited
    assert CANARY in json.dumps(detail)  # olga may read B: its passage is in her view
    ids["conversation"] = conversation_id
    return ids


def share(client: TestClient[Any], conversation_id: int, **names: list[str]) -> Any:
    return client.post(f"/api/conversations/{conversation_id}/shares", json=names)


def test_share_list_and_revoke_through_the_api(
    client: TestClient[Any], teams: dict[str, Any]
) -> None:
    conversation = teams["conversation"]
    made = share(client, conversation, users=["ann"], groups=["group-b"])
    assert made.status_code == 201, made.text
    listed = client.get(f"/api/conversations/{conversation}/shares").json()["shares"]
    assert [(s["kind"], s["name"]) for s in listed] == [("user", "ann"), ("group", "group-b")]
    assert {s["url"] for s in listed} == {f"/shared/{conversation}"}
    again = share(client, conversation, users=["ann"]).json()["shares"]
    assert [s["id"] for s in again] == [s["id"] for s in listed]  # sharing again: no change

    sign_in_as(client, "ann")
    mine = client.get("/api/shared").json()["conversations"]
    assert [(c["conversation_id"], c["owner"], c["via"]) for c in mine] == [
        (conversation, "olga", ["you"])
    ]
    assert client.get(f"/api/shared/{conversation}").status_code == 200
    sign_in_as(client, "bob")
    assert client.get("/api/shared").json()["conversations"][0]["via"] == ["group-b"]
    sign_in_as(client, "carl")
    assert client.get("/api/shared").json()["conversations"] == []
    assert client.get(f"/api/shared/{conversation}").status_code == 404

    sign_in_as(client, "olga")
    ann_share = next(s for s in listed if s["name"] == "ann")
    revoked = client.delete(f"/api/conversations/{conversation}/shares/{ann_share['id']}")
    assert revoked.status_code == 204
    assert (
        client.delete(f"/api/conversations/{conversation}/shares/{ann_share['id']}").status_code
        == 404
    )
    sign_in_as(client, "ann")
    assert client.get("/api/shared").json()["conversations"] == []
    assert client.get(f"/api/shared/{conversation}").status_code == 404
    assert client.get(f"/shared/{conversation}").status_code == 404

    audit = ShareAudit(client.app.state.services.db).events(conversation)
    assert [(e.action, e.target_kind, e.target_name, e.actor_id) for e in audit] == [
        ("share", "user", "ann", teams["olga"]),
        ("share", "group", "group-b", teams["olga"]),
        ("revoke", "user", "ann", teams["olga"]),
    ]


def test_a_member_of_group_a_never_sees_a_passage_of_group_b(
    client: TestClient[Any], teams: dict[str, Any]
) -> None:
    conversation = teams["conversation"]
    assert share(client, conversation, groups=["group-a", "group-b"]).status_code == 201

    sign_in_as(client, "ann")  # group A: reads team-a only
    api = client.get(f"/api/shared/{conversation}")
    page = client.get(f"/shared/{conversation}")
    sidebar = client.get("/ui/shared")
    for response in (api, page, sidebar):
        assert response.status_code == 200, response.text
        assert CANARY not in response.text
    citations = [c for m in api.json()["messages"] for c in m["citations"]]
    hidden = [c for c in citations if c["document_id"] == 0]
    shown = [c for c in citations if c["document_id"] != 0]
    assert [c["document_id"] for c in shown] == [teams["a_doc"]]
    assert shown[0]["url"].startswith(f"/documents/{teams['a_doc']}/pages/")
    assert len(hidden) == 1
    assert hidden[0] | {"number": 0} == {
        "number": 0, "chunk_id": 0, "document_id": 0, "title": HIDDEN_TITLE, "page": 0,
        "start": 0, "end": 0, "snippet": "", "url": "", "boxes": [], "label": "",
    }  # fmt: skip
    assert all(m["query"] is None and m["scope"] is None for m in api.json()["messages"])
    assert HIDDEN_TITLE in page.text and f"/documents/{teams['b_doc']}" not in page.text
    assert f"/documents/{teams['a_doc']}/pages/" in page.text
    # the passage itself stays out of reach, whatever link a reader makes up
    assert client.get(f"/documents/{teams['b_doc']}/pages/1").status_code == 404
    # the audit records what ann was shown: A's passage, never B's
    shown_to_ann = ShareAudit(client.app.state.services.db).shown(teams["ann"])
    assert {document for _, _, document in shown_to_ann} == {teams["a_doc"]}

    sign_in_as(client, "bob")  # group B: reads team-b, so B's passage is his to see
    api = client.get(f"/api/shared/{conversation}")
    page = client.get(f"/shared/{conversation}")
    assert CANARY in api.text and CANARY in page.text
    documents = {c["document_id"] for m in api.json()["messages"] for c in m["citations"]}
    assert documents == {teams["b_doc"], 0}
    assert A_TEXT not in json.dumps(
        [c for m in api.json()["messages"] for c in m["citations"] if c["document_id"] == 0]
    )


def test_a_reader_never_gets_write_rights(client: TestClient[Any], teams: dict[str, Any]) -> None:
    conversation = teams["conversation"]
    assert share(client, conversation, users=["ann"]).status_code == 201
    detail = client.get(f"/api/conversations/{conversation}").json()
    question, answer = (m["id"] for m in detail["messages"])

    sign_in_as(client, "ann")
    writes = [
        ("post", f"/ui/conversations/{conversation}/rename", {"data": {"title": "mine"}}),
        ("post", f"/ui/conversations/{conversation}/pin", {"data": {"pinned": "1"}}),
        ("post", f"/ui/conversations/{conversation}/scope", {"data": {"scope": ""}}),
        ("delete", f"/ui/conversations/{conversation}", {}),
        ("delete", f"/api/conversations/{conversation}", {}),
        ("post", f"/ui/messages/{answer}/regenerate", {}),
        ("post", f"/ui/messages/{question}/edit", {"data": {"message": "mine now"}}),
        ("post", f"/ui/questions/{question}/versions/1", {}),
        ("post", f"/ui/messages/{answer}/feedback", {"data": {"rating": "up"}}),
        ("post", f"/api/answers/{answer}/feedback", {"json": {"rating": "up"}}),
        ("post", "/api/chat", {"json": {"message": "more?", "conversation_id": conversation}}),
        ("post", "/ui/ask", {"data": {"message": "more?", "conversation_id": str(conversation)}}),
        ("post", f"/api/conversations/{conversation}/shares", {"json": {"users": ["carl"]}}),
        ("post", f"/ui/conversations/{conversation}/shares", {"data": {"name": "carl"}}),
        ("delete", f"/api/conversations/{conversation}/shares/1", {}),
    ]
    for method, url, body in writes:
        response = getattr(client, method)(url, **body)
        assert response.status_code in (403, 404), (url, response.status_code, response.text)
    for url in (
        f"/c/{conversation}",
        f"/api/conversations/{conversation}",
        f"/ui/conversations/{conversation}/export",
        f"/ui/messages/{answer}/sources",
        f"/api/conversations/{conversation}/shares",
    ):
        assert client.get(url).status_code == 404, url

    page = client.get(f"/shared/{conversation}").text
    for control in ('id="ask-form"', "regenerate", "feedback", "data-edit", "pin-button"):
        assert control not in page, control
    assert "Read-only" in page and "Shared by olga" in page

    sign_in_as(client, "olga")
    after = client.get(f"/api/conversations/{conversation}").json()
    assert after["title"] == detail["title"] and len(after["messages"]) == 2
    listed = client.get(f"/api/conversations/{conversation}/shares").json()["shares"]
    assert [s["name"] for s in listed] == ["ann"]


def test_deleting_the_conversation_removes_its_shares(
    client: TestClient[Any], teams: dict[str, Any]
) -> None:
    conversation = teams["conversation"]
    assert share(client, conversation, users=["ann"], groups=["group-b"]).status_code == 201
    assert client.delete(f"/api/conversations/{conversation}").status_code == 204
    rows = client.app.state.services.db.read().execute(
        "SELECT COUNT(*) FROM conversation_shares WHERE conversation_id = ?", [conversation]
    )
    assert rows.fetchone()[0] == 0
    for reader in ("ann", "bob"):
        sign_in_as(client, reader)
        assert client.get("/api/shared").json()["conversations"] == []
        assert client.get(f"/shared/{conversation}").status_code == 404


def test_bad_input_is_a_clear_4xx(client: TestClient[Any], teams: dict[str, Any]) -> None:
    conversation = teams["conversation"]
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({}, 422, "at least one"),
        ({"users": []}, 422, "at least one"),
        ({"users": ["nobody"]}, 422, "no user named 'nobody'"),
        ({"groups": ["no-such-group"]}, 422, "no group named"),
        ({"users": ["olga"]}, 422, "yourself"),
        ({"users": ["ann", "nobody"]}, 422, "nobody"),  # all or nothing
        ({"users": [""]}, 422, "name the user"),
        ({"users": ["bad name!"]}, 422, "letters, digits"),
        ({"users": ["x" * 65]}, 422, "length <= 64"),
        ({"users": ["ann"] * 51}, 422, "length <= 50"),
        ({"users": "ann"}, 422, "users"),
        ({"users": [7]}, 422, "users[0]"),
        ({"people": ["ann"]}, 422, "people"),
    ]
    for body, status, says in cases:
        response = share(client, conversation, **body)
        assert response.status_code == status, (body, response.text)
        assert says in response.text, (body, response.text)
    client.app.state.services.auth.users.set_disabled(teams["carl"], True)
    disabled = share(client, conversation, users=["carl"])
    assert disabled.status_code == 422 and "disabled" in disabled.text
    assert client.get(f"/api/conversations/{conversation}/shares").json()["shares"] == []
    not_json = client.post(
        f"/api/conversations/{conversation}/shares",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert 400 <= not_json.status_code < 500

    for url in (
        "/api/conversations/999999/shares",
        "/api/conversations/0/shares",
        "/api/conversations/99999999999999999999/shares",
        "/api/conversations/abc/shares",
    ):
        response = client.post(url, json={"users": ["ann"]})
        assert 400 <= response.status_code < 500, (url, response.status_code)
    for url in (
        "/api/shared/999999",
        "/api/shared/0",
        "/shared/abc",
        "/shared/99999999999999999999",
    ):
        assert 400 <= client.get(url).status_code < 500, url
    for url in (
        f"/api/conversations/{conversation}/shares/999999",
        f"/api/conversations/{conversation}/shares/0",
        f"/ui/conversations/{conversation}/shares/999999",
    ):
        assert 400 <= client.delete(url).status_code < 500, url

    # the dialog's form: the same checks, said in the dialog
    form = f"/ui/conversations/{conversation}/shares"
    for data, says in (
        ({"kind": "user", "name": "nobody"}, "no user named"),
        ({"kind": "team", "name": "ann"}, "'user' or a 'group'"),
        ({"kind": "user", "name": ""}, "name the user"),
        ({"kind": "user", "name": "olga"}, "yourself"),
        ({"kind": "group", "name": "y" * 300}, "at most"),
    ):
        response = client.post(form, data=data, headers={"HX-Request": "true"})
        assert response.status_code == 422, (data, response.text)
        assert says in html.unescape(response.text), (data, response.text)
        assert 'class="error"' in response.text  # the partial the dialog shows

    # someone else's conversation: as if it did not exist
    ann_share = share(client, conversation, users=["ann"]).json()["shares"][0]
    sign_in_as(client, "bob")
    assert share(client, conversation, users=["carl"]).status_code == 404
    fake_model(client).enqueue(["Bob's own answer."])
    client.post("/api/chat", json={"message": "Bob asks"})
    bobs = client.get("/api/conversations").json()["conversations"][0]["id"]
    # a share of olga's conversation, revoked through bob's: no such share
    assert client.delete(f"/api/conversations/{bobs}/shares/{ann_share['id']}").status_code == 404
    assert client.delete(f"/ui/conversations/{bobs}/shares/{ann_share['id']}").status_code == 404
    assert client.delete(f"/ui/shares/{ann_share['id']}").status_code == 403  # admins only
    sign_in_as(client, "ann")
    assert client.get(f"/api/shared/{conversation}").status_code == 200  # still shared


def test_admins_see_every_share_but_not_the_conversation(
    client: TestClient[Any], teams: dict[str, Any]
) -> None:
    conversation = teams["conversation"]
    made = share(client, conversation, users=["ann"]).json()["shares"][0]
    assert client.get("/api/shares").status_code == 403  # olga is staff
    sign_in_as(client, "tester")  # an admin
    every = client.get("/api/shares").json()["shares"]
    assert [(s["title"], s["owner"], s["kind"], s["name"]) for s in every] == [
        ("What soup does the canteen serve?", "olga", "user", "ann")
    ]
    assert client.get(f"/api/shared/{conversation}").status_code == 404  # not shared with them
    page = client.get("/shared")
    assert page.status_code == 200 and 'id="every-share-table"' in page.text
    assert client.delete(f"/api/shares/{made['id']}").status_code == 204
    sign_in_as(client, "ann")
    assert client.get("/api/shared").json()["conversations"] == []
    assert 'id="every-share-table"' not in client.get("/shared").text
    assert ShareAudit(client.app.state.services.db).events(conversation)[-1].action == "revoke"


def test_a_restricted_key_sees_nothing_shared(
    client: TestClient[Any], teams: dict[str, Any]
) -> None:
    conversation = teams["conversation"]
    share(client, conversation, users=["ann"])
    client.cookies.clear()
    for scope in ({"read_only": True}, {}):
        client.headers["Authorization"] = f"Bearer {add_key(client, 'ann', **scope)}"
        listed = client.get("/api/shared").json()["conversations"]
        fetched = client.get(f"/api/shared/{conversation}")
        if scope:
            assert listed == [] and fetched.status_code == 404
        else:  # a full key is its user
            assert [c["conversation_id"] for c in listed] == [conversation]
            assert fetched.status_code == 200 and CANARY not in fetched.text
    client.headers.pop("Authorization")


def test_the_share_dialog_shares_lists_and_revokes(
    client: TestClient[Any], teams: dict[str, Any]
) -> None:
    conversation = teams["conversation"]
    header = client.get(f"/c/{conversation}").text
    assert 'id="share-button"' in header and 'id="share-dialog"' in header
    panel = client.get(f"/ui/conversations/{conversation}/shares").text
    assert "Not shared with anyone" in panel
    assert '<option value="ann"' in panel and '<option value="olga"' not in panel
    assert '<option value="group-a"' in panel
    added = client.post(
        f"/ui/conversations/{conversation}/shares", data={"kind": "group", "name": "group-a"}
    )
    assert added.status_code == 200
    assert "Shared with group group-a" in added.text and 'class="share-row"' in added.text
    share_id = client.get(f"/api/conversations/{conversation}/shares").json()["shares"][0]["id"]
    mine = client.get("/shared").text
    assert 'id="shared-by-me-table"' in mine and "group-a" in mine

    sign_in_as(client, "ann")
    sidebar = client.get(
        "/ui/shared", headers={"HX-Current-URL": f"http://x/shared/{conversation}"}
    )
    assert f'href="/shared/{conversation}" aria-current="page"' in sidebar.text
    assert "olga" in sidebar.text
    assert f'href="/shared/{conversation}"' in client.get("/shared").text

    sign_in_as(client, "olga")
    revoked = client.delete(f"/ui/conversations/{conversation}/shares/{share_id}")
    assert revoked.status_code == 200 and "Not shared with anyone" in revoked.text
    sign_in_as(client, "ann")
    assert "Nothing is shared with you" in client.get("/ui/shared").text


def test_the_owner_sees_the_shared_view_as_readers_would(
    client: TestClient[Any], teams: dict[str, Any]
) -> None:
    conversation = teams["conversation"]
    page = client.get(f"/shared/{conversation}")
    assert page.status_code == 200 and "Open to continue" in page.text
    assert CANARY in page.text  # olga reads both collections


def test_a_share_to_a_group_follows_its_membership_and_its_rights(
    client: TestClient[Any], teams: dict[str, Any]
) -> None:
    """Leaving the group ends the reading; a collection given to the group later opens
    its passages in the conversation already shared (what may be read is decided now)."""
    conversation = teams["conversation"]
    assert share(client, conversation, groups=["group-a"]).status_code == 201
    sign_in_as(client, "ann")
    assert CANARY not in client.get(f"/api/shared/{conversation}").text

    sign_in_as(client, "tester")  # an admin gives group A team B too
    groups = {g["name"]: g["id"] for g in client.get("/api/groups").json()["groups"]}
    given = client.post(
        f"/api/groups/{groups['group-a']}/collections", json={"collection": "team-b"}
    )
    assert given.is_success, given.text
    sign_in_as(client, "ann")
    assert CANARY in client.get(f"/api/shared/{conversation}").text

    sign_in_as(client, "tester")  # ann leaves group A
    left = client.delete(f"/api/groups/{groups['group-a']}/members/{teams['ann']}")
    assert left.status_code == 204
    sign_in_as(client, "ann")
    assert client.get("/api/shared").json()["conversations"] == []
    assert client.get(f"/api/shared/{conversation}").status_code == 404


def test_an_answer_that_only_quotes_a_hidden_passage_hides_the_quote() -> None:
    """Review of #28: an answer the model gave as a bare "[1]" is shown as a quote of the
    passage (POINTED); a reader who may not open it saw the passage in the quote."""
    secret = "The merger with Bluebird closes in May."
    cited = Citation(1, 11, 7, "Board minutes", 2, 0, 40, secret)
    answer = Message(
        id=5,
        conversation_id=1,
        role="assistant",
        content=POINTED.format(quote=secret, number=1),
        citations=(cited,),
        created_at=0.0,
    )
    hidden_view = redact(answer, openable=set())
    assert secret not in hidden_view.content and "[1]" in hidden_view.content
    assert hidden_view.citations[0].title == HIDDEN_TITLE
    assert redact(answer, openable={7}).content == answer.content  # a reader who may open it
    plain = replace(answer, content=f"It closes in May [1]. {secret}")  # not a quote: as written
    assert redact(plain, openable=set()).content == plain.content
