"""Dynamic batching of embeddings: concurrent callers share forward passes, queries first.

``BatchingEmbedder`` wraps any Embedder. Callers of ``embed_batch`` block while one worker
thread groups what is waiting into batches of at most ``max_batch`` texts and runs them
through the wrapped embedder:

- a request of at most ``query_max_texts`` texts is a *query* (a user's question); larger
  ones are *bulk* (ingestion). Waiting queries always go before bulk, and they are batched
  only with other queries, so their short texts are not padded to the length of chunks;
- a bulk request is cut into slices of ``bulk_batch`` texts (default ``max_batch``),
  longest first as the wrapped embedders do (little padding), so a question waits for
  one slice of ingestion in flight at most, never for a whole upload;
- a batch that is not full waits up to ``max_wait_ms`` after its oldest request for more
  callers (several users asking at once share one pass);
- ``set_threads`` (e.g. ``torch.set_num_threads``) is called with ``query_threads`` before a
  query batch and ``bulk_threads`` before a bulk one (0 = leave alone), so ingestion can be
  kept to a few cores while questions use more. It is global to the process, which is fine
  here: this worker is then the only thread that embeds;
- while ``busy()`` says something more urgent is using the CPU (the server passes "a model
  is generating an answer"), bulk slices wait, up to ``bulk_yield_s`` each, so a prompt is
  prefilled and decoded without ingestion competing for the cores. Ingestion still moves
  (a slice at least every ``bulk_yield_s``) however busy the server stays.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from retrieval.embedder import Embedder, Vectors

log = logging.getLogger(__name__)

_BUSY_POLL_S = 0.02  # how soon a bulk slice notices that ``busy`` has cleared


@dataclass(eq=False)
class _Request:
    texts: Sequence[str]
    out: Vectors
    order: list[int] = field(default_factory=list)  # longest first: slices pad little
    arrived: float = field(default_factory=time.monotonic)
    taken: int = 0  # texts handed to a batch so far
    left: int = 0  # texts not embedded yet
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class BatchingEmbedder:
    def __init__(
        self,
        inner: Embedder,
        *,
        max_batch: int = 32,
        bulk_batch: int = 0,
        max_wait_ms: float = 2.0,
        query_max_texts: int = 1,
        set_threads: Callable[[int], None] | None = None,
        query_threads: int = 0,
        bulk_threads: int = 0,
        busy: Callable[[], bool] | None = None,
        bulk_yield_s: float = 0.0,
    ):
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.max_batch = max_batch
        self.bulk_batch = bulk_batch or max_batch
        self.max_wait_s = max_wait_ms / 1000
        self.query_max_texts = query_max_texts
        self._set_threads = set_threads
        self._threads = {True: query_threads, False: bulk_threads}
        self._current_threads = 0
        self._busy = busy
        self.bulk_yield_s = bulk_yield_s
        self.bulk_paused_s = 0.0  # time bulk slices spent waiting for ``busy`` to clear
        self._last_bulk = 0.0  # when the last bulk slice was let through
        self._queries: deque[_Request] = deque()
        self._bulk: deque[_Request] = deque()
        self._ready = threading.Condition()
        self._worker: threading.Thread | None = None
        self._closed = False
        # texts per recent forward pass (bounded: the server runs for months)
        self.batches: deque[int] = deque(maxlen=1024)

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        request = _Request(texts, np.zeros((len(texts), self.dimension), dtype=np.float32))
        request.left = len(texts)
        request.order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        if not texts:
            return request.out
        with self._ready:
            if self._closed:
                raise RuntimeError("the batching embedder is closed")
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run, name="ragdesk-embed-batcher", daemon=True
                )
                self._worker.start()
            is_query = len(texts) <= self.query_max_texts
            (self._queries if is_query else self._bulk).append(request)
            self._ready.notify()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()
        if self._worker is not None:
            self._worker.join()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not (self._queries or self._bulk or self._closed):
                    self._ready.wait()
                if self._closed and not (self._queries or self._bulk):
                    return
                self._await_more()
                if not self._queries:
                    self._yield_to_busy()
                is_query = bool(self._queries)
                if is_query:
                    parts = self._take(self._queries, self.max_batch)
                else:
                    parts = self._take(self._bulk, self.bulk_batch)
            self._embed(parts, is_query)
            if not is_query:
                self._last_bulk = time.monotonic()  # the next slice's wait counts from here

    def _await_more(self) -> None:
        """Hold a batch that is not full until ``max_wait`` after its oldest request."""
        queue = self._queries or self._bulk
        deadline = queue[0].arrived + self.max_wait_s
        full = self.max_batch if queue is self._queries else self.bulk_batch
        while not self._closed and _pending(queue) < full:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._ready.wait(remaining)
            if queue is self._bulk and self._queries:
                return  # a question arrived: serve it now

    def _yield_to_busy(self) -> None:
        """Hold the next bulk slice while ``busy()``, up to ``bulk_yield_s`` after the last
        one ended; a question that arrives meanwhile is served at once. Called holding
        ``_ready``, which is let go while ``busy()`` runs, so callers can always queue."""
        if self._busy is None or self.bulk_yield_s <= 0:
            return
        started = time.monotonic()
        # Counted from the end of the last bulk slice (or this request's arrival), so
        # questions served in between do not push ingestion back further.
        deadline = max(self._last_bulk, self._bulk[0].arrived) + self.bulk_yield_s
        while not (self._closed or self._queries):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._is_busy():
                break
            self._ready.wait(min(remaining, _BUSY_POLL_S))
        self.bulk_paused_s += time.monotonic() - started

    def _is_busy(self) -> bool:
        """``busy()`` without ``_ready`` held; a failing check counts as not busy (the
        worker thread must never die of it: every caller would wait forever)."""
        assert self._busy is not None
        self._ready.release()
        try:
            return bool(self._busy())
        except Exception:
            log.exception("the busy check of the embedding batcher failed")
            return False
        finally:
            self._ready.acquire()

    def _take(self, queue: deque[_Request], room: int) -> list[tuple[_Request, int, int]]:
        """(request, first, last) slices adding up to ``room`` texts at most."""
        parts: list[tuple[_Request, int, int]] = []
        while queue and room:
            request = queue[0]
            first = request.taken
            last = min(len(request.texts), first + room)
            request.taken = last
            parts.append((request, first, last))
            room -= last - first
            if last == len(request.texts):
                queue.popleft()
        return parts

    def _embed(self, parts: list[tuple[_Request, int, int]], is_query: bool) -> None:
        texts = [
            request.texts[i] for request, first, last in parts for i in request.order[first:last]
        ]
        threads = self._threads[is_query]
        try:
            if self._set_threads is not None and threads and threads != self._current_threads:
                self._set_threads(threads)
                self._current_threads = threads
            self.batches.append(len(texts))
            vectors = self.inner.embed_batch(texts)
        except BaseException as exc:  # handed to every caller of the batch
            with self._ready:
                for queue in (self._queries, self._bulk):
                    for request, _, _ in parts:
                        if request in queue:
                            queue.remove(request)
            for request, _, _ in parts:
                request.error = exc
                request.done.set()
            return
        row = 0
        for request, first, last in parts:
            request.out[request.order[first:last]] = vectors[row : row + last - first]
            row += last - first
            request.left -= last - first
            if request.left == 0 and request.error is None:
                request.done.set()


def _pending(queue: deque[_Request]) -> int:
    return sum(len(r.texts) - r.taken for r in queue)
