"""Citations survive re-ingestion: a passage is its document plus its content."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from retrieval.parsers import parse_document
from retrieval.types import ChunkSpan, DocumentKind, DocumentStatus
from tests.conftest import fake_model, sse_events, upload, wait_for, wait_indexed
from tests.retrieval_kit import make_kit

HX = {"HX-Request": "true"}
POLICY = (
    b"# Leave\n\nStaff receive twenty eight days of paid leave every year.\n\n"
    b"# Parking\n\nVisitors park in the north garage on level two.\n"
)


def _chunks(kit: Any, document_id: int) -> list[tuple[int, str]]:
    rows = kit.db.read().execute(
        "SELECT id, text FROM chunks WHERE document_id = ? ORDER BY start", [document_id]
    )
    return [(int(chunk_id), str(text)) for chunk_id, text in rows]


def test_unchanged_passages_keep_their_ids_and_changed_ones_are_replaced(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    document, _ = kit.library.submit(data=POLICY, filename="p.md", collection_id=1)
    worker.ingest(document.id)
    before = _chunks(kit, document.id)
    assert len(before) == 2

    kit.store.set_status(document.id, DocumentStatus.QUEUED)  # as the Re-ingest action does
    worker.ingest(document.id)
    assert _chunks(kit, document.id) == before  # same ids, same text
    assert index.count == 2  # no second vector beside the first for a kept id

    rows = kit.db.read().execute(
        'SELECT page, start, "end", text, heading FROM chunks WHERE document_id = ? ORDER BY start',
        [document.id],
    )
    spans = [ChunkSpan(*row) for row in rows]
    moved = ChunkSpan(
        1, spans[1].start, spans[1].end, "Visitors park on level 3.", spans[1].heading
    )
    parsed = parse_document(POLICY, DocumentKind.MARKDOWN, "p.md")
    stored = kit.store.replace_content(document.id, parsed, [spans[0], moved])
    assert stored.ids[0] == before[0][0] and stored.kept == {before[0][0]}
    assert stored.ids[1] not in {before[0][0], before[1][0]}  # changed text: a new passage
    assert [chunk_id for chunk_id, _ in _chunks(kit, document.id)] == stored.ids  # old one gone


def _cited(client: TestClient[Any]) -> tuple[int, dict[str, Any], str]:
    """The policy uploaded and an answer citing it: the document's id, the citation, and
    the viewer's link to it within the answer."""
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    document = upload(client, ("policy.md", POLICY)).json()["documents"][0]
    wait_indexed(client, document["id"])
    fake_model(client).enqueue(["Visitors park in the north garage on level two [1]."])
    response = client.post("/api/chat", json={"message": "Where do visitors park?"})
    done = json.loads(next(d for e, d in sse_events(response.text) if e == "done"))
    [citation] = done["citations"]
    url = citation["url"].split("#")[0] + f"&answer={done['message_id']}"
    return document["id"], citation, url


def test_a_citation_still_opens_its_highlighted_passage_after_reingest(
    client: TestClient[Any],
) -> None:
    document_id, citation, url = _cited(client)
    reingested = client.post(f"/ui/documents/{document_id}/reingest", headers=HX)
    assert reingested.status_code == 200
    assert wait_indexed(client, document_id)["status"] == "indexed"
    viewer = client.get(url).text
    assert '<mark id="passage">' in viewer and "north garage" in viewer
    assert "Citation 1 of 1" in viewer and "changed since" not in viewer
    hits = client.post("/api/search", json={"query": "where do visitors park", "k": 1}).json()
    assert hits["hits"][0]["chunk_id"] == citation["chunk_id"]  # searchable under its old id


def test_a_citation_whose_passage_changed_says_so(client: TestClient[Any]) -> None:
    document_id, _, url = _cited(client)
    store = client.app.state.services.store
    changed = POLICY.replace(b"north garage on level two", b"south lot behind block D")
    parsed = parse_document(changed, DocumentKind.MARKDOWN, "policy.md")
    text = parsed.pages[0].text
    store.replace_content(document_id, parsed, [ChunkSpan(1, 0, len(text), text, None)])
    viewer = client.get(url).text
    assert "This passage changed since the answer cited it" in viewer
    assert "north garage on level two" in re.sub(r"<[^>]+>", "", viewer)  # what it said
    assert '<mark id="passage">' not in viewer
