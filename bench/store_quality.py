"""Retrieval quality on PostgreSQL vs SQLite: the same corpus, embedder and golden sets.

    python -m bench.store_quality [--sets factbook handbook samples] [--json results.json]

Each golden set's corpus is ingested twice by the same ``IngestWorker`` with the bundled
embedder (one model, loaded once): into SQLite + FAISS (bench/corpus.py, what
bench.retrieval_quality measures) and into PostgreSQL 16 + pgvector (pgserver,
tests/pg_kit.py: a bare database, every owner's migrations applied by
``app.migrations.migrate_all``; the vector index ``app.config.retrieval.open_vector_index``
opens there, pgvector's HNSW over the embeddings rows; BM25 in SQL, retrieval/pg_lexical.py,
which ``Retriever`` takes for a PostgreSQL store). Every question is then searched 20 deep
on both in each mode; a hit is relevant as retrieval/evaluation.py says (the golden
document, and its passage or answer string in the hit's text). "same top 5": the share of
questions whose five first hits are the same passages, in the same order, on both.

Sets: ``factbook`` (32 World Factbook profiles, 80 questions; bench.retrieval_quality's),
``handbook`` (4 long fictional company documents, 120 questions) and ``samples`` (the
bundled user guide and FAQ, data/samples, with bench/data/samples-golden.jsonl).

Bar: |PostgreSQL − SQLite| ≤ 0.01 for hybrid recall@1 and recall@5 on every set (issue #29).
``--documents N`` keeps the first N documents of each corpus and the questions about them
(a quick check; the bar is for whole sets).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.config.settings import Settings
from app.migrations import migrate_all
from bench.corpus import ingest_files
from retrieval.embedder import Embedder, SentenceTransformerEmbedder, bundled_embedder_dir
from retrieval.evaluation import GoldenQuestion, load_golden, ranking_metrics
from retrieval.ingest import IngestConfig, IngestWorker
from retrieval.library import Library
from retrieval.pg import PostgresDatabase
from retrieval.pg_vectors import open_pg_vector_index
from retrieval.search import Retriever, SearchConfig
from retrieval.store import DocumentStore
from retrieval.uploads import UploadFiles
from tests.pg_kit import PgServer  # PostgreSQL 16 + pgvector in a wheel, as the tests use it

BENCH_DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent
DEPTH = 20
BAR = 0.01
SETS: dict[str, tuple[Path, Path]] = {  # name: (corpus directory, golden set)
    "factbook": (BENCH_DATA / "factbook" / "corpus", BENCH_DATA / "factbook" / "golden.jsonl"),
    "handbook": (BENCH_DATA / "handbook" / "corpus", BENCH_DATA / "handbook" / "golden.jsonl"),
    "samples": (REPO / "data" / "samples", BENCH_DATA / "samples-golden.jsonl"),
}


def runs() -> list[tuple[str, SearchConfig, float | None]]:
    """(name, config, min_score): each mode alone and fused, every candidate kept (as
    bench.retrieval_quality's first rows), then the app's defaults."""
    search = Settings.model_validate({}).search
    return [
        ("hybrid", SearchConfig(mode="hybrid", max_per_document=0), None),
        ("dense", SearchConfig(mode="dense", max_per_document=0), None),
        ("bm25", SearchConfig(mode="bm25", max_per_document=0), None),
        (f"app defaults (min_score {search.min_score})", search.config(), search.min_score),
    ]


def ingest_postgres(
    root: Path, url: str, files: Iterable[tuple[str, bytes]], embedder: Embedder
) -> tuple[DocumentStore, Retriever]:
    """``files`` ingested into the PostgreSQL database at ``url`` (its originals under
    ``root``) as the server does it there; the store and a retriever over it."""
    db = PostgresDatabase(url)
    migrate_all(db)
    store = DocumentStore(db)
    library = Library(store, UploadFiles(root / "uploads"))
    # What open_vector_index returns for a PostgreSQL store: the embeddings rows, HNSW.
    index = open_pg_vector_index(store, embedder.model_id, embedder.dimension)
    worker = IngestWorker(store, library.files, embedder, index, root / "index", IngestConfig())
    collection = store.ensure_collection()
    ids = [
        library.submit(data=data, filename=name, collection_id=collection)[0].id
        for name, data in files
    ]
    worker.ingest_many(ids)
    return store, Retriever(embedder, index, store)


@dataclass
class Ranked:
    """One store's answers to the questions of one run."""

    ranks: list[int | None]
    top5: list[list[tuple[str, str]]]  # (file name, text) of the first five hits
    seconds: float

    def metrics(self) -> dict[str, float]:
        return ranking_metrics(self.ranks, [1, 5, DEPTH])


def rank_all(
    retriever: Retriever,
    store: DocumentStore,
    questions: list[GoldenQuestion],
    config: SearchConfig,
    min_score: float | None,
) -> Ranked:
    retriever.config = config
    filenames = {d.id: d.filename for d in store.list_documents()}
    retriever.search(questions[0].question, DEPTH)  # warm-up: models, connections, caches
    ranks: list[int | None] = []
    top5: list[list[tuple[str, str]]] = []
    started = time.perf_counter()
    for question in questions:
        hits = retriever.search(question.question, DEPTH, min_score=min_score).hits
        names = [filenames.get(hit.document_id, "") for hit in hits]
        ranks.append(
            next(
                (
                    n
                    for n, (hit, name) in enumerate(zip(hits, names, strict=True), start=1)
                    if question.is_relevant(hit, name)
                ),
                None,
            )
        )
        top5.append([(name, hit.text) for hit, name in zip(hits[:5], names[:5], strict=True)])
    return Ranked(ranks, top5, time.perf_counter() - started)


def measure_set(
    name: str, embedder: Embedder, pg: PgServer, documents: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    corpus_dir, golden = SETS[name]
    paths = sorted(p for p in corpus_dir.iterdir() if p.is_file())
    if documents:
        paths = paths[:documents]
    files = [(p.name, p.read_bytes()) for p in paths]
    url = pg.empty_database()
    with tempfile.TemporaryDirectory(prefix="ragdesk-stores-") as tmp:
        root = Path(tmp)
        started = time.monotonic()
        _, sqlite_store, index, _ = ingest_files(root / "sqlite", files, embedder)
        sqlite_s = time.monotonic() - started
        sqlite = Retriever(embedder, index, sqlite_store)
        started = time.monotonic()
        pg_store, postgres = ingest_postgres(root / "postgresql", url, files, embedder)
        pg_s = time.monotonic() - started
        try:
            # The questions about the documents ingested (a golden line names its document
            # by file name or by title): all of them unless --documents left some out.
            named: set[str] = set()
            for document in sqlite_store.list_documents():
                named |= {document.filename.lower(), (document.title or "").lower()}
            questions = [
                q
                for q in load_golden(golden)
                if not q.offtopic and (q.document is None or q.document.lower() in named)
            ]
            chunks = [
                sum(d.chunk_count for d in store.list_documents())
                for store in (sqlite_store, pg_store)
            ]
            about = {
                "documents": len(files),
                "questions": len(questions),
                "chunks_sqlite": chunks[0],
                "chunks_postgresql": chunks[1],
                "ingest_s_sqlite": round(sqlite_s, 1),
                "ingest_s_postgresql": round(pg_s, 1),
            }
            print(
                f"{name}: {len(files)} documents, {len(questions)} questions, chunks "
                f"{chunks[0]} (SQLite) / {chunks[1]} (PostgreSQL), ingested in "
                f"{sqlite_s:.1f} / {pg_s:.1f} s",
                flush=True,
            )
            rows = []
            for run, config, min_score in runs():
                a = rank_all(sqlite, sqlite_store, questions, config, min_score)
                b = rank_all(postgres, pg_store, questions, config, min_score)
                same = sum(x == y for x, y in zip(a.top5, b.top5, strict=True))
                rows.append(
                    {
                        "set": name,
                        "run": run,
                        "sqlite": a.metrics(),
                        "postgresql": b.metrics(),
                        "same_top5": same / len(questions),
                        "ms_per_search_sqlite": 1000 * a.seconds / len(questions),
                        "ms_per_search_postgresql": 1000 * b.seconds / len(questions),
                    }
                )
        finally:
            pg_store.db.close()
    pg.drop(url)
    return about, rows


def table(rows: list[dict[str, Any]]) -> str:
    metrics = ("recall@1", "recall@5", f"recall@{DEPTH}", "mrr")
    lines = [
        "| set | run | "
        + " | ".join(f"{m} SQLite / PG" for m in metrics)
        + " | same top 5 | ms/search SQLite / PG |",
        "| --- | --- | " + " | ".join("---" for _ in metrics) + " | --- | --- |",
    ]
    for row in rows:
        a, b = row["sqlite"], row["postgresql"]
        cells = [f"{a[m]:.3f} / {b[m]:.3f}" for m in metrics]
        lines.append(
            f"| {row['set']} | {row['run']} | "
            + " | ".join(cells)
            + f" | {row['same_top5']:.2f} | {row['ms_per_search_sqlite']:.1f} / "
            f"{row['ms_per_search_postgresql']:.1f} |"
        )
    return "\n".join(lines)


def verdicts(rows: list[dict[str, Any]]) -> list[tuple[str, float, bool]]:
    """(what, |PostgreSQL − SQLite|, within the bar) for hybrid recall@1 and @5 of each set."""
    found = []
    for row in rows:
        if row["run"] != "hybrid":
            continue
        for metric in ("recall@1", "recall@5"):
            gap = abs(row["postgresql"][metric] - row["sqlite"][metric])
            found.append((f"{row['set']} hybrid {metric}", gap, gap <= BAR + 1e-9))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", choices=sorted(SETS), default=list(SETS))
    parser.add_argument(
        "--documents", type=int, default=0, help="first N documents of each corpus (0 = all)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    embedder = SentenceTransformerEmbedder(bundled_embedder_dir())
    pg = PgServer()
    about: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    try:
        for name in args.sets:
            about[name], found = measure_set(name, embedder, pg, args.documents)
            rows += found
    finally:
        pg.stop()
    print(table(rows))
    results = verdicts(rows)
    for what, gap, ok in results:
        print(f"{what}: |PostgreSQL - SQLite| = {gap:.3f} (bar {BAR}): {'PASS' if ok else 'FAIL'}")
    print("PASS" if all(ok for *_, ok in results) else "FAIL")
    if args.json:
        args.json.write_text(json.dumps({"sets": about, "runs": rows, "bar": BAR}, indent=2))


if __name__ == "__main__":
    main()
