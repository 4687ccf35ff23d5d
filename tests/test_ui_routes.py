"""The desktop UI's htmx routes: conversations (list, rename, pin, delete, export,
regenerate, edit and resend) and the collection view (table, re-ingest, download)."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from typing import Any

from litestar.testing import TestClient

from app.chat.records import Conversation
from app.web.ui_context import group_conversations
from tests.conftest import add_user, fake_model, login, sse_events, upload, wait_indexed
from tests.test_pages import HOSTILE, injected_markup

HX = {"HX-Request": "true"}


def ask(client: TestClient[Any], text: str, conversation_id: int | None = None) -> int:
    """Ask and stream the answer to the end; returns the conversation id."""
    data = {"message": text, "conversation_id": str(conversation_id or "")}
    turn = client.post("/ui/ask", data=data)
    assert turn.status_code == 200, turn.text
    question_id = int(re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1))  # type: ignore[union-attr]
    assert sse_events(client.get(f"/ui/answers/{question_id}/stream").text)[-1][0] == "done"
    return conversation_id or int(turn.headers["hx-push-url"].rsplit("/", 1)[1])


def indexed_document(client: TestClient[Any], name: str = "canteen.md") -> int:
    body = b"# Canteen\n\nThe canteen opens at noon daily."
    document_id = int(upload(client, (name, body)).json()["documents"][0]["id"])
    wait_indexed(client, document_id)
    return document_id


def first_question_id(client: TestClient[Any], conversation: int) -> int:
    page = client.get(f"/c/{conversation}").text
    return int(re.search(r'id="message-(\d+)"', page).group(1))  # type: ignore[union-attr]


def canteen_conversation(client: TestClient[Any], follow_up: str) -> int:
    """A conversation of two answered turns about the indexed canteen note."""
    indexed_document(client)
    model = fake_model(client)
    model.enqueue(["Noon [1]."])
    conversation = ask(client, "When does the canteen open?")
    model.enqueue(["Soup [1]."])
    ask(client, follow_up, conversation)
    return conversation


def test_conversations_are_grouped_by_day_with_pinned_first() -> None:
    now = datetime(2026, 11, 29, 15, 0).timestamp()

    def conversation(n: int, days_ago: float) -> Conversation:
        when = (datetime.fromtimestamp(now) - timedelta(days=days_ago)).timestamp()
        return Conversation(n, f"c{n}", when, when)

    listing = [
        (conversation(1, 30), True),
        (conversation(2, 0), False),
        (conversation(3, 1), False),
        (conversation(4, 5), False),
        (conversation(5, 40), False),
    ]
    groups = group_conversations(listing, now)
    assert [(g.label, [c.id for c, _ in g.items]) for g in groups] == [
        ("Pinned", [1]),
        ("Today", [2]),
        ("Yesterday", [3]),
        ("Previous 7 days", [4]),
        ("Older", [5]),
    ]


def test_the_shell_has_menus_panes_and_no_inline_style(client: TestClient[Any]) -> None:
    html = client.get("/").text
    for landmark in (
        'id="menu-file"',
        'id="menu-view"',
        'id="menu-help"',
        'id="sidebar-splitter"',
        'id="inspector-splitter"',
        'id="conversation-filter"',
        'id="connection"',
        'role="separator"',
    ):
        assert landmark in html, landmark
    indexed_document(client)
    conversation = ask(client, "When does the canteen open?")
    for url in ("/", f"/c/{conversation}", "/collections/1", "/documents/1/pages/1"):
        page = client.get(url).text
        assert " style=" not in page and "<style" not in page, url
        assert not re.search(r"<script(?![^>]*\bsrc=)", page), url


def test_rename_pin_filter_and_hostile_titles(client: TestClient[Any]) -> None:
    indexed_document(client)
    first = ask(client, "When does the canteen open?")
    second = ask(client, "Is there soup?")
    renamed = client.post(f"/ui/conversations/{first}/rename", data={"title": f"  {HOSTILE} "})
    assert renamed.status_code == 200
    assert injected_markup(renamed.text) == []
    assert "&lt;img" in renamed.text and 'hx-swap-oob="true"' in renamed.text
    page = client.get(f"/c/{first}").text
    assert injected_markup(page) == [] and "&lt;img" in page

    pinned = client.post(f"/ui/conversations/{first}/pin", data={"pinned": "1"})
    assert pinned.status_code == 200 and 'aria-pressed="true"' in pinned.text
    listing = client.get("/ui/conversations").text
    assert listing.index("Pinned") < listing.index(f"/c/{first}") < listing.index(f"/c/{second}")
    filtered = client.get("/ui/conversations", params={"q": "soup"}).text
    assert f"/c/{second}" in filtered and f"/c/{first}" not in filtered
    assert "No conversation matches" in client.get("/ui/conversations?q=%25_nothing").text
    unpinned = client.post(f"/ui/conversations/{first}/pin", data={"pinned": "0"})
    assert 'aria-pressed="false"' in unpinned.text
    assert "Pinned" not in client.get("/ui/conversations").text


def test_bad_conversation_input_is_a_clear_4xx(client: TestClient[Any]) -> None:
    indexed_document(client)
    conversation = ask(client, "When does the canteen open?")
    cases = [
        ("post", f"/ui/conversations/{conversation}/rename", {"title": "   "}, 422),
        ("post", f"/ui/conversations/{conversation}/rename", {"title": "x" * 81}, 422),
        ("post", "/ui/conversations/424242/rename", {"title": "fine"}, 404),
        ("post", f"/ui/conversations/{conversation}/pin", {"pinned": "yes"}, 422),
        ("post", "/ui/conversations/424242/pin", {"pinned": "1"}, 404),
        ("post", "/ui/conversations/0/pin", {"pinned": "1"}, 422),
        ("post", "/ui/messages/424242/regenerate", None, 404),
        ("post", "/ui/messages/424242/edit", {"message": "again"}, 404),
        ("post", f"/ui/messages/{2**63}/edit", {"message": "again"}, 422),
    ]
    for method, url, data, status in cases:
        response = getattr(client, method)(url, data=data, headers=HX)
        assert response.status_code == status, (url, data, response.status_code)
        assert 'role="alert"' in response.text
    for url in ("/ui/conversations/424242/export", f"/ui/conversations?q={'x' * 201}"):
        assert client.get(url).status_code in (404, 422), url
    assert client.delete("/ui/conversations/424242").status_code == 404


def test_delete_and_export(client: TestClient[Any]) -> None:
    indexed_document(client)
    fake_model(client).enqueue(["Noon", " daily", " [1]."])
    conversation = ask(client, "When does the canteen open?")
    client.post(f"/ui/conversations/{conversation}/rename", data={"title": "Canteen hours"})

    export = client.get(f"/ui/conversations/{conversation}/export")
    assert export.status_code == 200
    assert export.headers["content-type"].startswith("text/markdown")
    disposition = export.headers["content-disposition"]
    assert disposition == f'attachment; filename="canteen-hours-{conversation}.md"'
    assert export.text.startswith("# Canteen hours\n")
    assert "> When does the canteen open?" in export.text
    assert "Noon daily [1]." in export.text and "- [1] Canteen, page 1" in export.text

    deleted = client.delete(f"/ui/conversations/{conversation}", headers=HX)
    assert deleted.status_code == 200 and deleted.headers["hx-redirect"] == "/"
    assert client.get(f"/c/{conversation}").status_code == 404
    assert f"/c/{conversation}" not in client.get("/ui/conversations").text
    assert client.delete(f"/ui/conversations/{conversation}").status_code == 404


def test_regenerate_the_last_answer(client: TestClient[Any]) -> None:
    indexed_document(client)
    model = fake_model(client)
    model.enqueue(["First", " answer [1]."])
    conversation = ask(client, "When does the canteen open?")
    model.enqueue(["Second", " answer [1]."])
    ask(client, "Does the canteen open at noon daily?", conversation)
    page = client.get(f"/c/{conversation}").text
    answers = [int(n) for n in re.findall(r'id="message-(\d+)"[^>]*data-message', page)][1::2]
    first_answer, last_answer = answers

    refused = client.post(f"/ui/messages/{first_answer}/regenerate", headers=HX)
    assert refused.status_code == 409
    question = client.post(f"/ui/messages/{first_answer - 1}/regenerate", headers=HX)
    assert question.status_code == 404  # a question is not an answer

    model.enqueue(["Written", " again [1]."])
    again = client.post(f"/ui/messages/{last_answer}/regenerate")
    assert again.status_code == 200
    stream_url = re.search(r'sse-connect="(/ui/answers/\d+/stream)"', again.text).group(1)  # type: ignore[union-attr]
    assert stream_url == f"/ui/answers/{last_answer - 1}/stream"
    done = sse_events(client.get(stream_url).text)[-1][1]
    assert "Written again" in done
    page = client.get(f"/c/{conversation}").text
    assert "Written again" in page and "Second answer" not in page and "First answer" in page
    assert len(model.history) == 3


def test_edit_and_resend_replaces_the_rest_of_the_conversation(client: TestClient[Any]) -> None:
    conversation = canteen_conversation(client, "Is the canteen open daily at noon?")
    model = fake_model(client)
    first_question = first_question_id(client, conversation)

    assert (
        client.post(f"/ui/messages/{first_question + 1}/edit", data={"message": "x"}).status_code
        == 404
    )
    empty = client.post(f"/ui/messages/{first_question}/edit", data={"message": "  "}, headers=HX)
    assert empty.status_code == 422
    model.enqueue(["Edited [1]."])
    edited = client.post(
        f"/ui/messages/{first_question}/edit", data={"message": f"When does it close? {HOSTILE}"}
    )
    assert edited.status_code == 200
    assert injected_markup(edited.text) == []
    question_id = int(re.search(r"/ui/answers/(\d+)/stream", edited.text).group(1))  # type: ignore[union-attr]
    sse_events(client.get(f"/ui/answers/{question_id}/stream").text)
    page = client.get(f"/c/{conversation}").text
    assert "When does it close?" in page and "Edited" in page
    assert "Is the canteen open daily" not in page and "Noon" not in page and "Soup" not in page


def test_collection_table_sorts_filters_and_escapes(client: TestClient[Any]) -> None:
    canteen = indexed_document(client, "b-notes.md")  # few bytes, titled "Canteen"
    upload(client, (f"a-{HOSTILE}.txt", b"Alpha text about apples " * 40))
    hostile = int(client.get("/api/documents").json()["documents"][0]["id"])
    wait_indexed(client, hostile)
    page = client.get("/collections/1")
    assert page.status_code == 200 and injected_markup(page.text) == []

    def order(**params: str) -> list[int]:
        response = client.get("/ui/collections/1/documents", params=params)
        assert response.status_code == 200
        assert injected_markup(response.text) == []
        return [
            int(n) for n in re.findall(r'<tr class="document" id="document-(\d+)"', response.text)
        ]

    # "Canteen" (its title) before 'x.png" onerror…' (the hostile name, directories dropped)
    assert order(sort="name", order="asc") == [canteen, hostile]
    assert order(sort="name", order="desc") == [hostile, canteen]
    assert order(sort="size", order="asc") == [canteen, hostile]
    assert order(sort="added", order="desc") == [hostile, canteen]
    assert order(q="NOTES") == [canteen]
    assert order(q="markdown") == [canteen]
    assert order(q="nothing like it") == []
    sorted_html = client.get("/ui/collections/1/documents?sort=size&order=asc").text
    assert 'aria-sort="ascending" class="col-size"' in sorted_html

    assert client.get("/ui/collections/1/documents?sort=evil").status_code == 422
    assert client.get("/ui/collections/1/documents?order=sideways").status_code == 422
    assert client.get("/ui/collections/99/documents").status_code == 404
    assert client.get("/collections/99").status_code == 404


def test_download_original_and_reingest(client: TestClient[Any]) -> None:
    body = b"# Canteen\n\nThe canteen opens at noon daily."
    name = 'caf\u00e9 "menu"; <b>.md'
    document_id = int(upload(client, (name, body)).json()["documents"][0]["id"])
    wait_indexed(client, document_id)

    original = client.get(f"/documents/{document_id}/original")
    assert original.status_code == 200 and original.content == body
    assert original.headers["content-type"] == "application/octet-stream"
    disposition = original.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="caf_ _menu__ <b>.md"')
    assert "filename*=UTF-8''caf%C3%A9%20%22menu%22%3B%20%3Cb%3E.md" in disposition
    assert client.get("/documents/424242/original").status_code == 404

    reingested = client.post(f"/ui/documents/{document_id}/reingest", headers=HX)
    assert reingested.status_code == 200
    assert 'data-status="queued"' in reingested.text or "indexed" in reingested.text
    assert wait_indexed(client, document_id)["status"] == "indexed"
    hits = client.post("/api/search", json={"query": "canteen noon", "k": 3}).json()["hits"]
    assert [h["document_id"] for h in hits] == [document_id]  # old passages left the index
    assert client.post("/ui/documents/424242/reingest", headers=HX).status_code == 404


def test_reingest_of_a_document_in_progress_is_a_conflict(client: TestClient[Any]) -> None:
    services = client.app.state.services
    services.retrieval.worker.stop()  # nothing picks up the queue now
    document_id = int(
        upload(client, ("late.md", b"# Late\n\nQueued.")).json()["documents"][0]["id"]
    )
    time.sleep(0.1)
    response = client.post(f"/ui/documents/{document_id}/reingest", headers=HX)
    assert response.status_code == 409 and "already being ingested" in response.text


def test_other_peoples_conversations_are_not_found(client: TestClient[Any]) -> None:
    indexed_document(client)
    conversation = ask(client, "When does the canteen open?")
    page = client.get(f"/c/{conversation}").text
    question, answer = (int(n) for n in re.findall(r'id="message-(\d+)"', page)[:2])
    add_user(client, "other")
    login(client, "other")
    assert f"/c/{conversation}" not in client.get("/ui/conversations").text
    for method, url, data in [
        ("post", f"/ui/conversations/{conversation}/rename", {"title": "mine now"}),
        ("post", f"/ui/conversations/{conversation}/pin", {"pinned": "1"}),
        ("get", f"/ui/conversations/{conversation}/export", None),
        ("delete", f"/ui/conversations/{conversation}", None),
        ("post", f"/ui/messages/{answer}/regenerate", None),
        ("post", f"/ui/messages/{question}/edit", {"message": "mine now"}),
        ("get", f"/ui/conversations?conversation_id={conversation}", None),
    ]:
        kwargs = {"data": data} if data else {}
        response = getattr(client, method)(url, headers=HX, **kwargs)
        if url.startswith("/ui/conversations?"):
            assert "aria-current" not in response.text  # not even marked as the one shown
            continue
        assert response.status_code == 404, (url, response.status_code)
    login(client)  # the owner: nothing changed
    assert "mine now" not in client.get(f"/c/{conversation}").text


def test_editing_the_first_question_retitles_a_conversation_titled_after_it(
    client: TestClient[Any],
) -> None:
    """#26 item 8: an edited first question kept the old title; a title a person gave
    stays."""
    indexed_document(client)
    model = fake_model(client)
    model.enqueue(["Noon [1]."])
    conversation = ask(client, "When does the canteen open?")
    first = first_question_id(client, conversation)
    model.enqueue(["Six [1]."])
    edited = client.post(
        f"/ui/messages/{first}/edit", data={"message": "When does the canteen close?"}
    )
    assert edited.status_code == 200
    assert 'id="conversation-title">When does the canteen close?<' in edited.text  # out of band
    services = client.app.state.services
    assert services.conversations.get(conversation).title == "When does the canteen close?"
    question = int(re.search(r"/ui/answers/(\d+)/stream", edited.text).group(1))  # type: ignore[union-attr]
    sse_events(client.get(f"/ui/answers/{question}/stream").text)

    services.conversations.rename(conversation, "Canteen hours")
    first = first_question_id(client, conversation)
    model.enqueue(["Seven [1]."])
    again = client.post(f"/ui/messages/{first}/edit", data={"message": "Is it open on Sunday?"})
    assert again.status_code == 200 and 'id="conversation-title"' not in again.text
    assert services.conversations.get(conversation).title == "Canteen hours"


def test_a_deleted_conversations_id_is_never_given_to_a_new_one(client: TestClient[Any]) -> None:
    """#26 item 8: deleting the newest conversation handed its id to the next one, so a
    link to the deleted conversation opened the new one."""
    conversations = client.app.state.services.conversations
    first = conversations.create("First")
    newest = conversations.create("Newest")
    assert conversations.delete(newest.id)
    again = conversations.create("Another")
    assert again.id > newest.id > first.id


def test_an_opened_conversation_shows_its_latest_answers_sources(client: TestClient[Any]) -> None:
    """#26 item 8: opening a conversation left the Sources pane empty."""
    conversation = canteen_conversation(client, "What does it serve?")
    page = client.get(f"/c/{conversation}").text
    pane = page[page.index('id="sources-pane"') :]
    pane = pane[: pane.index("</div>")]
    answers = [int(n) for n in re.findall(r'<article[^>]*assistant[^>]*data-message="(\d+)"', page)]
    assert answers and f'id="source-{answers[-1]}-1"' in pane  # the latest answer's [1]
    assert "Sources of the selected answer appear here" not in pane
    assert "Sources of the selected answer appear here" in client.get("/").text


