"""The desktop UI, round two (issue #14), on the server side: the upload dialog's collection
and its failures in plain words, citation numbers as shown, one answer at a time per
conversation, the status bar's counts, and PDF titles that name no document."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from litestar.testing import TestClient

from app.chat.records import Citation, Message
from app.chat.rendering import render_answer, shown_citations
from retrieval.parsers import parse_document
from retrieval.types import DocumentKind
from tests.conftest import add_user, fake_model, login, sse_events, upload, wait_indexed
from tests.documents import make_pdf
from tests.test_ui_routes import ask, indexed_document

HX = {"HX-Request": "true"}


def sign_in_as(client: TestClient[Any], name: str) -> None:
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    login(client, name)


def reader_and_writer(client: TestClient[Any]) -> tuple[int, int]:
    """Collections "handbook" (ann may write) and "policies" (ann may only read)."""
    services = client.app.state.services
    handbook = services.store.ensure_collection("handbook")
    policies = services.store.ensure_collection("policies")
    ann = add_user(client, "ann")
    services.auth.members.add(handbook, ann.id, can_write=True)
    services.auth.members.add(policies, ann.id, can_write=False)
    return handbook, policies


def choices(html: str) -> dict[str, str]:
    """The upload dialog's collections, name by id, and which one is chosen ("*")."""
    select = re.search(r'<select name="collection" id="upload-collection".*?</select>', html, re.S)
    assert select is not None, "the upload dialog offers a choice of collection"
    options = re.findall(r'<option value="(\d+)"( selected)?>([^<]*)</option>', select.group(0))
    return {value: name + ("*" if chosen else "") for value, chosen, name in options}


# --- 1. and 2.: the upload dialog ------------------------------------------------------------


def test_the_upload_dialog_offers_writable_collections_and_uploads_there(
    client: TestClient[Any],
) -> None:
    handbook, policies = reader_and_writer(client)
    default = client.app.state.services.collection_id
    assert choices(client.get("/").text) == {
        str(default): "default*",
        str(handbook): "handbook",
        str(policies): "policies",
    }
    table = client.get(f"/collections/{handbook}").text
    assert choices(table)[str(handbook)] == "handbook*"  # opened from its table

    sign_in_as(client, "ann")  # staff: only where she may write
    assert choices(client.get("/").text) == {str(handbook): "handbook*"}
    page = client.get(f"/collections/{policies}").text
    assert choices(page) == {str(handbook): "handbook*"}
    assert "Upload…</button>" not in page  # not from a table she may only read

    response = client.post(
        "/ui/documents",
        files=[("file", ("memo.md", b"# Memo\n\nA memo."))],
        data={"collection": str(handbook)},
        headers=HX,
    )
    assert response.status_code == 200, response.text
    document_id = int(re.search(r'id="upload-(\d+)"', response.text).group(1))  # type: ignore[union-attr]
    document = wait_indexed(client, document_id)
    assert document["status"] == "indexed"
    stored = client.app.state.services.store.get_document(document_id)
    assert stored is not None and stored.collection_id == handbook


def test_readers_get_no_upload_and_a_refused_upload_is_a_row_in_plain_words(
    client: TestClient[Any],
) -> None:
    handbook, policies = reader_and_writer(client)
    services = client.app.state.services
    reader = add_user(client, "rita")
    services.auth.members.add(policies, reader.id, can_write=False)
    sign_in_as(client, "rita")
    for url in ("/", f"/collections/{policies}"):
        page = client.get(url).text
        assert 'id="upload-dialog"' not in page, url
        assert 'data-action="upload"' not in page and 'data-open-dialog="upload-dialog"' not in page

    files = [("file", ("a.md", b"# A\n\nA.")), ("file", ("b<i>.md", b"# B\n\nB."))]
    for collection, status, reason in (
        (policies, 403, "You may not add documents to this collection."),
        (handbook, 404, "This collection does not exist or is not open to you."),
        ("nonsense", 404, "This collection does not exist or is not open to you."),
    ):
        response = client.post(
            "/ui/documents", files=files, data={"collection": str(collection)}, headers=HX
        )
        assert response.status_code == status
        rows = re.findall(r'<li class="upload-row" data-status="failed">.*?</li>', response.text)
        assert len(rows) == 2, response.text
        assert all(reason in row for row in rows)
        assert "b&lt;i&gt;.md" in rows[1] and "Not found" not in response.text
    assert client.get("/api/documents").json()["documents"] == []


# --- 4. citation numbers ------------------------------------------------------------------


def citation(number: int, chunk_id: int) -> Citation:
    return Citation(number, chunk_id, chunk_id, f"Doc {chunk_id}", 1, 0, 5, "text")


def test_citations_keep_their_prompt_numbers_in_order_of_first_appearance() -> None:
    answer = Message(
        id=7,
        conversation_id=1,
        role="assistant",
        content="Holidays are 25 days [9]. Sick days need a note [5]. Both [9][5].",
        citations=(citation(5, 50), citation(9, 90)),
        created_at=0.0,
    )
    shown = shown_citations(answer)
    assert [(c.number, c.chunk_id) for c in shown] == [(9, 90), (5, 50)]
    links = re.findall(r'<a class="cite" href="([^"]+)"[^>]*>\[(\d+)\]</a>', render_answer(answer))
    assert [n for _, n in links] == ["9", "5", "9", "5"]  # never renumbered
    assert "chunk=90" in links[0][0] and "chunk=50" in links[1][0]


