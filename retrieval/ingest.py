"""Background ingestion: queued → parsing → embedding → indexed / failed(reason).

Document ids are queued, so ingestion never runs on a request path. A few parse slots
take them fairly across collections (``retrieval/parse_slots.py``: one user's slow file
holds one slot, not everybody's uploads); one worker thread chunks, embeds and indexes
what they parsed, in batches. SQLite is written before FAISS; the FAISS file is
checkpointed after a quiet period, and anything a crash loses is caught up from SQLite
on the next start.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.chunking import chunk_page
from retrieval.disk import is_disk_full
from retrieval.embedder import Embedder, Vectors
from retrieval.embedding_cache import CacheUsage, EmbeddingCache
from retrieval.embedding_cache import embedding_text as embedding_text  # re-exported
from retrieval.index import FaissIndex
from retrieval.parse_slots import ParseSlots
from retrieval.parsers import ParseError, parse_document
from retrieval.parsers.isolated import ParserUnavailable
from retrieval.store import DocumentGone, DocumentStore, stored_title
from retrieval.types import DocumentKind, DocumentStatus, ParsedDocument
from retrieval.uploads import UploadFiles
from retrieval.vector_sync import restructure_if_needed

log = logging.getLogger(__name__)

Parse = Callable[[bytes, DocumentKind, str], ParsedDocument]
# (document id, stage, detail): stages "parsed", "embedded", "indexed", "failed" (detail:
# the reason); what the ``ragdesk ingest`` progress display shows per file.
Progress = Callable[[int, str, str | None], None]

# Texts embedded in one call: a stop (or, later, another upload) waits for one slice at
# most, never for a whole large document. Each slice's vectors go to the embedding cache,
# so a document interrupted by a stop resumes where it was on the next start.
EMBED_SLICE = 512


class IngestStopped(Exception):
    """The worker was told to stop between two slices; its documents resume on next start."""


@dataclass(frozen=True)
class IngestConfig:
    chunk_tokens: int = 200
    chunk_overlap_tokens: int = 40
    checkpoint_seconds: float = 5.0  # quiet time before saving; 0 saves after every batch
    max_checkpoint_interval: float = 60.0  # save at least this often under constant load
    max_batch_documents: int = 32
    # Documents parsed at once (the isolated parser runs as many child processes, two by
    # default); a collection holds at most all but one of them.
    parse_processes: int = 2
    embedding_cache: bool = True  # reuse vectors of texts embedded before (by content hash)
    # Cached vectors no live passage needs, kept up to this size (LRU); None = never prune.
    embedding_cache_max_bytes: int | None = 128 << 20


@dataclass(frozen=True)
class _Parsed:
    document_id: int
    document: ParsedDocument
    started: float


@dataclass(frozen=True)
class _Prepared:
    """A parsed, chunked and stored document waiting for its vectors."""

    document_id: int
    chunk_ids: list[int]
    texts: list[str]
    pages: int
    started: float
    kept: frozenset[int] = frozenset()  # ids the document held before: maybe still indexed


class IngestWorker:
    def __init__(
        self,
        store: DocumentStore,
        files: UploadFiles,
        embedder: Embedder,
        index: FaissIndex,
        index_dir: Path,
        config: IngestConfig,
        parse: Parse = parse_document,
        progress: Progress | None = None,
    ):
        self.store = store
        self.files = files
        self.embedder = embedder
        self.index = index
        self.index_dir = index_dir
        self.config = config
        self.parse = parse  # production passes IsolatedParser.parse: a child process
        self.progress = progress
        self.cache = EmbeddingCache(store.db) if config.embedding_cache else None
        self.cache_usage: CacheUsage | None = None  # as of the last prune
        self._prune_due = threading.Event()
        self._prune_due.set()  # once after start: the library may have changed meanwhile
        self._last_prune = time.monotonic()
        self._slots: ParseSlots[_Parsed] = ParseSlots(
            self._parse_safely,
            self._owner_of,
            slots=config.parse_processes,
            backlog=config.max_batch_documents,
        )
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._last_checkpoint = time.monotonic()
        self._checkpoint_failing = False
        self._thread = threading.Thread(target=self._run, name="ragdesk-ingest", daemon=True)

    @property
    def pending(self) -> int:
        return len(self._slots.waiting) + self._slots.results.qsize()

    def start(self) -> None:
        self._thread.start()
        self._slots.start()
        for document_id in self.store.unfinished_documents():
            self.enqueue(document_id)  # resume work a crash or restart interrupted

    def enqueue(self, document_id: int) -> None:
        self._slots.put(document_id)

    def _owner_of(self, document_id: int) -> int | None:
        document = self.store.get_document(document_id)
        return document.collection_id if document is not None else None

    def mark_dirty(self) -> None:
        self._dirty.set()
        self._prune_due.set()  # a delete may have left cached vectors spare

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._slots.alive

    def stop(self, timeout: float = 30.0) -> bool:
        """Finish the current batch, checkpoint, stop; False if that took longer than timeout
        (a parse in progress may: the parser's close ends it).

        Documents still queued stay ``queued`` in SQLite and resume on the next start.
        """
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self._slots.stop()  # wakes the worker if it waits for parsed documents
        self._thread.join(timeout)
        stopped = self._slots.join(deadline) and not self._thread.is_alive()
        if not stopped:
            log.warning("ingestion still busy after %.0fs; SQLite has its work", timeout)
        return stopped

    def checkpoint(self) -> None:
        """Save the index if it changed. Only the worker thread calls this while it runs."""
        if not self._dirty.is_set():
            return
        self._dirty.clear()
        try:
            restructure_if_needed(self.index, self.store)  # grown past the IVF threshold?
            self.index.save(self.index_dir)
            self._last_checkpoint = time.monotonic()
        except Exception as exc:  # disk full, permissions: SQLite has everything, try again
            self._dirty.set()
            self._checkpoint_failed(exc)
        else:
            if self._checkpoint_failing:
                self._checkpoint_failing = False
                log.warning("the vector index is checkpointed again")

    def _checkpoint_failed(self, exc: Exception) -> None:
        """Told once per spell of failures (a full disk would otherwise log a traceback
        every few seconds until someone frees space); the save is atomic, so nothing
        half-written is left, and SQLite keeps everything meanwhile."""
        if self._checkpoint_failing:
            return
        self._checkpoint_failing = True
        if is_disk_full(exc):
            log.error("could not checkpoint the vector index: the disk is full; will retry")
        else:
            log.exception("could not checkpoint the vector index; will retry")

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                # Idle, it still wakes now and then (a damaged index to rebuild, a prune).
                idle = self.config.checkpoint_seconds or self.config.max_checkpoint_interval
                first = self._slots.results.get(timeout=idle)
            except queue.Empty:
                if self.index.damaged:
                    self._dirty.set()  # the checkpoint rebuilds it from SQLite
                self.checkpoint()  # quiet period: persist what was added
                if self._prune_due.is_set():
                    self.prune_cache()
                continue
            batch = self._drain(first)
            try:
                self._ingest_parsed(batch)
            except IngestStopped:
                ids = [item.document_id for item in batch]
                log.info("stopped while embedding documents %s; they resume on the next start", ids)
            except Exception:  # keep the worker alive whatever a batch does
                ids = [item.document_id for item in batch]
                log.exception("ingestion of documents %s failed unexpectedly", ids)
            finally:
                for item in batch:
                    self._slots.finished(item.document_id)
            overdue = time.monotonic() - self._last_checkpoint > self.config.max_checkpoint_interval
            if overdue or not self.config.checkpoint_seconds:
                self.checkpoint()
            self._prune_due.set()
            if time.monotonic() - self._last_prune > self.config.max_checkpoint_interval:
                self.prune_cache()  # under constant load, now and then
        self.checkpoint()

    def prune_cache(self) -> None:
        """Evict spare cached vectors beyond the budget (see retrieval/embedding_cache.py).

        Only the worker thread calls this while it runs: it is the thread that writes passages.
        """
        budget = self.config.embedding_cache_max_bytes
        self._prune_due.clear()
        self._last_prune = time.monotonic()
        if budget is None:
            return
        try:
            report = EmbeddingCache(self.store.db).prune(budget, self.embedder.model_id)
        except Exception:  # never fatal: the cache only grows until the next try
            log.exception("pruning the embedding cache failed; will retry")
            self._prune_due.set()
            return
        first, self.cache_usage = self.cache_usage is None, report.usage
        if report.evicted_rows or first:  # its size once per start, then what changes it
            usage = report.usage
            log.info(
                "embedding cache: evicted %d unused vectors (%.1f MiB) in %.2fs; "
                "%d vectors (%.1f MiB) kept, %d of them unused (%.1f MiB)",
                report.evicted_rows,
                report.evicted_bytes / 2**20,
                report.seconds,
                usage.rows,
                usage.bytes / 2**20,
                usage.spare_rows,
                usage.spare_bytes / 2**20,
            )

    def _drain(self, first: _Parsed | None) -> list[_Parsed]:
        """The first parsed document plus whatever else is already parsed, up to a batch."""
        batch: list[_Parsed] = []
        item = first
        while item is not None and not self._stopping.is_set():
            batch.append(item)
            if len(batch) >= self.config.max_batch_documents:
                break
            try:
                item = self._slots.results.get_nowait()
            except queue.Empty:
                break
        return batch

    def ingest(self, document_id: int) -> None:
        self.ingest_many([document_id])

    def ingest_many(self, document_ids: list[int]) -> None:
        """Parse each document in the calling thread, then :meth:`_ingest_parsed` them."""
        self._ingest_parsed([p for p in map(self._parse_safely, document_ids) if p is not None])

    def _ingest_parsed(self, parsed: list[_Parsed]) -> None:
        """Chunk and store each document, embed all their chunks together, then index each.

        One embedding call over many documents fills whole, length-sorted batches: bulk
        uploads run at the embedder's own speed instead of paying for ragged batches.
        """
        prepared = [p for p in map(self._prepare_safely, parsed) if p is not None]
        try:
            # One call for all: sorted by length, the embedder's batches stay whole.
            vectors = self._embed([text for p in prepared for text in p.texts])
        except IngestStopped:
            raise
        except Exception:
            log.exception("embedding %d documents together failed; one by one", len(prepared))
            for item in prepared:
                self._embed_and_index_alone(item)
            return
        offset = 0
        for item in prepared:
            self._report(item.document_id, "embedded")
            item_vectors = vectors[offset : offset + len(item.chunk_ids)]
            offset += len(item.chunk_ids)
            self._index_safely(item, item_vectors)

    def _embed_and_index_alone(self, item: _Prepared) -> None:
        try:
            vectors = self._embed(item.texts)
        except IngestStopped:
            raise
        except Exception:
            log.exception("embedding document %s failed", item.document_id)
            self._fail(item.document_id, "internal error while embedding; see the server log")
            return
        self._report(item.document_id, "embedded")
        self._index_safely(item, vectors)

    def _embed(self, texts: list[str]) -> Vectors:
        """Vectors for ``texts`` a slice at a time; IngestStopped between slices on stop.
        Slices are cut from the texts sorted by length, so the embedder's batches stay
        even across the documents of a batch, and the vectors are put back in order."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        parts: list[Vectors] = []
        for start in range(0, len(texts), EMBED_SLICE):
            if self._stopping.is_set():
                raise IngestStopped
            part = [texts[i] for i in order[start : start + EMBED_SLICE]]
            cache = self.cache
            parts.append(
                self.embedder.embed_batch(part)
                if cache is None
                else cache.embed(self.embedder, part)
            )
        if not parts:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        vectors = np.concatenate(parts)
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order))
        return vectors[inverse]

    def _index_safely(self, item: _Prepared, vectors: Vectors) -> None:
        try:
            self._index(item, vectors)
        except DocumentGone:
            log.info("document %s was deleted during ingestion", item.document_id)
        except Exception:  # one document's failure must not touch the others
            log.exception("indexing document %s failed", item.document_id)
            self._fail(item.document_id, "internal error while indexing; see the server log")

    def _parse_safely(self, document_id: int) -> _Parsed | None:
        """Parse one document (in a parse slot, or the caller's thread); None when there is
        nothing more to do: failures are recorded here."""
        try:
            return self._parse(document_id)
        except DocumentGone:
            log.info("document %s was deleted during ingestion", document_id)
        except Exception:  # one document's failure must not touch the others
            log.exception("parsing document %s failed", document_id)
            self._fail(document_id, "internal error while parsing; see the server log")
        return None

    def _parse(self, document_id: int) -> _Parsed | None:
        document = self.store.get_document(document_id)
        if document is None or document.status.is_terminal:
            return None
        started = time.perf_counter()
        self.store.set_status(document_id, DocumentStatus.PARSING)
        try:
            data = self.files.read(document.stored_name)
            parsed = self.parse(data, document.kind, document.filename)
        except ParseError as exc:
            self._fail(document_id, exc.reason)
            return None
        except FileNotFoundError:
            self._fail(document_id, "the uploaded file is missing from disk")
            return None
        except ParserUnavailable:  # not the file's fault: it waits for the next start
            log.warning("parser unavailable; document %s stays queued", document_id)
            self.store.set_status(document_id, DocumentStatus.QUEUED)
            return None
        return _Parsed(document_id, parsed, started)

    def _prepare_safely(self, item: _Parsed) -> _Prepared | None:
        try:
            return self._prepare(item)
        except Exception:  # one document's failure must not touch the others
            log.exception("preparing document %s failed", item.document_id)
            self._fail(item.document_id, "internal error while parsing; see the server log")
            return None

    def _prepare(self, item: _Parsed) -> _Prepared | None:
        """Chunk and store one parsed document; None when it was deleted meanwhile."""
        document_id, parsed = item.document_id, item.document
        try:
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
            stored = self.store.replace_content(document_id, parsed, chunks)
            # What the parse left out stays on the document, indexed or not (its ``error``).
            note = " ".join(parsed.warnings) or None
            self.store.set_status(document_id, DocumentStatus.EMBEDDING, note)
            self._report(document_id, "parsed", f"{len(chunks)} chunks")
        except DocumentGone:
            log.info("document %s was deleted during ingestion", document_id)
            return None
        title = stored_title(parsed.title)
        texts = [embedding_text(title, chunk) for chunk in chunks]
        return _Prepared(
            document_id, stored.ids, texts, len(parsed.pages), item.started, stored.kept
        )

    def _index(self, item: _Prepared, vectors: Vectors) -> None:
        """SQLite first (the source of truth), then FAISS."""
        self.store.save_embeddings(
            item.document_id, item.chunk_ids, self.embedder.model_id, vectors
        )
        ids = np.asarray(item.chunk_ids, dtype=np.int64)
        if item.kept:  # a passage kept its id: its old vector must not stay beside the new
            self.index.remove(np.fromiter(item.kept, dtype=np.int64, count=len(item.kept)))
        self.index.add(ids, vectors)
        if self.store.get_document(item.document_id) is None:  # deleted while we were adding
            self.index.remove(ids)
        self.mark_dirty()
        self._report(item.document_id, "indexed", f"{len(item.chunk_ids)} chunks")
        log.info(
            "indexed document %s: %d pages, %d chunks in %.2fs",
            item.document_id,
            item.pages,
            len(item.chunk_ids),
            time.perf_counter() - item.started,
        )

    def _fail(self, document_id: int, reason: str) -> None:
        """Mark a document failed, unless it is gone or already finished."""
        document = self.store.get_document(document_id)
        if document is None or document.status is DocumentStatus.INDEXED:
            return
        with contextlib.suppress(DocumentGone):  # deleted meanwhile: nothing to mark
            self.store.set_status(document_id, DocumentStatus.FAILED, reason)
            self._report(document_id, "failed", reason)

    def _report(self, document_id: int, stage: str, detail: str | None = None) -> None:
        if self.progress is not None:
            try:
                self.progress(document_id, stage, detail)
            except Exception:  # a display problem must never fail ingestion
                log.exception("progress callback failed")
