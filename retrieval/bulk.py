"""Bulk ingestion of files and directories from disk (``ragdesk ingest``).

Every file is first submitted (bytes fsynced under their content hash, row committed as
``queued``), then the queued documents are parsed, embedded and indexed in batches, with
a checkpoint of the vector index after each batch. An interruption at any moment loses
nothing: a rerun with the same paths finds identical content already in the collection,
skips what is indexed and finishes what is still queued.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from retrieval.ingest import IngestWorker
from retrieval.library import Library
from retrieval.parsers import SUPPORTED_EXTENSIONS, UnsupportedDocumentType
from retrieval.types import DocumentStatus

# (path, outcome, detail). Outcomes: "queued", "parsed", "embedded", "indexed", "failed",
# "already indexed", "skipped".
Listener = Callable[[Path, str, str | None], None]


@dataclass
class BulkSummary:
    files: int = 0
    indexed: int = 0
    already_indexed: int = 0
    failed: list[tuple[Path, str]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    chunks: int = 0


def find_files(paths: Iterable[Path]) -> Iterator[tuple[Path, str | None]]:
    """Each file to ingest with None, or with the reason it is skipped.

    Directories are walked recursively in name order; hidden entries (``.git``) are left
    out and only supported extensions are taken. A file named explicitly is always tried:
    its format is judged from its content as an upload's would be.
    """
    for path in paths:
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.startswith("."):
                        continue
                    found = Path(root) / name
                    supported = found.suffix.lower() in SUPPORTED_EXTENSIONS
                    yield found, None if supported else "unsupported type"
        elif path.is_file():
            yield path, None
        else:
            yield path, "no such file or directory"


class BulkIngest:
    """Submits files to a collection and ingests them in the calling thread."""

    def __init__(
        self,
        library: Library,
        worker: IngestWorker,
        collection_id: int,
        *,
        batch_documents: int = 16,
        max_bytes: int | None = None,
        listener: Listener | None = None,
    ):
        if batch_documents < 1:
            raise ValueError("batch_documents must be at least 1")
        self.library = library
        self.worker = worker
        self.collection_id = collection_id
        self.batch_documents = batch_documents
        self.max_bytes = max_bytes
        self.listener = listener
        self.summary = BulkSummary()
        self._paths: dict[int, Path] = {}
        worker.progress = self._on_progress

    def run(self, paths: Iterable[Path]) -> BulkSummary:
        pending = self.submit(paths)
        self.ingest(pending)
        return self.summary

    def submit(self, paths: Iterable[Path]) -> list[int]:
        """Queue every new file; returns the ids still to be ingested, in path order."""
        pending: list[int] = []
        for path, skip in find_files(paths):
            if skip is not None:
                self._skip(path, skip)
                continue
            document_id = self._submit_one(path)
            if document_id is not None and document_id not in pending:
                pending.append(document_id)
        return pending

    def ingest(self, document_ids: list[int]) -> None:
        """Parse, embed and index in batches, checkpointing the vector index after each."""
        for start in range(0, len(document_ids), self.batch_documents):
            self.worker.ingest_many(document_ids[start : start + self.batch_documents])
            self.worker.checkpoint()

    def _submit_one(self, path: Path) -> int | None:
        try:
            size = path.stat().st_size
            if self.max_bytes is not None and size > self.max_bytes:
                self._fail(path, f"larger than the upload limit ({size} > {self.max_bytes} bytes)")
                return None
            data = path.read_bytes()
        except OSError as exc:
            self._fail(path, f"cannot read: {exc.strerror or exc}")
            return None
        try:
            document, created = self.library.submit(
                data=data, filename=path.name, collection_id=self.collection_id
            )
        except UnsupportedDocumentType as exc:
            self._skip(path, str(exc))
            return None
        self.summary.files += 1
        if document.status is DocumentStatus.INDEXED:
            self.summary.already_indexed += 1
            self._tell(path, "already indexed", None)
            return None
        if document.status is DocumentStatus.FAILED:
            self.summary.failed.append((path, document.error or "failed"))
            self._tell(path, "failed", f"in an earlier run: {document.error}")
            return None
        self._paths[document.id] = path
        self._tell(path, "queued" if created else "queued earlier", None)
        return document.id

    def _on_progress(self, document_id: int, stage: str, detail: str | None) -> None:
        path = self._paths.get(document_id)
        if path is None:  # not one of ours (the worker is shared): nothing to show
            return
        if stage == "indexed":
            self.summary.indexed += 1
            document = self.library.store.get_document(document_id)
            self.summary.chunks += document.chunk_count if document else 0
        elif stage == "failed":
            self.summary.failed.append((path, detail or "failed"))
        self._tell(path, stage, detail)

    def _skip(self, path: Path, reason: str) -> None:
        self.summary.skipped.append((path, reason))
        self._tell(path, "skipped", reason)

    def _fail(self, path: Path, reason: str) -> None:
        self.summary.files += 1
        self.summary.failed.append((path, reason))
        self._tell(path, "failed", reason)

    def _tell(self, path: Path, outcome: str, detail: str | None) -> None:
        if self.listener is not None:
            self.listener(path, outcome, detail)
