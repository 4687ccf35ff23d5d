"""Remote embeddings: bulk ingestion throughput of a front embedding on one node vs two.

    python -m bench.embedding_fleet [--documents 40] [--repeat 1]

Each node is a real Ragdesk process embedding with the bundled all-MiniLM-L6-v2 on its
/v1/embeddings, pinned to one CPU core (the affinity it inherits at start, one PyTorch
thread). A front Ragdesk (not pinned, fake generator) embeds through the nodes
(``RAGDESK_EMBEDDER_URL``, retrieval/remote_embedder.py) and ingests ``--documents``
Markdown documents (Python stdlib docstrings) uploaded in one request; the time runs from
the upload to the last document indexed. Both rounds use the same two nodes in one run:
a front over node 0 only, then a fresh front (its own data directory: nothing cached) over
nodes 0 and 1. Bar: two ≥ 1.6× one (issue #15).

On a 2-core machine the front (parsing, chunking, indexing) shares the cores with the
nodes, so the ratio is a floor of what separate machines would show.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx

from app.config.settings import Settings
from bench.corpus import stdlib_documents
from tests.server import ServerProcess, start_on_core  # the e2e tests' real processes

BAR = 1.6
REMOTE_MODEL = "all-MiniLM-L6-v2"


def start_node(root: Path, core: int) -> ServerProcess:
    node = ServerProcess(
        root,
        root / "server.log",
        generator_backend="fake",
        embed_query_threads=1,
        embed_ingest_threads=1,
        embed_ingest_batch=32,  # an embedding node: whole requests per forward pass
    )
    return start_on_core(node, core)


def warm(node: ServerProcess) -> None:
    body = {"model": REMOTE_MODEL, "input": [f"warm-up text {i}" for i in range(32)]}
    httpx.post(f"{node.url}/v1/embeddings", json=body, headers=node.headers, timeout=120)


def ingest_through_front(
    root: Path, nodes: list[ServerProcess], documents: list[tuple[str, str]]
) -> float:
    """Chunks per second of one bulk upload through a fresh front over ``nodes``."""
    front = ServerProcess(
        root,
        root / "server.log",
        generator_backend="fake",
        embedder_url=json.dumps([n.url for n in nodes]),
        embedder_remote_model=REMOTE_MODEL,
        embedder_api_key=nodes[0].api_key,
        embedder_remote_timeout_s=300,
    )
    try:
        front.start(ready_timeout=300)
        files = [("file", (f"{name}.md", text.encode())) for name, text in documents]
        cpu_at_start = cpu_seconds(front)
        with httpx.Client(headers=front.headers, timeout=300) as http:
            started = time.monotonic()
            response = http.post(f"{front.url}/api/documents", files=files)
            response.raise_for_status()
            ids = [d["id"] for d in response.json()["documents"]]
            pending = set(ids)
            while pending:  # one list request a poll: the front's CPU is the nodes' too
                time.sleep(0.2)
                for document in http.get(f"{front.url}/api/documents").json()["documents"]:
                    if document["id"] in pending and document["status"] == "failed":
                        failed = document["id"]
                        raise RuntimeError(f"document {failed} failed; see {front.log_path}")
                    if document["status"] == "indexed":
                        pending.discard(document["id"])
            wall = time.monotonic() - started
            front_cpu = cpu_seconds(front) - cpu_at_start
        db_path = Settings.model_validate({"data_dir": root}).db_path
        with sqlite3.connect(db_path) as db:
            (chunks,) = db.execute("SELECT count(*) FROM chunks").fetchone()
        rate = chunks / wall
        print(
            f"{len(nodes)} node(s): {chunks} chunks in {wall:.1f} s = {rate:.1f} chunks/s "
            f"(the front used {front_cpu:.1f} CPU-seconds)"
        )
        return float(rate)
    finally:
        front.stop()


def cpu_seconds(server: ServerProcess) -> float:
    """User + system CPU time of a server process so far (Linux ``/proc``)."""
    assert server.process is not None
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        raise SystemExit("needs two CPU cores")
    documents = stdlib_documents(args.documents)
    print(f"cores {cores}, load average {os.getloadavg()[0]:.1f}, {len(documents)} documents")
    nodes: list[ServerProcess] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        try:
            for core in cores:
                nodes.append(start_node(root / f"node{core}", core))
                if len(nodes) > 1:
                    from tests.test_fleet_processes import accept_key

                    accept_key(nodes[-1], nodes[0].api_key)
            for node in nodes:
                warm(node)
            ones, twos = [], []
            for round_ in range(args.repeat):
                ones.append(ingest_through_front(root / f"one{round_}", nodes[:1], documents))
                twos.append(ingest_through_front(root / f"two{round_}", nodes, documents))
        finally:
            for node in nodes:
                node.stop()
    ratio = max(twos) / max(ones)
    verdict = "PASS" if ratio >= BAR else "FAIL"
    print(f"load average now {os.getloadavg()[0]:.1f}")
    print(f"two nodes / one node (best of {args.repeat}): {ratio:.2f}x (bar {BAR}x): {verdict}")


if __name__ == "__main__":
    main()
