"""The JSON API over the real app with fake models: uploads, status, search, chat, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import fake_model, signed_in, sse_events, upload, wait_indexed
from tests.documents import make_docx, make_pdf

HANDBOOK = (
    b"# Travel policy\n\nEmployees may claim a daily meal allowance of 45 euros when "
    b"travelling abroad. Receipts must be submitted within 30 days.\n\n"
    b"# Holidays\n\nStaff receive 28 days of paid annual leave plus public holidays.\n"
)


def test_upload_is_ingested_and_searchable(client: TestClient[Any]) -> None:
    response = upload(client, ("handbook.md", HANDBOOK))
    assert response.status_code == 201
    [created] = response.json()["documents"]
    assert created["status"] == "queued"
    document = wait_indexed(client, created["id"])
    assert document["status"] == "indexed", document
    assert document["chunks"] >= 2

    hits = client.post("/api/search", json={"query": "daily meal allowance abroad", "k": 3})
    assert hits.status_code == 200
    top = hits.json()["hits"][0]
    assert top["document_id"] == created["id"]
    assert "45 euros" in top["text"]
    assert top["page"] == 1


def test_reupload_of_identical_content_is_not_duplicated(client: TestClient[Any]) -> None:
    first = upload(client, ("a.md", HANDBOOK)).json()["documents"][0]
    indexed = wait_indexed(client, first["id"])
    second = upload(client, ("renamed.md", HANDBOOK)).json()["documents"][0]
    assert second["id"] == first["id"]
    assert second["duplicate"] is True
    assert len(client.get("/api/documents").json()["documents"]) == 1
    assert client.app.state.services.retrieval.worker.index.count == indexed["chunks"]


def test_delete_removes_chunks_from_search_at_once(client: TestClient[Any]) -> None:
    created = upload(client, ("h.md", HANDBOOK)).json()["documents"][0]
    wait_indexed(client, created["id"])
    assert client.delete(f"/api/documents/{created['id']}").status_code == 204
    assert client.get(f"/api/documents/{created['id']}").status_code == 404
    hits = client.post("/api/search", json={"query": "meal allowance", "k": 5}).json()["hits"]
    assert hits == []
    assert client.app.state.services.retrieval.worker.index.count == 0
    assert client.delete(f"/api/documents/{created['id']}").status_code == 404


def test_chat_streams_tokens_then_citations(client: TestClient[Any]) -> None:
    created = upload(client, ("handbook.md", HANDBOOK)).json()["documents"][0]
    wait_indexed(client, created["id"])
    response = client.post("/api/chat", json={"message": "What is the meal allowance abroad?"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    name, data = events[0]  # what the model reads, before its first token
    assert name == "sources"
    [reading] = json.loads(data)["sources"]
    assert reading["number"] == 1 and reading["document_id"] == created["id"]
    assert "45 euros" in reading["snippet"]
    tokens = [json.loads(data)["text"] for name, data in events if name == "token"]
    assert len(tokens) > 3
    name, data = events[-1]
    assert name == "done"
    done = json.loads(data)
    assert done["answer"].startswith("According to [1]")
    [citation] = done["citations"]
    assert citation == reading
    assert citation["document_id"] == created["id"]
    assert citation["page"] == 1
    assert "45 euros" in citation["snippet"]
    assert citation["url"].startswith(f"/documents/{created['id']}/pages/1?chunk=")

    follow_up = client.post(
        "/api/chat",
        json={"message": "And the annual leave?", "conversation_id": done["conversation_id"]},
    )
    assert follow_up.status_code == 200
    prompt = fake_model(client).history[-1].prompt
    assert "What is the meal allowance abroad?" in prompt  # the earlier turn is in the prompt


def test_chat_without_relevant_sources_says_so(client: TestClient[Any]) -> None:
    response = client.post("/api/chat", json={"message": "zebra quantum marmalade"})
    events = sse_events(response.text)
    assert [name for name, _ in events] == ["token", "done"]  # no sources to list
    done = json.loads(events[-1][1])
    assert "could not find" in done["answer"]
    assert done["citations"] == []
    assert fake_model(client).history == []  # nothing to invent from


def test_bad_requests_get_clear_errors(client: TestClient[Any]) -> None:
    assert client.post("/api/chat", json={"message": ""}).status_code == 422
    assert client.post("/api/chat", json={"message": "   \n"}).status_code == 422
    assert client.post("/api/chat", json={"message": "x" * 5000}).status_code == 422
    assert (
        client.post("/api/chat", json={"message": "hi", "conversation_id": 999}).status_code == 404
    )
    assert client.post("/api/chat", content=b"{not json").status_code in (400, 422)
    assert client.post("/api/search", json={"query": "x", "k": 0}).status_code == 422
    assert client.post("/api/search", json={"query": "x", "k": 10**9}).status_code == 422
    assert client.post("/api/search", json={"query": "x", "extra": 1}).status_code == 422
    assert client.get("/api/documents/12345").status_code == 404
    error = client.get("/api/documents/12345").json()["error"]
    assert error["status"] == 404 and error["detail"]


def test_unsupported_type_is_415_and_stores_nothing(client: TestClient[Any]) -> None:
    exe = b"MZ\x90\x00\x03\x00\x00\x00" + bytes(range(256)) * 4
    response = upload(client, ("tool.exe", exe), ("ok.txt", b"fine text"))
    assert response.status_code == 415
    assert "tool.exe" in response.json()["error"]["detail"]
    assert client.get("/api/documents").json()["documents"] == []


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("logo.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><text>hi</text></svg>'),
        ("deploy.sh", b"#!/bin/sh\necho deploying\n"),
        ("README", b"plain words without an extension"),
    ],
)
def test_text_of_an_undocumented_type_is_415_with_the_accepted_types(
    client: TestClient[Any], name: str, data: bytes
) -> None:
    response = upload(client, (name, data))
    assert response.status_code == 415
    detail = response.json()["error"]["detail"]
    assert name in detail and "accepted: PDF, Word (DOCX), PowerPoint (PPTX)" in detail
    assert client.get("/api/documents").json()["documents"] == []


def test_every_documented_type_is_accepted(client: TestClient[Any]) -> None:
    files = [
        ("a.pdf", make_pdf(["pdf text"])),
        ("b.docx", make_docx([("p", "docx text")])),
        ("c.html", b"<p>html text</p>"),
        ("d.htm", b"<p>htm text</p>"),
        ("e.md", b"# md text"),
        ("f.markdown", b"# markdown text"),
        ("g.txt", b"txt text"),
        ("h.csv", b"a,b\n1,2\n"),
    ]
    response = upload(client, *files)
    assert response.status_code == 201, response.text
    for document in response.json()["documents"]:
        assert wait_indexed(client, document["id"])["status"] == "indexed"


def test_missing_file_part_is_422(client: TestClient[Any]) -> None:
    response = client.post("/api/documents", data={"nothing": "here"})
    assert response.status_code == 422


def test_oversize_body_is_413(tmp_path: Any) -> None:
    from tests.conftest import fake_settings

    with signed_in(fake_settings(tmp_path, max_upload_bytes=1000)) as small:
        response = upload(small, ("big.txt", b"a" * 5000))
        assert response.status_code == 413
        assert small.get("/api/documents").json()["documents"] == []


def test_hostile_filename_is_never_a_path(client: TestClient[Any]) -> None:
    name = "..\\..\\etc/<img src=x onerror=alert(1)>Q&A\x1b[31m evil.txt"
    created = upload(client, (name, b"harmless text about policies")).json()["documents"][0]
    # Directories and control characters are gone; the rest is kept, and escaped on display.
    assert created["filename"] == "<img src=x onerror=alert(1)>Q&A[31m evil.txt"
    stored = list((client.app.state.settings.uploads_dir).rglob("*"))
    assert all("evil" not in p.name for p in stored)


def test_broken_documents_fail_with_a_reason(client: TestClient[Any]) -> None:
    cases = {
        "empty.txt": b"",
        "broken.pdf": b"%PDF-1.4\n garbage that is not a pdf",
        "broken.docx": b"PK\x03\x04 not really a zip",
    }
    ids = {
        name: upload(client, (name, data)).json()["documents"][0]["id"]
        for name, data in cases.items()
    }
    for name, document_id in ids.items():
        document = wait_indexed(client, document_id)
        assert document["status"] == "failed", name
        assert document["error"], name


def test_health_endpoints(client: TestClient[Any]) -> None:
    assert client.get("/health/live").json() == {"status": "ok", "detail": None}
    assert client.get("/health/ready").status_code == 200


def test_security_headers_forbid_inline_and_remote_content(client: TestClient[Any]) -> None:
    csp = client.get("/").headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp
    assert "unsafe-inline" not in csp


def test_each_answer_names_the_model_that_wrote_it(client: TestClient[Any]) -> None:
    created = upload(client, ("leave.md", b"# Leave\n\nStaff get 28 days of paid leave."))
    wait_indexed(client, created.json()["documents"][0]["id"])
    fake_model(client).enqueue(["Staff get 28 days [1]."])
    events = sse_events(client.post("/api/chat", json={"message": "How much leave?"}).text)
    done = json.loads(next(data for name, data in events if name == "done"))
    model = done["model"]
    assert model
    page = client.get(f"/c/{done['conversation_id']}").text
    shown = f'<span class="msg-model" title="The model that wrote this answer">{model}</span>'
    assert shown in page
