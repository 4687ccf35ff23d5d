"""Background ingestion: queued → parsing → embedding → indexed / failed(reason).

One worker thread takes document ids from a queue, so ingestion never runs on a
request path. SQLite is written before FAISS; the FAISS file is checkpointed after a
quiet period, and anything a crash loses is caught up from SQLite on the next start.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.chunking import chunk_page
from retrieval.embedder import Embedder, Vectors
from retrieval.index import FaissIndex
from retrieval.parsers import ParseError, parse_document
from retrieval.store import DocumentGone, DocumentStore
from retrieval.types import ChunkSpan, DocumentStatus
from retrieval.uploads import UploadFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestConfig:
    chunk_tokens: int = 200
    chunk_overlap_tokens: int = 40
    embed_batch_size: int = 32
    checkpoint_seconds: float = 5.0


class IngestWorker:
    def __init__(
        self,
        store: DocumentStore,
        files: UploadFiles,
        embedder: Embedder,
        index: FaissIndex,
        index_dir: Path,
        config: IngestConfig,
    ):
        self.store = store
        self.files = files
        self.embedder = embedder
        self.index = index
        self.index_dir = index_dir
        self.config = config
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._dirty = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragdesk-ingest", daemon=True)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._thread.start()
        for document_id in self.store.unfinished_documents():
            self.enqueue(document_id)  # resume work a crash or restart interrupted

    def enqueue(self, document_id: int) -> None:
        self._queue.put(document_id)

    def mark_dirty(self) -> None:
        self._dirty.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)
        self.checkpoint()

    def checkpoint(self) -> None:
        if self._dirty.is_set():
            self._dirty.clear()
            self.index.save(self.index_dir)

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self.config.checkpoint_seconds or None)
            except queue.Empty:
                self.checkpoint()  # quiet period: persist what was added
                continue
            if item is None:
                return
            try:
                self.ingest(item)
            except DocumentGone:
                log.info("document %s was deleted during ingestion", item)
            except Exception:  # keep the worker alive whatever one document does
                log.exception("ingestion of document %s failed unexpectedly", item)
                self._fail(item, "internal error while ingesting; see the server log")

    def ingest(self, document_id: int) -> None:
        document = self.store.get_document(document_id)
        if document is None or document.status.is_terminal:
            return
        started = time.perf_counter()
        self.store.set_status(document_id, DocumentStatus.PARSING)
        try:
            data = self.files.read(document.stored_name)
            parsed = parse_document(data, document.kind, document.filename)
        except ParseError as exc:
            self._fail(document_id, exc.reason)
            return
        except FileNotFoundError:
            self._fail(document_id, "the uploaded file is missing from disk")
            return
        chunks = [
            span
            for page in parsed.pages
            for span in chunk_page(
                page,
                max_tokens=self.config.chunk_tokens,
                overlap_tokens=self.config.chunk_overlap_tokens,
                count_tokens=self.embedder.count_tokens,
            )
        ]
        chunk_ids = self.store.replace_content(document_id, parsed, chunks)
        self.store.set_status(document_id, DocumentStatus.EMBEDDING)
        texts = [embedding_text(parsed.title, chunk) for chunk in chunks]
        vectors = self._embed(texts)
        self.store.save_embeddings(chunk_ids, self.embedder.model_id, vectors)
        self.store.set_status(document_id, DocumentStatus.INDEXED)
        self.index.add(np.asarray(chunk_ids, dtype=np.int64), vectors)
        if self.store.get_document(document_id) is None:  # deleted while we were adding
            self.index.remove(np.asarray(chunk_ids, dtype=np.int64))
        self.mark_dirty()
        log.info(
            "indexed document %s: %d pages, %d chunks in %.2fs",
            document_id,
            len(parsed.pages),
            len(chunks),
            time.perf_counter() - started,
        )

    def _embed(self, texts: list[str]) -> Vectors:
        size = self.config.embed_batch_size * 4  # whole batches per call, few Python round trips
        parts = [self.embedder.embed_batch(texts[i : i + size]) for i in range(0, len(texts), size)]
        if not parts:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        return np.concatenate(parts)

    def _fail(self, document_id: int, reason: str) -> None:
        with contextlib.suppress(DocumentGone):  # deleted meanwhile: nothing to mark
            self.store.set_status(document_id, DocumentStatus.FAILED, reason)


def embedding_text(title: str, chunk: ChunkSpan) -> str:
    """What is embedded: the chunk with its document title and heading as context."""
    context = " — ".join(part for part in (title, chunk.heading) if part)
    return f"{context}\n{chunk.text}" if context else chunk.text
