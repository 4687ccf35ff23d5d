"""Background ingestion: queued → parsing → embedding → indexed / failed(reason).

Document ids are queued, so ingestion never runs on a request path. A few parse slots
take them fairly across collections (``retrieval/parse_slots.py``: one user's slow file
holds one slot, not everybody's uploads) and chunk what they parsed; one worker thread
stores, embeds and indexes it, a slice of texts at a time shared fairly among the
documents in progress (``retrieval/embed_slices.py``: one collection's large document
never holds up another's upload). SQLite is written before FAISS; the FAISS file is
checkpointed after a quiet period, and anything a crash loses is caught up from SQLite
on the next start.

Several processes may ingest from one database: each takes a document's lease before it
parses it and renews it while it works (``retrieval/leases.py``), so no document is worked
on twice, and one whose process died is finished by another once its lease runs out. Work
arrives in two ways: this process's uploads (``enqueue``, at once), and a poll of the
database every ``poll_s`` for documents nobody holds (other processes' uploads, leases run
out).
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from retrieval.blobs import BlobsUnavailable, Originals
from retrieval.chunking import chunk_page
from retrieval.collections import Workspaces
from retrieval.disk import is_disk_full
from retrieval.embed_slices import Embedding, share_slice
from retrieval.embedder import Embedder, Vectors
from retrieval.embedding_cache import CacheUsage, EmbeddingCache
from retrieval.embedding_cache import embedding_text as embedding_text  # re-exported
from retrieval.index import FaissIndex
from retrieval.leases import Leases
from retrieval.parse_slots import ParseSlots
from retrieval.parsers import ParseError, parse_document
from retrieval.parsers.isolated import ParserUnavailable
from retrieval.parsers.page_boxes import MAX_BOXES, passage_boxes
from retrieval.pg_vectors import PgVectorIndex
from retrieval.records import DocumentRecord
from retrieval.store import DocumentGone, DocumentStore, LeaseLost, stored_title
from retrieval.types import Box, ChunkSpan, DocumentKind, DocumentStatus, ParsedDocument
from retrieval.vector_sync import restructure_if_needed

log = logging.getLogger(__name__)

Parse = Callable[[bytes, DocumentKind, str], ParsedDocument]
# A parse with OCR of scanned pages forced on or off (a collection's switch overrides the
# deployment's default for its files: retrieval.collections).
ParseWithOcr = Callable[[bytes, DocumentKind, str, bool], ParsedDocument]
# Where (page, text) passages stand on their PDF pages (retrieval/parsers/page_boxes.py).
Locate = Callable[[bytes, list[tuple[int, str]]], list[list[Box]]]
# (document id, stage, detail): stages "parsed", "embedded", "indexed", "failed" (detail:
# the reason); what the ``ragdesk ingest`` progress display shows per file.
Progress = Callable[[int, str, str | None], None]

# Texts embedded in one call: a stop, a delete or another upload waits for one slice at
# most, never for a whole large document. Each slice's vectors go to the embedding cache,
# so a document interrupted by a stop resumes where it was on the next start.
EMBED_SLICE = 512
# PDFs with more passages are not boxed on their pages (the search would cost minutes).
MAX_BOXED_PASSAGES = 20_000
# A document a full disk stopped is queued again this long after (it stays ``queued``).
DISK_RETRY_S = 30.0
# A poll of the database brings at most this many documents of each collection per parse
# backlog entry (more could not be in flight anyway; the next poll brings the rest).
POLL_PER_OWNER = 2


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
    # A document cut into more passages fails with a reason (memory stays bounded by it).
    max_document_passages: int = 100_000
    # A document's lease (retrieval/leases.py): renewed every third of it while the worker
    # works on it; a process that dies holding one leaves it to another after this long.
    lease_s: float = 60.0
    # How often a started worker looks in the database for documents nobody holds.
    poll_s: float = 2.0


@dataclass(frozen=True)
class _Parsed:
    document_id: int
    owner: int
    document: ParsedDocument
    chunks: list[ChunkSpan]
    started: float


@dataclass(frozen=True)
class _Prepared:
    """A parsed, chunked and stored document waiting for its vectors."""

    document_id: int
    owner: int
    chunk_ids: list[int]
    embedding: Embedding
    pages: int
    started: float
    kept: frozenset[int] = frozenset()  # ids the document held before: maybe still indexed


class IngestWorker:
    def __init__(
        self,
        store: DocumentStore,
        files: Originals,
        embedder: Embedder,
        index: FaissIndex | PgVectorIndex,
        index_dir: Path,
        config: IngestConfig,
        parse: Parse = parse_document,
        progress: Progress | None = None,
        locate: Locate = passage_boxes,
        parse_with_ocr: ParseWithOcr | None = None,
        leases: Leases | None = None,
    ):
        self.store = store
        # Production passes the data directory's (which hands over a dead process's leases
        # at once); without it, they run out.
        self.leases = leases or Leases(store.db, lease_s=config.lease_s)
        # Production passes IsolatedParser.parse_with_ocr; without it a collection's OCR
        # switch is not honoured and every file parses with ``parse``.
        self.parse_with_ocr = parse_with_ocr
        self.workspaces = Workspaces(store.db)
        self.files = files
        self.embedder = embedder
        self.index = index
        self.index_dir = index_dir
        self.config = config
        self.parse = parse  # production passes IsolatedParser.parse: a child process
        self.locate = locate  # and IsolatedParser.passage_boxes
        self.progress = progress
        self.cache = EmbeddingCache(store.db) if config.embedding_cache else None
        self.cache_usage: CacheUsage | None = None  # as of the last prune
        self._prune_due = threading.Event()
        self._prune_due.set()  # once after start: the library may have changed meanwhile
        self._reclaim = False  # the disk is full: the next prune keeps no spare vector
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
        self._embedding = 0  # documents the worker thread is embedding
        self._held: deque[_Parsed] = deque()  # parsed, waiting to join the slices
        self._taken: set[int] = set()  # taken to embed and not finished yet
        self._retry: dict[int, float] = {}  # document id -> when to queue it again (disk full)
        self._retry_lock = threading.Lock()
        self._disk_told = False
        self._thread = threading.Thread(target=self._run, name="ragdesk-ingest", daemon=True)
        self._started = False
        # Leases held: document id -> the claim's turn (a renewal that finds a lease gone
        # drops it only if it is not a newer claim of the same document meanwhile).
        self._leased: dict[int, int] = {}
        self._lost: set[int] = set()  # leases taken over by another replica: work stops
        self._turns = 0
        self._leases_lock = threading.Lock()
        self._keeper: threading.Thread | None = None
        self._keeper_stop = threading.Event()

    @property
    def pending(self) -> int:
        return (
            len(self._slots.waiting)
            + self._slots.results.qsize()
            + len(self._held)
            + self._embedding
            + len(self._retry)
        )

    def start(self) -> None:
        self.leases.take_over()  # the leases of the process before us on this data dir
        self._started = True
        self._thread.start()
        self._slots.start()
        self._poll()  # resume work a crash or restart interrupted, and what others queued
        self._start_keeper(poll=True)

    def enqueue(self, document_id: int) -> None:
        """Work on the document at once (this process's upload). Before :meth:`start`
        (a web front's worker is never started) nothing: the document waits in the
        database for a worker's poll."""
        if self._started:
            self._slots.put(document_id)

    def _owner_of(self, document_id: int) -> int | None:
        document = self.store.get_document(document_id)
        return document.collection_id if document is not None else None

    def mark_dirty(self) -> None:
        self._dirty.set()
        self._prune_due.set()  # a delete may have left cached vectors spare

    @property
    def alive(self) -> bool:
        """Not stopped by a failure: its threads run (a worker never started, a web
        front's, has none to lose)."""
        if not self._started:
            return not self._stopping.is_set()
        return self._thread.is_alive() and self._slots.alive

    def stop(self, timeout: float = 30.0) -> bool:
        """Finish the current batch, checkpoint, stop; False if that took longer than timeout
        (a parse in progress may: the parser's close ends it).

        Documents still queued stay ``queued`` in SQLite and resume on the next start; the
        leases held are given back (when everything stopped), so another process may take
        them at once.
        """
        deadline = time.monotonic() + timeout
        self._stopping.set()
        if not self._started:  # a front's: only the index's deletions to save
            self.checkpoint()
            return True
        self._slots.stop()  # wakes the worker if it waits for parsed documents
        self._thread.join(timeout)
        stopped = self._slots.join(deadline) and not self._thread.is_alive()
        self._stop_keeper()
        if not stopped:  # still writing: its leases run out, never under its feet
            log.warning("ingestion still busy after %.0fs; SQLite has its work", timeout)
            return False
        with self._leases_lock:
            held = list(self._leased)
            self._leased.clear()
        try:
            self.leases.release(held)
        except Exception:  # the database is gone: they run out instead
            log.exception("could not give back the leases of documents %s", sorted(held))
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
        active: list[_Prepared] = []  # stored, partly embedded: they share the slices
        while not self._stopping.is_set():
            try:
                self._requeue_due()
                arrived = self._take_parsed({item.owner for item in active}, len(active))
                if arrived is None:  # idle
                    if self.index.damaged:
                        self._dirty.set()  # the checkpoint rebuilds it from SQLite
                    self.checkpoint()  # quiet period: persist what was added
                    if self._prune_due.is_set():
                        self.prune_cache()
                    continue
                active += self._start(arrived)
                active = self._embed_round(active)
            except IngestStopped:
                ids = [item.document_id for item in active]
                log.info("stopped while embedding documents %s; they resume on the next start", ids)
                break
            except Exception:  # keep the worker alive whatever a round does
                log.exception("ingestion of documents %s failed unexpectedly", sorted(self._taken))
                for document_id in list(self._taken):  # unfinished in SQLite: taken again
                    self._finish(document_id, release=False)  # when their leases run out
                active = []
            finally:
                self._embedding = len(active)
            self._after_round()
        self.checkpoint()

    def _after_round(self) -> None:
        overdue = time.monotonic() - self._last_checkpoint > self.config.max_checkpoint_interval
        if overdue or not self.config.checkpoint_seconds:
            self.checkpoint()
        self._prune_due.set()
        if (
            self._reclaim
            or time.monotonic() - self._last_prune > self.config.max_checkpoint_interval
        ):
            self.prune_cache()  # under constant load, now and then; at once for a full disk

    def give_back_space(self) -> int:
        """A write of users' data failed for space: the next prune evicts every spare
        cached vector (their pages in SQLite are reused for the data). Returns 0: the
        worker thread does it, soon (see :meth:`prune_cache`)."""
        self._reclaim = True
        self._prune_due.set()
        return 0

    def prune_cache(self) -> None:
        """Evict spare cached vectors beyond the budget (see retrieval/embedding_cache.py);
        all of them after :meth:`give_back_space`.

        Only the worker thread calls this while it runs: it is the thread that writes passages.
        """
        budget = 0 if self._reclaim else self.config.embedding_cache_max_bytes
        self._reclaim = False
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

    def _take_parsed(self, owners: set[int], embedding: int) -> list[_Parsed] | None:
        """Parsed documents to join the slices: while fewer than a batch are embedding, the
        next ones handed over; past that, only those of a collection with nothing in
        progress (the others wait, a batch at most, in arrival order): however many large
        files one collection sends, another's upload joins the next slice. With nothing in
        progress it waits for the first; None means the worker was idle that long (or is
        stopping)."""
        batch = self.config.max_batch_documents
        if not embedding and not self._held:
            # Idle, it still wakes now and then (a damaged index to rebuild, a prune).
            idle = self.config.checkpoint_seconds or self.config.max_checkpoint_interval
            with self._retry_lock:  # and when a document a full disk sent back is due
                due = min(self._retry.values(), default=math.inf) - time.monotonic()
            try:
                first = self._slots.results.get(timeout=max(0.0, min(idle, due)))
            except queue.Empty:
                return None
            if first is None:  # stop() woke us
                return None
            self._held.append(first)
        while len(self._held) < batch:
            try:
                item = self._slots.results.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._held.append(item)
        arrived: list[_Parsed] = []
        for item in list(self._held):
            if embedding + len(arrived) < batch or item.owner not in owners:
                self._held.remove(item)
                arrived.append(item)
                owners.add(item.owner)
        self._taken.update(item.document_id for item in arrived)
        return arrived

    def ingest(self, document_id: int) -> None:
        self.ingest_many([document_id])

    def ingest_many(self, document_ids: list[int]) -> None:
        """Parse each document in the calling thread, then store, embed and index them
        together, as the worker thread would (each under its lease: one another process
        holds is left to it)."""
        self.leases.take_over()
        temporary = self._start_keeper(poll=False)  # renews the leases meanwhile
        try:
            parsed = [p for p in map(self._parse_safely, document_ids) if p is not None]
            active = self._start(parsed)
            while active:
                active = self._embed_round(active)
        finally:
            if temporary:
                self._stop_keeper()
            for document_id in document_ids:
                self._release(document_id, retrying=False)

    def _finish(self, document_id: int, *, release: bool = True) -> None:
        """The document is indexed, failed, dropped or left for later: its lease is given
        back (or, ``release`` False, left to run out) and its parse slot bookkeeping ends,
        once, whatever path gets here (a second call could end a newer turn of the same
        document, queued again meanwhile)."""
        if document_id in self._taken:
            self._taken.discard(document_id)
            if release:
                self._release(document_id)
            else:
                self._let_lapse(document_id)
            self._slots.finished(document_id)

    # --- leases (retrieval/leases.py) --------------------------------------------------------
    def _claim(self, document_id: int) -> bool:
        if not self.leases.claim(document_id):
            return False
        with self._leases_lock:
            self._turns += 1
            self._leased[document_id] = self._turns
            self._lost.discard(document_id)
        return True

    def _release(self, document_id: int, *, retrying: bool = True) -> None:
        """Give the document's lease back, unless it waits for a retry (a full disk: it
        stays ours, renewed, until it is queued again; ``retrying`` False ignores that)."""
        with self._leases_lock:
            self._lost.discard(document_id)
            if document_id not in self._leased:
                return
            if retrying:
                with self._retry_lock:
                    if document_id in self._retry:
                        return
            del self._leased[document_id]
        try:
            self.leases.release([document_id])
        except Exception:  # the database refused: the lease runs out instead
            log.exception("could not give back the lease of document %s", document_id)

    def _let_lapse(self, document_id: int) -> None:
        """Stop renewing the document's lease: it runs out, then this or another process
        takes the document again (a parser that could not start, an unexpected failure:
        retried a lease later, not in a loop)."""
        with self._leases_lock:
            self._leased.pop(document_id, None)
            self._lost.discard(document_id)

    def _lost_leases(self, document_ids: list[int]) -> set[int]:
        with self._leases_lock:
            return self._lost.intersection(document_ids)

    def _drop_taken_over(self, document_id: int) -> None:
        log.warning(
            "document %s: its lease ran out and another process took it over; "
            "this one stops working on it",
            document_id,
        )
        self._finish(document_id, release=False)

    def _start_keeper(self, *, poll: bool) -> bool:
        """Start the thread that renews the leases held (and, ``poll``, looks for work in
        the database); False when it runs already."""
        if self._keeper is not None and self._keeper.is_alive():
            return False
        self._keeper_stop.clear()
        self._keeper = threading.Thread(
            target=self._keep_leases, args=(poll,), name="ragdesk-ingest-leases", daemon=True
        )
        self._keeper.start()
        return True

    def _stop_keeper(self) -> None:
        self._keeper_stop.set()
        if self._keeper is not None:
            self._keeper.join()

    def _keep_leases(self, poll: bool) -> None:
        """Renew the leases every third of a lease; poll every ``poll_s``."""
        renew_s = max(0.05, self.config.lease_s / 3)
        poll_s = max(0.05, self.config.poll_s)
        now = time.monotonic()
        next_renew, next_poll = now + renew_s, (now + poll_s if poll else math.inf)
        while not self._keeper_stop.wait(max(0.0, min(next_renew, next_poll) - now)):
            now = time.monotonic()
            try:
                if now >= next_renew:
                    next_renew = now + renew_s
                    self._renew()
                if now >= next_poll:
                    next_poll = now + poll_s
                    self._poll()
            except Exception:  # the database is away a moment: try again next time
                log.exception("renewing ingestion leases or polling for work failed")
            now = time.monotonic()

    def _renew(self) -> None:
        with self._leases_lock:
            held = dict(self._leased)
        if not held:
            return
        kept = self.leases.renew(held)
        with self._leases_lock:
            for document_id in held.keys() - kept:
                if self._leased.get(document_id) == held[document_id]:  # not claimed again
                    del self._leased[document_id]
                    self._lost.add(document_id)  # deleted, or taken over: work stops

    def _poll(self) -> None:
        """Queue the documents in the database that nobody holds and this worker does not
        know yet (another process's uploads, leases that ran out)."""
        per_owner = POLL_PER_OWNER * max(1, self.config.max_batch_documents)
        for document_id, owner in self.leases.claimable(per_owner):
            if document_id not in self._slots.waiting:
                self._slots.waiting.put(document_id, owner)

    def _start(self, parsed: list[_Parsed]) -> list[_Prepared]:
        """Store each parsed document's passages; the ones with texts left to embed."""
        started: list[_Prepared] = []
        lost = self._lost_leases([item.document_id for item in parsed])
        for item in parsed:
            if item.document_id in lost:
                self._drop_taken_over(item.document_id)
                continue
            prepared = self._prepare_safely(item)
            if prepared is None:
                self._finish(item.document_id)
            else:
                started.append(prepared)
        return started

    def _embed_round(self, active: list[_Prepared]) -> list[_Prepared]:
        """Embed one slice shared among ``active`` (see retrieval/embed_slices.py), index
        the documents it completes; the ones still in progress. The portions that complete
        their documents are embedded first, in a call of their own, and indexed at once: a
        one-page upload waits for no large document's share. A document deleted meanwhile
        is dropped here: its work stops within a slice."""
        if self._stopping.is_set():
            raise IngestStopped
        ids = [item.document_id for item in active]
        live, lost = self.store.live_documents(ids), self._lost_leases(ids)
        for item in active:
            if item.document_id not in live:
                log.info("document %s was deleted during ingestion", item.document_id)
                self._finish(item.document_id)
            elif item.document_id in lost:
                self._drop_taken_over(item.document_id)
        active = [item for item in active if item.document_id in live - lost]
        counts = share_slice([(item.owner, item.embedding.left) for item in active], EMBED_SLICE)
        portions = [
            (item, item.embedding.next_texts(n)) for item, n in zip(active, counts, strict=True)
        ]
        # A document with no passage left to embed (none at all, too) is indexed now.
        finishing = [(item, part) for item, part in portions if len(part) == item.embedding.left]
        continuing = [
            (item, part) for item, part in portions if 0 < len(part) < item.embedding.left
        ]
        failed = self._embed_portions(finishing)
        for item, _ in finishing:
            if item.document_id not in failed:
                self._report(item.document_id, "embedded")
                self._index_safely(item, item.embedding.vectors())
            self._finish(item.document_id)
        failed |= self._embed_portions(continuing)
        for item, _ in continuing:
            if item.document_id in failed:
                self._finish(item.document_id)
        return [item for item in active if item.embedding.left and item.document_id not in failed]

    def _embed_portions(self, portions: list[tuple[_Prepared, list[str]]]) -> set[int]:
        """Embed the portions in one call (one by one if that fails: one document's bad
        text must not fail the others); the ids of documents that failed."""
        if not portions:
            return set()
        texts = [text for _, part in portions for text in part]
        try:
            vectors = self._embed(texts)
        except Exception as exc:
            if is_disk_full(exc):  # the embedding cache's rows: nobody's text is to blame
                for item, _ in portions:
                    self._retry_later(item.document_id)
                return {item.document_id for item, _ in portions}
            if len(portions) == 1:
                item = portions[0][0]
                log.exception("embedding document %s failed", item.document_id)
                self._fail(item.document_id, "internal error while embedding; see the server log")
                return {item.document_id}
            log.exception("embedding %d documents together failed; one by one", len(portions))
            failed: set[int] = set()
            for portion in portions:
                failed |= self._embed_portions([portion])
            return failed
        offset = 0
        for item, part in portions:
            item.embedding.add(vectors[offset : offset + len(part)])
            offset += len(part)
        return set()

    def _embed(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        cache = self.cache
        if cache is None:
            return self.embedder.embed_batch(texts)
        return cache.embed(self.embedder, texts)

    def _index_safely(self, item: _Prepared, vectors: Vectors) -> None:
        try:
            self._index(item, vectors)
        except DocumentGone:
            log.info("document %s was deleted during ingestion", item.document_id)
        except LeaseLost:
            self._drop_taken_over(item.document_id)
        except Exception as exc:  # one document's failure must not touch the others
            if is_disk_full(exc):
                self._retry_later(item.document_id)
                return
            log.exception("indexing document %s failed", item.document_id)
            self._fail(item.document_id, "internal error while indexing; see the server log")

    def _parse_safely(self, document_id: int) -> _Parsed | None:
        """Parse and chunk one document (in a parse slot, or the caller's thread); None when
        there is nothing more to do: failures are recorded here, and its lease is given
        back (unless it is to be retried)."""
        parsed = self._parse_recorded(document_id)
        if parsed is None:
            self._release(document_id)
        return parsed

    def _parse_recorded(self, document_id: int) -> _Parsed | None:
        try:
            return self._parse(document_id)
        except DocumentGone:
            log.info("document %s was deleted during ingestion", document_id)
        except Exception as exc:  # one document's failure must not touch the others
            if is_disk_full(exc):
                self._retry_later(document_id)
                return None
            log.exception("parsing document %s failed", document_id)
            self._fail(document_id, "internal error while parsing; see the server log")
        return None

    def _parse(self, document_id: int) -> _Parsed | None:
        document = self.store.get_document(document_id)
        if document is None or document.status.is_terminal:
            return None
        if not self._claim(document_id):  # another process works on it
            log.debug("document %s is held by another process; left to it", document_id)
            return None
        started = time.perf_counter()
        self.store.set_status(document_id, DocumentStatus.PARSING)
        try:
            data = self.files.read(document.stored_name)
            parsed = self._parse_for(document, data)
            chunks = self._chunk(parsed)
        except ParseError as exc:
            self._fail(document_id, exc.reason)
            return None
        except FileNotFoundError:
            self._fail(document_id, "the uploaded file is missing from disk")
            return None
        except BlobsUnavailable:  # not the file's fault: taken again later (logged there)
            self._retry_later(document_id, disk_full=False)
            return None
        except ParserUnavailable:  # not the file's fault: taken again when its lease runs out
            log.warning("parser unavailable; document %s stays queued", document_id)
            self.store.set_status(document_id, DocumentStatus.QUEUED)
            self._let_lapse(document_id)
            return None
        chunks = _region_boxed(parsed, chunks)  # text OCR read on a picture: no child call
        if document.kind is DocumentKind.PDF:
            chunks = self._boxed(document_id, data, chunks)
        return _Parsed(document_id, document.collection_id, parsed, chunks, started)

    def _parse_for(self, document: DocumentRecord, data: bytes) -> ParsedDocument:
        """Parse as the document's collection says: OCR on or off, or as deployed."""
        ocr = self.workspaces.ocr_of(document.collection_id)
        if ocr is None or self.parse_with_ocr is None:
            return self.parse(data, document.kind, document.filename)
        return self.parse_with_ocr(data, document.kind, document.filename, ocr)

    def _boxed(self, document_id: int, data: bytes, chunks: list[ChunkSpan]) -> list[ChunkSpan]:
        """The passages with the boxes they cover on their pages (those not boxed by their
        page's OCR regions already); unboxed when that fails (the text view still
        highlights them): never a reason to fail the document."""
        unboxed = [index for index, chunk in enumerate(chunks) if not chunk.boxes]
        if not unboxed or len(unboxed) > MAX_BOXED_PASSAGES:
            return chunks
        try:
            boxes = self.locate(data, [(chunks[i].page, chunks[i].text) for i in unboxed])
        except Exception as exc:  # a parser shut down meanwhile included: the text stays
            log.warning("document %s: passages not boxed on their pages (%s)", document_id, exc)
            return chunks
        if len(boxes) != len(unboxed):
            return chunks
        boxed = list(chunks)
        for index, found in zip(unboxed, boxes, strict=True):
            boxed[index] = replace(chunks[index], boxes=tuple(found))
        return boxed

    def _chunk(self, parsed: ParsedDocument) -> list[ChunkSpan]:
        """The document's passages; ParseError past ``max_document_passages`` (chunking
        stops there: a huge file costs no more than the cap)."""
        cap = self.config.max_document_passages
        chunks: list[ChunkSpan] = []
        for page in parsed.pages:
            chunks.extend(
                chunk_page(
                    page,
                    max_tokens=self.config.chunk_tokens,
                    overlap_tokens=self.config.chunk_overlap_tokens,
                    count_tokens=self.embedder.count_tokens,
                )
            )
            if len(chunks) > cap:
                raise ParseError(
                    f"the document has more than {cap:,} passages, the most one document may "
                    "have (max_document_passages); split it into smaller files"
                )
        return chunks

    def _prepare_safely(self, item: _Parsed) -> _Prepared | None:
        try:
            return self._prepare(item)
        except Exception as exc:  # one document's failure must not touch the others
            if is_disk_full(exc):
                self._retry_later(item.document_id)
                return None
            log.exception("preparing document %s failed", item.document_id)
            self._fail(item.document_id, "internal error while parsing; see the server log")
            return None

    def _prepare(self, item: _Parsed) -> _Prepared | None:
        """Store one parsed document's passages; None when it was deleted meanwhile."""
        document_id, parsed, chunks = item.document_id, item.document, item.chunks
        try:
            stored = self.store.replace_content(
                document_id,
                parsed,
                chunks,
                holder=self.leases.replica,
                lease_s=self.leases.lease_s,
            )
            # What the parse left out stays on the document, indexed or not (its ``error``).
            note = " ".join(parsed.warnings) or None
            self.store.set_status(
                document_id, DocumentStatus.EMBEDDING, note, holder=self.leases.replica
            )
            self._report(document_id, "parsed", f"{len(chunks)} chunks")
        except DocumentGone:
            log.info("document %s was deleted during ingestion", document_id)
            return None
        except LeaseLost:
            self._drop_taken_over(document_id)
            return None
        title = stored_title(parsed.title)
        texts = [embedding_text(title, chunk) for chunk in chunks]
        return _Prepared(
            document_id,
            item.owner,
            stored.ids,
            Embedding(texts, self.embedder.dimension),
            len(parsed.pages),
            item.started,
            stored.kept,
        )

    def _index(self, item: _Prepared, vectors: Vectors) -> None:
        """SQLite first (the source of truth), then FAISS."""
        self.store.save_embeddings(
            item.document_id,
            item.chunk_ids,
            self.embedder.model_id,
            vectors,
            holder=self.leases.replica,
        )
        ids = np.asarray(item.chunk_ids, dtype=np.int64)
        if item.kept:  # a passage kept its id: its old vector must not stay beside the new
            self.index.remove(np.fromiter(item.kept, dtype=np.int64, count=len(item.kept)))
        self.index.add(ids, vectors)
        if self.store.get_document(item.document_id) is None:  # deleted while we were adding
            self.index.remove(ids)
        self.mark_dirty()
        self._disk_told = False  # a write went through: a full disk is news again
        self._report(item.document_id, "indexed", f"{len(item.chunk_ids)} chunks")
        log.info(
            "indexed document %s: %d pages, %d chunks in %.2fs",
            item.document_id,
            item.pages,
            len(item.chunk_ids),
            time.perf_counter() - item.started,
        )

    def _retry_later(self, document_id: int, *, disk_full: bool = True) -> None:
        """A full disk (or a store of originals out of reach) stopped this document: no
        fault of its own, so it goes back to the queue (``queued``) and is taken again in
        DISK_RETRY_S; told once per spell."""
        with self._retry_lock:
            if disk_full and not self._disk_told:  # once until a document is indexed again
                self._disk_told = True
                log.error(
                    "the disk is full: documents go back to the queue and are retried every "
                    "%.0f s until it has room",
                    DISK_RETRY_S,
                )
            self._retry[document_id] = time.monotonic() + DISK_RETRY_S
        with contextlib.suppress(Exception):  # the disk may refuse this too: still unfinished
            self.store.set_status(document_id, DocumentStatus.QUEUED)

    def _requeue_due(self) -> None:
        """Queue again the documents a full disk sent back whose wait is over."""
        now = time.monotonic()
        with self._retry_lock:
            due = [d for d, at in self._retry.items() if at <= now]
            for document_id in due:
                del self._retry[document_id]
        for document_id in due:
            self.enqueue(document_id)

    def _fail(self, document_id: int, reason: str) -> None:
        """Mark a document failed, unless it is gone or already finished."""
        document = self.store.get_document(document_id)
        if document is None or document.status is DocumentStatus.INDEXED:
            return
        try:
            self.store.set_status(
                document_id, DocumentStatus.FAILED, reason, holder=self.leases.replica
            )
        except DocumentGone:  # deleted meanwhile: nothing to mark
            return
        except LeaseLost:  # another replica works on it now: its outcome, not ours
            log.warning("document %s: not marked failed, another process holds it", document_id)
            return
        self._report(document_id, "failed", reason)

    def _report(self, document_id: int, stage: str, detail: str | None = None) -> None:
        if self.progress is not None:
            try:
                self.progress(document_id, stage, detail)
            except Exception:  # a display problem must never fail ingestion
                log.exception("progress callback failed")


def _region_boxed(parsed: ParsedDocument, chunks: list[ChunkSpan]) -> list[ChunkSpan]:
    """Passages on pages read by OCR from a picture, with the boxes of the lines they
    overlap (``ParsedPage.regions``), at most ``MAX_BOXES`` as for a PDF's text layer."""
    regions = {page.number: page.regions for page in parsed.pages if page.regions}
    if not regions:
        return chunks
    return [
        replace(chunk, boxes=_overlapped(regions[chunk.page], chunk.start, chunk.end))
        if chunk.page in regions
        else chunk
        for chunk in chunks
    ]


def _overlapped(regions: tuple[tuple[int, int, Box], ...], start: int, end: int) -> tuple[Box, ...]:
    boxes = [box for first, last, box in regions if first < end and start < last]
    return tuple(dict.fromkeys(boxes))[:MAX_BOXES]
