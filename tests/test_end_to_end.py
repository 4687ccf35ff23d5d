"""The real thing: bundled models, a real SQLite file and FAISS index, a real HTTP server."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.documents import make_pdf
from tests.server import ServerProcess, http

pytestmark = pytest.mark.real

POLICY_PDF = make_pdf(
    [
        "Northwind Handbook\nThis handbook describes how Northwind staff work together.",
        "Project codenames\nThe secret project codename is BLUE HERON.\n"
        "The BLUE HERON project launches on the fourteenth of March.",
    ],
    title="Northwind Handbook",
)


def upload(url: str, name: str, data: bytes) -> dict[str, Any]:
    response = http.post(f"{url}/api/documents", files=[("file", (name, data))], timeout=30)
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()["documents"][0]
    return document


def wait_indexed(url: str, document_id: int, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        document: dict[str, Any] = http.get(f"{url}/api/documents/{document_id}").json()
        if document["status"] in ("indexed", "failed"):
            return document
        time.sleep(0.2)
    raise TimeoutError(document_id)


def stream_chat(url: str, payload: dict[str, Any]) -> tuple[list[str], dict[str, Any], float]:
    tokens: list[str] = []
    done: dict[str, Any] = {}
    started = time.perf_counter()
    first_token_at = 0.0
    with http.stream("POST", f"{url}/api/chat", json=payload, timeout=120) as response:
        assert response.status_code == 200
        event = ""
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:])
                if event == "token":
                    first_token_at = first_token_at or time.perf_counter() - started
                    tokens.append(data["text"])
                elif event == "done":
                    done = data
                elif event == "error":
                    raise AssertionError(data)
    return tokens, done, first_token_at


def test_upload_ask_and_follow_the_citation(real_server: ServerProcess) -> None:
    url = real_server.url
    document = wait_indexed(url, upload(url, "handbook.pdf", POLICY_PDF)["id"])
    assert document["status"] == "indexed", document
    assert document["pages"] == 2

    tokens, done, _ = stream_chat(url, {"message": "What is the secret project codename?"})
    assert len(tokens) >= 2, "the answer streamed token by token"
    assert "BLUE HERON" in done["answer"].upper()
    cited = [c for c in done["citations"] if c["document_id"] == document["id"]]
    assert cited, done
    assert cited[0]["page"] == 2
    assert f"[{cited[0]['number']}]" in done["answer"]

    page = http.get(f"{url}{cited[0]['url'].split('#')[0]}")
    assert page.status_code == 200
    passage = page.text.split('<mark id="passage">')[1].split("</mark>")[0]
    assert "BLUE HERON" in passage

    follow_up = {"message": "When does it launch?", "conversation_id": done["conversation_id"]}
    _, second, _ = stream_chat(url, follow_up)
    assert second["conversation_id"] == done["conversation_id"]


def test_search_uses_real_embeddings(real_server: ServerProcess) -> None:
    url = real_server.url
    wait_indexed(
        url,
        upload(url, "cafeteria.txt", b"Lunch in the cafeteria is served from noon until two.")[
            "id"
        ],
    )
    # no word in common with the passage: only the embeddings can find it
    query = {"query": "at what time is the midday meal?", "k": 3}
    hits = http.post(f"{url}/api/search", json=query).json()["hits"]
    assert "cafeteria" in hits[0]["text"]
    assert hits[0]["score"] > 0  # the fused (RRF) score that ranked it


def test_acknowledged_upload_survives_kill_9(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log").start()
    try:
        acknowledged = upload(
            server.url, "survivor.md", b"# Survival\n\nThe emergency exit code is 7731."
        )
        server.kill()  # immediately after the 2xx: ingestion may not even have started
    finally:
        server.stop()
    restarted = ServerProcess(tmp_path / "data", tmp_path / "server.log").start()
    try:
        document = wait_indexed(restarted.url, acknowledged["id"])
        assert document["status"] == "indexed"
        hits = http.post(
            f"{restarted.url}/api/search", json={"query": "emergency exit code", "k": 1}
        ).json()["hits"]
        assert hits and "7731" in hits[0]["text"]
    finally:
        restarted.stop()
