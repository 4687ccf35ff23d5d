"""``ragdesk sync [SOURCE]``: sync one source (name or id) or all, then ingest what came in.

Runs without the server, on the same data directory (while the server runs, it owns the
vector index: use ``POST /api/sources/{id}/sync`` instead). The listing and the SQLite
bookkeeping come first; then the vector index is opened, which catches up with removals,
and the new documents are parsed, embedded and indexed here, with a checkpoint at the end.
"""

from __future__ import annotations

import sys

from app.config.originals import open_originals
from app.config.settings import Settings
from app.sources.records import Source, SyncRun
from app.sources.service import Sources
from app.sources.store import SourceStore
from retrieval.library import Library
from retrieval.store import DocumentStore
from retrieval.types import DocumentStatus

BATCH = 16


def run_sync(settings: Settings, name: str | None, *, list_only: bool = False) -> int:
    """Returns the exit status: 0 all runs done, 1 a run failed or a file failed, 2 usage."""
    from app.migrations import open_database

    settings.server.data_dir.mkdir(parents=True, exist_ok=True)
    db = open_database(settings)
    try:
        store = DocumentStore(db)
        library = Library(store, open_originals(settings))
        sources = Sources(
            SourceStore(db), library, settings.ingest, settings.server.max_upload_bytes
        )
        sources.store.interrupt_running()  # nothing else runs here: we hold the directory
        chosen = _chosen(sources.store, name)
        if chosen is None:
            print(f"ragdesk sync: no source named {name!r}", file=sys.stderr)
            return 2
        if list_only:
            _list(sources.store, chosen)
            return 0
        runs = [sources.syncer.run(source, "cli") for source in chosen]
        for source, run in zip(chosen, runs, strict=True):
            print(_summary(source, run))
        failed = _ingest(settings, store, library, {s.collection_id for s in chosen})
    finally:
        db.close()
    return 1 if failed or any(r.status != "done" or r.failed for r in runs) else 0


def _chosen(store: SourceStore, name: str | None) -> list[Source] | None:
    if name is None:
        return store.all()
    source = store.by_name(name) or (store.get(int(name)) if name.isdigit() else None)
    return [source] if source is not None else None


def _list(store: SourceStore, sources: list[Source]) -> None:
    for source in sources:
        where = source.location + (f" ({source.prefix})" if source.prefix else "")
        runs = store.runs(source.id, limit=1)
        last = _counts(runs[0]) if runs else "never synced"
        every = f"every {source.interval_s:g} s" if source.interval_s else "on demand"
        print(f"{source.id:>4}  {source.name}  {source.kind} {where}  {every}  {last}")


def _counts(run: SyncRun) -> str:
    return (
        f"{run.status}: {run.added} added, {run.changed} changed, {run.removed} removed, "
        f"{run.unchanged} unchanged, {run.failed} failed, {run.skipped} skipped"
    )


def _summary(source: Source, run: SyncRun) -> str:
    lines = [f"{source.name}: {_counts(run)}" + (f" ({run.error})" if run.error else "")]
    lines += [f"  {p.outcome:<8} {p.path}: {p.reason}" for p in run.problems]
    return "\n".join(lines)


def _ingest(
    settings: Settings, store: DocumentStore, library: Library, collections: set[int]
) -> int:
    """Parse, embed and index the synced collections' queued documents; returns failures."""
    from app.config.retrieval import (
        build_embedder,
        build_parser,
        data_dir_leases,
        open_vector_index,
    )
    from retrieval.ingest import IngestWorker

    pending = [
        document_id
        for document_id in store.unfinished_documents()
        if (d := store.get_document(document_id)) is not None and d.collection_id in collections
    ]
    embedder = build_embedder(settings)
    index, _ = open_vector_index(settings, store, embedder)  # catches up with removals
    parser = build_parser(settings)
    try:
        worker = IngestWorker(
            store,
            library.files,
            embedder,
            index,
            settings.index_dir,
            settings.ingest.config(),
            parse=parser.parse,
            locate=parser.passage_boxes,
            parse_with_ocr=parser.parse_with_ocr,  # a collection's own OCR switch
            leases=data_dir_leases(store.db, settings),  # a killed run's, taken back
        )
        for start in range(0, len(pending), BATCH):
            worker.ingest_many(pending[start : start + BATCH])
        worker.mark_dirty()
        worker.checkpoint()
    finally:
        parser.close()
    failed = 0
    for document_id in pending:
        document = store.get_document(document_id)
        if document is not None and document.status is DocumentStatus.FAILED:
            failed += 1
            print(f"  failed   {document.filename}: {document.error}")
    print(f"ingested {len(pending) - failed} documents, {failed} failed")
    return failed
