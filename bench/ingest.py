"""Ingestion throughput end to end vs the embedder alone, on the same chunks.

    python -m bench.ingest [--documents N]

End to end = upload accepted (file fsynced, row committed) → parsed → chunked →
embedded → stored in SQLite → added to FAISS, for every document, by the real
ingest worker. Embedder alone = the same chunk texts through the same embedder
with the same batch size. Bar: end to end ≥ 0.8× embedder alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.corpus import background_worker, open_library, stdlib_documents
from retrieval.batching import BatchingEmbedder
from retrieval.embedder import Embedder, SentenceTransformerEmbedder, bundled_embedder_dir
from retrieval.ingest import embedding_text
from retrieval.parsers.isolated import IsolatedParser
from retrieval.store import DocumentStore
from retrieval.types import ChunkSpan

BAR = 0.8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--batching", action="store_true", help="through BatchingEmbedder, as the app does"
    )
    parser.add_argument("--bulk-batch", type=int, default=0, help="ingestion slice (batching)")
    parser.add_argument("--ingest-threads", type=int, default=0, help="torch threads (batching)")
    args = parser.parse_args()

    documents = stdlib_documents(args.documents)
    embedder = SentenceTransformerEmbedder(bundled_embedder_dir(), batch_size=args.batch_size)
    embedder.embed_batch(["warm-up"] * args.batch_size)
    if args.batching:
        import torch

        embedder = BatchingEmbedder(  # type: ignore[assignment]
            embedder,
            max_batch=args.batch_size,
            bulk_batch=args.bulk_batch,
            set_threads=torch.set_num_threads,
            query_threads=torch.get_num_threads(),
            bulk_threads=args.ingest_threads,
        )

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store, library, index = open_library(root, embedder)
        collection = store.ensure_collection()
        parser = IsolatedParser()
        worker = background_worker(root, library, index, embedder, parser)
        library.attach_worker(worker)
        idle_query_ms = _query_latencies(embedder, threading.Event(), count=20)
        done = threading.Event()
        busy_query_ms: list[float] = []
        prober = threading.Thread(
            target=lambda: busy_query_ms.extend(_query_latencies(embedder, done, count=10_000))
        )
        started = time.perf_counter()
        prober.start()
        ids = [
            library.submit(data=text.encode(), filename=f"{name}.md", collection_id=collection)[
                0
            ].id
            for name, text in documents
        ]
        while not all(_finished(store, document_id) for document_id in ids):
            time.sleep(0.01)
        worker.stop()  # includes the final checkpoint of the FAISS index
        end_to_end_s = time.perf_counter() - started
        done.set()
        prober.join()
        parser.close()
        texts = _embedded_texts(store)

    started = time.perf_counter()
    embedder.embed_batch(texts)
    embed_only_s = time.perf_counter() - started

    chunks = len(texts)
    result = {
        "documents": len(documents),
        "characters": sum(len(text) for _, text in documents),
        "chunks": chunks,
        "end_to_end_chunks_per_s": round(chunks / end_to_end_s, 1),
        "embedder_only_chunks_per_s": round(chunks / embed_only_s, 1),
        "ratio": round(embed_only_s / end_to_end_s, 3),
        "bar": BAR,
    }
    result["passed"] = result["ratio"] >= BAR
    result["question_embed_ms_idle_p50_p95"] = _p50_p95(idle_query_ms)
    result["question_embed_ms_during_ingestion_p50_p95"] = _p50_p95(busy_query_ms)
    print(json.dumps(result, indent=2))


def _query_latencies(embedder: Embedder, stop: threading.Event, count: int) -> list[float]:
    """A user's question embedded every 0.2 s: how long does it wait behind ingestion?"""
    latencies: list[float] = []
    while len(latencies) < count and not stop.is_set():
        started = time.perf_counter()
        embedder.embed_batch(["How do I reset my password?"])
        latencies.append((time.perf_counter() - started) * 1000)
        stop.wait(0.2)
    return latencies


def _p50_p95(values: list[float]) -> list[float]:
    ordered = sorted(values)
    if not ordered:
        return []
    return [round(statistics.median(ordered), 1), round(ordered[int(0.95 * (len(ordered) - 1))], 1)]


def _finished(store: DocumentStore, document_id: int) -> bool:
    document = store.get_document(document_id)
    return document is not None and document.status.is_terminal


def _embedded_texts(store: DocumentStore) -> list[str]:
    """The exact texts the worker embedded, rebuilt from the stored chunks."""
    rows = store.db.read().query(
        """SELECT c.page, c.start, c."end", c.text, c.heading,
                  COALESCE(d.title, d.filename) AS title
           FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.id"""
    )
    return [
        embedding_text(
            row["title"],
            ChunkSpan(row["page"], row["start"], row["end"], row["text"], row["heading"]),
        )
        for row in rows
    ]


if __name__ == "__main__":
    main()
