"""Remote embeddings between real processes: a front Ragdesk embedding through two Ragdesk
nodes' /v1/embeddings (each its own data directory and port, the bundled model) ingests
documents and searches exactly as a Ragdesk embedding them itself: the same chunk ids in
the same order, the same scores to 1e-4. Node ``a`` is that local Ragdesk: it ingests the
same documents with its own embedder."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app.config.settings import Settings
from bench.corpus import stdlib_documents
from tests.server import ServerProcess, http
from tests.test_fleet_processes import accept_key

REMOTE_MODEL = "all-MiniLM-L6-v2"  # what a Ragdesk node with the bundled model answers to
QUERIES = [
    "how do I parse command line arguments",
    "compress a file with gzip",
    "read and write CSV files",
    "schedule events at a given time",
    "compare sequences and compute differences",
    "percent-encode a URL",
]


@dataclass
class Setup:
    front: ServerProcess
    a: ServerProcess
    b: ServerProcess


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("remote-embed")
    a = ServerProcess(root / "a", root / "a.log", generator_backend="fake")
    b = ServerProcess(root / "b", root / "b.log", generator_backend="fake")
    front = ServerProcess(
        root / "front",
        root / "front.log",
        generator_backend="fake",
        embedder_url=json.dumps([a.url, b.url]),
        embedder_remote_model=REMOTE_MODEL,
        embedder_remote_timeout_s=120,
    )
    started: list[ServerProcess] = []
    try:
        started.append(a.start(ready_timeout=240))
        b.provision()
        accept_key(b, a.api_key)  # one key for both nodes, as an operator sets them up
        started.append(b.start(ready_timeout=240))
        front.env["RAGDESK_EMBEDDER_API_KEY"] = a.api_key
        started.append(front.start(ready_timeout=240))
        yield Setup(front, a, b)
    finally:
        for server in reversed(started):
            server.stop()


def ingest(server: ServerProcess, documents: list[tuple[str, str]]) -> None:
    files = [("file", (f"{name}.md", text.encode())) for name, text in documents]
    response = http.post(f"{server.url}/api/documents", files=files, timeout=120)
    assert response.status_code == 201, response.text
    ids = [d["id"] for d in response.json()["documents"]]
    deadline = time.monotonic() + 600
    while True:
        statuses = [
            http.get(f"{server.url}/api/documents/{i}", timeout=30).json()["status"] for i in ids
        ]
        if all(s in ("indexed", "failed") for s in statuses):
            break
        assert time.monotonic() < deadline, statuses
        time.sleep(0.5)
    assert Counter(statuses) == {"indexed": len(ids)}


def search(server: ServerProcess, query: str) -> list[dict[str, object]]:
    response = http.post(f"{server.url}/api/search", json={"query": query}, timeout=60)
    assert response.status_code == 200, response.text
    hits: list[dict[str, object]] = response.json()["hits"]
    return hits


def test_a_front_embedding_on_two_nodes_searches_as_local_embedding(setup: Setup) -> None:
    documents = stdlib_documents(16)
    ingest(setup.front, documents)
    ingest(setup.a, documents)  # the local-embedding Ragdesk, same documents, same order

    for query in QUERIES:
        remote, local = search(setup.front, query), search(setup.a, query)
        assert remote, query
        assert [h["chunk_id"] for h in remote] == [h["chunk_id"] for h in local], query
        for r, here in zip(remote, local, strict=True):
            assert r["text"] == here["text"]
            gap = abs(float(str(r["score"])) - float(str(here["score"])))
            assert gap <= 1e-4, (query, r, here)

    db_path = Settings.model_validate({"data_dir": setup.front.data_dir}).db_path
    with sqlite3.connect(db_path, timeout=30) as db:
        tags = {row[0] for row in db.execute("SELECT DISTINCT model_id FROM embeddings")}
    assert tags == {f"remote:{REMOTE_MODEL}"}

    # both nodes embedded for the front (its log has one line per request)
    log = setup.front.log_path.read_text()
    for node in (setup.a, setup.b):
        sent = re.findall(rf"POST {re.escape(node.url)}/v1/embeddings \S+ 200", log)
        assert len(sent) >= 3, (node.url, len(sent))
    assert setup.a.api_key not in log
