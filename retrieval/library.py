"""Accepting a document: detect its format, store the bytes durably, record it as queued."""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import PurePath

from retrieval.blobs import BlobsUnavailable, Originals
from retrieval.collections import DeletedCollection, Workspaces
from retrieval.ingest import IngestWorker
from retrieval.parsers import detect_kind
from retrieval.records import DocumentRecord
from retrieval.store import CollectionGone, DocumentGone, DocumentStore

log = logging.getLogger(__name__)

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_FILENAME_CHARS = 200


def display_filename(raw: str | None) -> str:
    """The user's filename without directories or control characters, for display only.

    It is never used as a path (files are stored under their content hash) and is
    escaped wherever it is shown, so characters such as ``<`` or ``&`` are kept.
    """
    name = unicodedata.normalize("NFC", raw or "")
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _CONTROL_CHARS.sub("", name).strip().lstrip(".")
    if len(name) > MAX_FILENAME_CHARS:
        stem, dot, suffix = name.rpartition(".")
        keep = MAX_FILENAME_CHARS - len(suffix) - 1
        name = (
            f"{stem[:keep]}.{suffix}" if dot and 0 < len(suffix) < 16 else name[:MAX_FILENAME_CHARS]
        )
    return name or "upload"


class Library:
    """The documents of a deployment: accepts uploads, deletes, hands work to ingestion.

    Uploads are accepted before the models have loaded; they wait as ``queued`` in the database
    and the ingest worker picks them up when it starts.
    """

    def __init__(self, store: DocumentStore, files: Originals):
        self.store = store
        self.files = files
        self.worker: IngestWorker | None = None
        # Saving a file and deleting an unused one must not interleave for the same content.
        self._files_lock = threading.Lock()

    def attach_worker(self, worker: IngestWorker, *, start: bool = True) -> None:
        """Hand uploads to ``worker`` and start it; ``start`` False (a web front): its index
        follows deletions, and uploads wait in the database for a worker elsewhere."""
        self.worker = worker
        if start:
            worker.start()

    def submit(
        self, *, data: bytes, filename: str | None, collection_id: int
    ) -> tuple[DocumentRecord, bool]:
        """Store an upload and queue it; ``created`` is False when identical content exists.

        Raises ``UnsupportedDocumentType`` before anything is written, and ``CollectionGone``
        (nothing kept) when the collection was deleted meanwhile, and ``BlobsUnavailable``
        (nothing kept) when the store of originals cannot be reached. When this returns, the
        bytes are durably stored (fsynced, or in the bucket) and the row is committed.
        """
        name = display_filename(filename)
        kind = detect_kind(data, name)
        with self._files_lock:
            stored_name = self.files.save(data)
            try:
                document, created = self.store.add_document(
                    collection_id=collection_id,
                    content_hash=stored_name,
                    filename=name,
                    stored_name=stored_name,
                    kind=kind,
                    size=len(data),
                )
            except CollectionGone:
                if not self.store.stored_name_in_use(stored_name):
                    self._drop_file(stored_name)
                raise
        if created and self.worker is not None:
            self.worker.enqueue(document.id)
        return document, created

    def sweep(self) -> Sequence[PurePath]:
        """Remove uploaded files no document names, and temporary files of interrupted
        writes (a kill between a file and its row); returns what went. Under the files
        lock, so an upload or delete in flight is never mistaken for a leftover."""
        with self._files_lock:
            return self.files.sweep(self.store.stored_names())

    def delete(self, document_id: int) -> None:
        """Delete at once from the database and the vector index; the file goes when unused.

        Raises ``DocumentGone`` when there is no such document.
        """
        document = self.store.get_document(document_id)
        if document is None:
            raise DocumentGone(document_id)
        # Under the files lock: an identical upload cannot be acknowledged in between and
        # then find its file removed.
        with self._files_lock:
            chunk_ids = self.store.delete_document(document_id)
            if not self.store.stored_name_in_use(document.stored_name):
                self._drop_file(document.stored_name)
        if self.worker is not None:
            self.worker.index.remove(chunk_ids)
            self.worker.mark_dirty()

    def delete_collection(self, workspaces: Workspaces, collection_id: int) -> DeletedCollection:
        """Delete a collection and every document in it, as :meth:`delete` does one: rows
        at once (an ingestion in progress stops at its next step, finding its document
        gone), then its vectors from the index and the originals no other document names.

        Raises ``CollectionMissing`` and ``CollectionInUse`` (retrieval.collections).
        """
        with self._files_lock:  # no upload of the same bytes elsewhere can interleave
            deleted = workspaces.delete(collection_id)
            for stored_name in deleted.stored_names:
                if not self.store.stored_name_in_use(stored_name):
                    self._drop_file(stored_name)
        if self.worker is not None and len(deleted.chunk_ids):
            self.worker.index.remove(deleted.chunk_ids)
            self.worker.mark_dirty()
        return deleted

    def _drop_file(self, stored_name: str) -> None:
        """Remove an original no row names any more. A store out of reach does not undo
        the delete (the rows are gone): the original is left for a later sweep."""
        try:
            self.files.delete(stored_name)
        except BlobsUnavailable as exc:
            log.warning("original %s left for a later sweep: %s", stored_name, exc)
