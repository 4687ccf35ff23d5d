"""The desktop UI, round two b (issue #14), on the server side: a conversation's scope is
stored, shown and never wider than what the asker may read; a cited passage as the
inspector's partial; ingest errors in plain words; "1 passage"."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from app.web.ui_format import plain_error, plural
from tests.conftest import add_user, login
from tests.test_ui_routes import ask, indexed_document


def test_plain_words_for_known_parser_errors_and_plurals() -> None:
    raw = "not a readable PDF (Stream has ended unexpectedly)"
    assert plain_error(raw) == "The PDF file is damaged or incomplete."
    assert plain_error("the PDF is encrypted; upload an unprotected copy") == (
        "the PDF is encrypted; upload an unprotected copy"  # already plain: unchanged
    )
    assert plain_error(None) == ""
    assert plural(1, "passage") == "1 passage" and plural(2, "passage") == "2 passages"


def test_the_scope_is_stored_shown_and_kept_to_readable_collections(
    client: TestClient[Any],
) -> None:
    services = client.app.state.services
    indexed_document(client)
    secret = services.store.ensure_collection("secret")
    handbook = services.store.ensure_collection("handbook")
    conversation_id = ask(client, "When does the canteen open?")
    changed = client.post(
        f"/ui/conversations/{conversation_id}/scope", data={"scope": str(handbook)}
    )
    assert changed.status_code == 200, changed.text
    assert "handbook" in changed.text
    assert services.conversations.get(conversation_id).scope == frozenset({handbook})
    page = client.get(f"/c/{conversation_id}")
    assert 'id="scope-label" class="scope-label">handbook<' in page.text
    refused = client.post(f"/ui/conversations/{conversation_id}/scope", data={"scope": "x"})
    assert refused.status_code == 422

    ann = add_user(client, "ann")  # ann reads the default collection and handbook only
    services.auth.members.add(services.collection_id, ann.id, can_write=False)
    services.auth.members.add(handbook, ann.id, can_write=False)
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    login(client, "ann")
    page = client.get("/")
    assert "secret" not in page.text  # not offered
    mine = ask(client, "When does the canteen open?")
    widened = client.post(f"/ui/conversations/{mine}/scope", data={"scope": str(secret)})
    assert widened.status_code == 422  # a collection she may not read is no scope
    kept = client.post(f"/ui/conversations/{mine}/scope", data={"scope": f"{secret},{handbook}"})
    assert kept.status_code == 200
    assert services.conversations.get(mine).scope == frozenset({handbook})


def test_a_cited_passage_as_the_inspectors_partial(client: TestClient[Any]) -> None:
    document_id = indexed_document(client)
    chunk = (
        client.app.state.services.db.read()
        .execute("SELECT id FROM chunks WHERE document_id = ?", [document_id])
        .fetchone()[0]
    )
    partial = client.get(f"/ui/documents/{document_id}/pages/1/passage?chunk={chunk}")
    assert partial.status_code == 200
    assert '<mark id="passage">' in partial.text
    assert f'href="/documents/{document_id}/pages/1?chunk={chunk}#passage"' in partial.text
    assert client.get(f"/ui/documents/{document_id}/pages/9/passage").status_code == 404


def test_a_damaged_zip_is_not_called_a_word_document() -> None:
    """Every Office, OpenDocument and EPUB file is a ZIP: a broken one is not a DOCX."""
    message = plain_error("could not read this XLSX file (BadZipFile)")
    assert message == "The file is damaged: its ZIP container cannot be read."
    assert "DOCX" not in message and "Word" not in message


def test_one_document_is_not_one_documents(client: Any) -> None:
    from tests.conftest import upload, wait_indexed

    created = upload(client, ("only.md", b"# Only\n\nThe single document of the default."))
    wait_indexed(client, created.json()["documents"][0]["id"])
    library = client.get("/").text
    assert 'aria-label="1 document"' in library and "1 documents" not in library


def test_a_member_of_no_collection_is_told_so(client: TestClient[Any]) -> None:
    add_user(client, "newcomer")
    assert 'id="no-collections"' not in client.get("/").text  # the admin reads them all
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    login(client, "newcomer")
    page = client.get("/").text
    assert 'id="no-collections"' in page and "ask an administrator" in page