def test_each_answer_shows_the_collections_it_searched(client: TestClient[Any]) -> None:
    """#26 item 8: past answers did not show the scope they used (it may have changed)."""
    indexed_document(client)
    services = client.app.state.services
    model = fake_model(client)
    model.enqueue(["Noon [1]."])
    conversation = ask(client, "When does the canteen open?")
    services.conversations.set_scope(conversation, [services.collection_id])
    model.enqueue(["Six [1]."])
    ask(client, "When does the canteen close?", conversation)
    answers = [m for m in services.conversations.messages(conversation) if m.role == "assistant"]
    assert [a.context.scope for a in answers] == [None, ("default",)]
    page = client.get(f"/c/{conversation}").text
    assert page.count("Searched in default") == 1  # the first searched everything
    api = client.get(f"/api/conversations/{conversation}").json()["messages"]
    assert [m.get("scope") for m in api if m["role"] == "assistant"] == [None, ["default"]]


def test_searched_in_names_only_collections_the_asker_may_still_read(
    client: TestClient[Any],
) -> None:
    """#30 review: a conversation scoped to a collection its owner has since lost was
    not searched in it, and must not name it either."""
    indexed_document(client)
    services = client.app.state.services
    secret = services.store.ensure_collection("secret-board-minutes")
    ann = add_user(client, "ann")
    services.auth.members.add(services.collection_id, ann.id)
    client.cookies.clear()
    login(client, "ann")
    model = fake_model(client)
    model.enqueue(["Noon [1]."])
    conversation = ask(client, "When does the canteen open?")
    services.conversations.set_scope(conversation, [services.collection_id, secret])
    model.enqueue(["Six [1]."])
    ask(client, "When does the canteen close?", conversation)
    answers = [m for m in services.conversations.messages(conversation) if m.role == "assistant"]
    assert answers[-1].context is not None and answers[-1].context.scope == ("default",)
    assert "secret-board-minutes" not in client.get(f"/c/{conversation}").text
