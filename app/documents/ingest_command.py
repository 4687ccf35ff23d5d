"""``ragdesk ingest PATH...``: bulk ingestion from disk, with progress on stderr.

Runs without the server, on the same data directory (stop the server first: both would
write the vector index). Interrupting it (Ctrl-C, ``kill``, even ``kill -9``) loses
nothing; run the same command again to finish.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from app.config.settings import Settings
from app.interrupts import INTERRUPTED, sigterm_interrupts


class ProgressDisplay:
    """One line per file event; on a terminal, also a bar redrawn in place under them."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.tty = stream.isatty()
        self.total = 0
        self.done = 0
        self.started = time.monotonic()

    def __call__(self, path: Path, outcome: str, detail: str | None) -> None:
        if outcome in ("indexed", "failed", "already indexed", "skipped"):
            self.done += 1  # each file ends in exactly one of these
        suffix = f" ({detail})" if detail else ""
        self._clear_bar()
        self.stream.write(f"{outcome:>15}  {path}{suffix}\n")
        self._draw_bar()
        self.stream.flush()

    def expect(self, total: int) -> None:
        self.total = total

    def _clear_bar(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K")

    def _draw_bar(self) -> None:
        if not self.tty or not self.total:
            return
        width = 30
        filled = int(width * min(self.done, self.total) / self.total)
        elapsed = time.monotonic() - self.started
        self.stream.write(
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} files"
            f"  {elapsed:.0f}s"
        )


def run_ingest(
    settings: Settings, paths: list[Path], *, collection: str, batch_documents: int
) -> int:
    """Ingest ``paths`` into ``collection``; returns the process exit status."""
    from app.config.originals import open_originals
    from app.config.retrieval import (
        build_embedder,
        build_parser,
        data_dir_leases,
        open_vector_index,
    )
    from app.migrations import open_database
    from retrieval.bulk import BulkIngest, find_files
    from retrieval.collections import CollectionError, Workspaces
    from retrieval.ingest import IngestWorker
    from retrieval.library import Library
    from retrieval.store import DocumentStore

    if not collection.strip():
        print("ragdesk ingest: --collection must not be empty", file=sys.stderr)
        return 2
    if batch_documents < 1:
        print("ragdesk ingest: --batch must be at least 1", file=sys.stderr)
        return 2
    display = ProgressDisplay(sys.stderr)
    # kill (SIGTERM) stops like Ctrl-C: the current batch's SQLite work is committed or not.
    sigterm_interrupts()
    settings.server.data_dir.mkdir(parents=True, exist_ok=True)
    db = open_database(settings)
    store = DocumentStore(db)
    library = Library(store, open_originals(settings))
    try:
        collection_id = Workspaces(db).ensure(collection)
    except CollectionError as exc:
        db.close()
        print(f"ragdesk ingest: {exc}", file=sys.stderr)
        return 2
    parser = build_parser(settings)
    worker: IngestWorker | None = None
    try:
        embedder = build_embedder(settings)
        index, _ = open_vector_index(settings, store, embedder)
        worker = IngestWorker(
            store,
            library.files,
            embedder,
            index,
            settings.index_dir,
            settings.ingest.config(),  # its timer is unused: bulk checkpoints per batch
            parse=parser.parse,
            locate=parser.passage_boxes,
            parse_with_ocr=parser.parse_with_ocr,  # a collection's own OCR switch
            leases=data_dir_leases(db, settings),  # a killed run's, taken back at once
        )
        bulk = BulkIngest(
            library,
            worker,
            collection_id,
            batch_documents=batch_documents,
            max_bytes=settings.server.max_upload_bytes,
            listener=display,
        )
        display.expect(sum(1 for _ in find_files(paths)))
        summary = bulk.run(paths)
    except KeyboardInterrupt:
        if worker is not None:
            worker.mark_dirty()
            worker.checkpoint()
        print(
            "\ninterrupted: nothing is lost; run the same command again to finish",
            file=sys.stderr,
        )
        return INTERRUPTED
    finally:
        parser.close()
    print(
        f"{summary.files} files in collection {collection!r}: {summary.indexed} indexed "
        f"({summary.chunks} chunks), {summary.already_indexed} already indexed, "
        f"{len(summary.failed)} failed, {len(summary.skipped)} skipped"
    )
    for path, reason in summary.failed:
        print(f"  failed   {path}: {reason}")
    for path, reason in summary.skipped:
        print(f"  skipped  {path}: {reason}")
    db.close()
    return 1 if summary.failed else 0