def test_the_viewer_steps_through_citations_in_the_order_shown(client: TestClient[Any]) -> None:
    for name in ("holidays", "sick"):
        body = f"# {name}\n\nThe canteen opens at noon daily; {name} rules apply.".encode()
        wait_indexed(client, upload(client, (f"{name}.md", body)).json()["documents"][0]["id"])
    fake_model(client).enqueue(["Sick days [2], holidays [1]."])
    response = client.post("/api/chat", json={"message": "When does the canteen open?"})
    done = next(json.loads(d) for e, d in sse_events(response.text) if e == "done")
    answer = client.app.state.services.conversations.message(done["message_id"])
    assert answer is not None
    first, second = shown_citations(answer)
    viewer = client.get(first.url_in(answer.id).split("#")[0]).text
    assert "Citation 1 of 2" in viewer
    viewer = client.get(second.url_in(answer.id).split("#")[0]).text
    assert "Citation 2 of 2" in viewer
    sources = client.get(f"/ui/messages/{answer.id}/sources", headers=HX).text
    badges = re.findall(r'<span class="badge">\[(\d+)\]</span>', sources)
    assert badges == [str(first.number), str(second.number)] == ["2", "1"]
    assert sources.index(f"chunk={first.chunk_id}&") < sources.index(f"chunk={second.chunk_id}&")


# --- 5. one answer at a time ----------------------------------------------------------------


def test_a_question_while_the_conversation_is_answering_is_a_409(client: TestClient[Any]) -> None:
    indexed_document(client)
    conversation = ask(client, "When does the canteen open?")
    chat = client.app.state.services.require_chat()
    turn = client.post(
        "/ui/ask", data={"message": "And at weekends?", "conversation_id": str(conversation)}
    )
    question_id = int(re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1))  # type: ignore[union-attr]
    chat._answering.add(question_id)  # its answer is being written
    try:
        refused = client.post(
            "/ui/ask",
            data={"message": "Too soon", "conversation_id": str(conversation)},
            headers=HX,
        )
        assert refused.status_code == 409
        assert "still being written" in refused.text
        api = client.post(
            "/api/chat", json={"message": "Too soon", "conversation_id": conversation}
        )
        assert api.status_code == 409
        assert "still being written" in api.json()["error"]["detail"]
        other = client.post("/ui/ask", data={"message": "Elsewhere?", "conversation_id": ""})
        assert other.status_code == 200  # another conversation is not held up
    finally:
        chat._answering.discard(question_id)
    messages = client.app.state.services.conversations.messages(conversation)
    assert [m.content for m in messages if m.role == "user"] == [
        "When does the canteen open?",
        "And at weekends?",
    ]


# --- 6. the status bar ----------------------------------------------------------------------


def test_the_status_bar_counts_what_the_caller_may_read(client: TestClient[Any]) -> None:
    handbook, _ = reader_and_writer(client)
    for n in range(3):  # in the default collection, which ann may not read
        indexed_document(client, f"canteen-{n}.md")
    response = client.post(
        "/api/documents?collection=handbook",
        files=[("file", ("mine.md", b"# Mine\n\nMy one passage."))],
    )
    wait_indexed(client, response.json()["documents"][0]["id"])
    chunks = sum(d.chunk_count for d in client.app.state.services.store.list_documents(handbook))
    sign_in_as(client, "ann")
    status = client.get("/ui/status", headers=HX).text
    passages = f"{chunks} passage" + ("s" if chunks != 1 else "")
    assert f"Index: 1 document, {passages}</span>" in status
    assert "0 in ingestion queue" in status and "0 generating" in status

    services = client.app.state.services
    services.require_chat()._answering.add(10**6)  # an answer still retrieving its sources
    try:
        assert "1 generating, 0 waiting" in client.get("/ui/status", headers=HX).text
    finally:
        services.require_chat()._answering.discard(10**6)


# --- 8. PDF titles --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "title"),
    [
        ("policy.html", "travel-policy"),
        ("C:\\Users\\me\\policy.docx", "travel-policy"),
        ("   ", "travel-policy"),
        ("untitled", "travel-policy"),
        ("Untitled document", "travel-policy"),
        ("Microsoft Word - policy.docx", "travel-policy"),
        ("Microsoft Word - Document1", "travel-policy"),
        ("Microsoft Word - Travel Policy 2026", "Travel Policy 2026"),
        ("Travel policy", "Travel policy"),
        ("Version 1.2 of the rules", "Version 1.2 of the rules"),
    ],
)
def test_a_pdf_title_that_names_no_document_falls_back_to_the_file_name(
    metadata: str, title: str
) -> None:
    data = make_pdf(["Claims are paid within 30 days."], title=metadata)
    assert parse_document(data, DocumentKind.PDF, "travel-policy.pdf").title == title


def test_the_upload_dialog_chooses_the_collection_a_conversation_searches(
    client: TestClient[Any],
) -> None:
    """#26 item 8: in a conversation scoped to another collection, the upload dialog
    still chose "default"."""
    handbook, _ = reader_and_writer(client)
    services = client.app.state.services
    scoped = services.conversations.create("Handbook questions")
    services.conversations.set_scope(scoped.id, [handbook])
    assert choices(client.get(f"/c/{scoped.id}").text)[str(handbook)] == "handbook*"
    everywhere = services.conversations.create("Anything")
    assert choices(client.get(f"/c/{everywhere.id}").text)[str(services.collection_id)] == (
        "default*"
    )
