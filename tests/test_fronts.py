"""Two real Ragdesk fronts on one PostgreSQL (pgvector) and one shared originals
directory: what is done through one is seen through the other — a sign-in, an API key,
an upload (ingested once, by whichever front claims it), a search — and the Stop button
pressed on one front stops the answer the other is writing."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import ServerProcess

DOC = b"# Travel\n\nThe daily meal allowance abroad is 45 euros per day.\n"


def _front(root: Path, name: str, url: str, blobs: Path) -> ServerProcess:
    return ServerProcess(
        root / name,
        root / f"{name}.log",
        database_url=url,
        blob_url=str(blobs),
        embedder_backend="fake",
        generator_backend="fake",
        fake_token_delay_s=0.2,  # an answer of ~15 tokens takes a few seconds
        ingest_lease_s=5,
        ingest_poll_s=0.5,
    )


@pytest.fixture
def fronts(tmp_path: Path, pg_server: Any) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = pg_server.fresh_database()
    blobs = tmp_path / "originals"
    blobs.mkdir()
    a = _front(tmp_path, "a", url, blobs).start(ready_timeout=90)
    b = _front(tmp_path, "b", url, blobs).start(ready_timeout=90)
    a.password = b.password  # one account in one database: B's start set its password last
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()
        pg_server.drop(url)


def _signed_in(front: ServerProcess) -> httpx.Client:
    client = httpx.Client(base_url=front.url, timeout=30)
    response = client.post("/login", data={"name": front.username, "password": front.password})
    assert response.status_code == 303, response.text
    return client


def _csrf(client: httpx.Client) -> str:
    match = re.search(r'"X-CSRF-Token": "([^"]+)"', client.get("/").text)
    assert match is not None
    return match.group(1)


def _wait_indexed(front: ServerProcess, document_id: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = httpx.get(f"{front.url}/api/documents/{document_id}", headers=front.headers)
        if got.status_code == 200 and got.json()["status"] == "indexed":
            return
        time.sleep(0.2)
    raise TimeoutError(f"document {document_id} not indexed as {front.url} sees it")


def test_what_one_front_does_the_other_sees(fronts: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = fronts
    uploaded = httpx.post(
        f"{a.url}/api/documents", headers=a.headers, files=[("file", ("travel.md", DOC))]
    )
    assert uploaded.status_code in (200, 201, 202), uploaded.text
    document_id = uploaded.json()["documents"][0]["id"]
    _wait_indexed(b, document_id)
    # A's key works on B, and B's search finds what A uploaded (vectors in pgvector).
    hits = httpx.post(
        f"{b.url}/api/search", headers=a.headers, json={"query": "meal allowance", "k": 3}
    )
    assert hits.status_code == 200, hits.text
    assert hits.json()["hits"][0]["document_id"] == document_id
    # A sign-in made through A is a session B honours; B serves the original A stored.
    with closing(_signed_in(a)) as on_a:
        cookie = on_a.cookies.get("ragdesk_session")
        assert cookie
        original = httpx.get(
            f"{b.url}/documents/{document_id}/original", cookies={"ragdesk_session": cookie}
        )
        assert original.status_code == 200, original.text
        assert original.content == DOC
        on_b = httpx.get(f"{b.url}/", cookies={"ragdesk_session": cookie}, follow_redirects=False)
        assert on_b.status_code == 200
        assert "ask-form" in on_b.text


def test_stop_pressed_on_one_front_stops_the_answer_the_other_writes(
    fronts: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = fronts
    uploaded = httpx.post(
        f"{a.url}/api/documents", headers=a.headers, files=[("file", ("travel.md", DOC))]
    )
    _wait_indexed(a, uploaded.json()["documents"][0]["id"])
    with closing(_signed_in(a)) as on_a:
        token = _csrf(on_a)
        turn = on_a.post(
            "/ui/ask",
            data={"message": "How much is the meal allowance abroad?"},
            headers={"X-CSRF-Token": token, "HX-Request": "true"},
        )
        assert turn.status_code == 200, turn.text
        question_id = int(re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1))  # type: ignore[union-attr]
        body: list[str] = []
        started = time.monotonic()
        reader = threading.Thread(
            target=lambda: body.append(on_a.get(f"/ui/answers/{question_id}/stream").text)
        )
        reader.start()
        time.sleep(0.5)  # a few tokens out, on A
        cookies = {"ragdesk_session": on_a.cookies.get("ragdesk_session") or ""}
        stop = httpx.post(
            f"{b.url}/ui/questions/{question_id}/stop",
            cookies=cookies,
            headers={"X-CSRF-Token": token},
        )
        assert stop.status_code == 204, stop.text
        reader.join(timeout=20)
        assert not reader.is_alive()
    assert time.monotonic() - started < 15
    assert "(stopped)" in body[0]
    # Once stored, stopping again is a clear 404 on either front.
    again = httpx.post(
        f"{b.url}/ui/questions/{question_id}/stop", cookies=cookies, headers={"X-CSRF-Token": token}
    )
    assert again.status_code == 404
