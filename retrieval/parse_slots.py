"""The parse stage of ingestion: a few slots that take documents fairly across owners.

A file may parse for the whole time budget (two minutes by default): a pathological
DOCX or PDF. With one parse at a time, every other upload waited behind it. Here
``slots`` threads parse at once (production's parser runs as many child processes),
and documents are taken round-robin over their owners, an owner holding at most
``slots - 1`` slots: one user's slow files occupy their share, and another user's
upload finds a free slot and is indexed meanwhile.

The owner of a document is its collection: documents record no uploader, and write
access is granted per collection.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class FairQueue:
    """Document ids by owner, taken in turn; an owner parses at most ``share`` at a time
    and has at most ``most_in_flight`` taken and not yet finished (parsed, waiting to be
    embedded or embedding): one collection's backlog never fills the hand-over to the
    embedding stage, so another's upload is parsed and handed over meanwhile.

    An id stays known from ``put`` until ``finished``: putting it again meanwhile (a
    retry of a document still in flight) queues it once more only after it finishes.
    """

    def __init__(self, share: int, most_in_flight: int | None = None):
        self.share = max(1, share)
        self.most_in_flight = max(1, most_in_flight) if most_in_flight else None
        self._in_flight: Counter[int] = Counter()
        self._waiting: OrderedDict[int, deque[int]] = OrderedDict()  # in turn order
        self._running: Counter[int] = Counter()
        self._owners: dict[int, int] = {}  # id -> owner, waiting or in flight
        self._queued: set[int] = set()  # waiting, not in flight
        self._again: set[int] = set()
        self._ready = threading.Condition()
        self._closed = False

    def __len__(self) -> int:
        return len(self._queued)

    def __contains__(self, item: object) -> bool:
        """The id is waiting or in flight (put and not finished)."""
        with self._ready:
            return item in self._owners

    def put(self, item: int, owner: int) -> None:
        with self._ready:
            if item in self._owners:
                if item not in self._queued:
                    self._again.add(item)  # in flight: once more when it is finished
                return
            self._queue(item, owner)

    def _queue(self, item: int, owner: int) -> None:
        self._owners[item] = owner
        self._queued.add(item)
        self._waiting.setdefault(owner, deque()).append(item)
        self._ready.notify()

    def take(self, timeout: float) -> int | None:
        """The next id of the first owner in turn under their share; None on timeout or close."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while not self._closed:
                for owner, ids in self._waiting.items():
                    if self._running[owner] < self.share and (
                        self.most_in_flight is None or self._in_flight[owner] < self.most_in_flight
                    ):
                        item = ids.popleft()
                        if ids:
                            self._waiting.move_to_end(owner)  # the others' turn first
                        else:
                            del self._waiting[owner]
                        self._running[owner] += 1
                        self._in_flight[owner] += 1
                        self._queued.discard(item)
                        return item
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._ready.wait(remaining)
            return None

    def parsed(self, item: int) -> None:
        """The id's parse is over: its owner's share has room again."""
        with self._ready:
            owner = self._owners.get(item)
            if owner is not None and self._running[owner] > 0:
                self._running[owner] -= 1
                self._ready.notify_all()

    def finished(self, item: int) -> None:
        """The id is indexed, failed or dropped; queued again if it was put meanwhile."""
        with self._ready:
            if item in self._queued:  # not taken: nothing to finish
                return
            owner = self._owners.pop(item, None)
            if owner is not None and self._in_flight[owner] > 0:
                self._in_flight[owner] -= 1
                self._ready.notify_all()  # the owner may take another
            if item in self._again and owner is not None:
                self._again.discard(item)
                self._queue(item, owner)

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()


class ParseSlots(Generic[T]):
    """``slots`` threads: each takes an id fairly, parses it, hands the result over.

    ``parse_one`` never raises (it records failures itself) and returns None for a
    document with nothing more to do; results wait in ``results`` (at most ``backlog``
    of them, so parsing never runs far ahead of embedding), each finished by the
    consumer with :meth:`finished`.
    """

    def __init__(
        self,
        parse_one: Callable[[int], T | None],
        owner_of: Callable[[int], int | None],
        *,
        slots: int,
        backlog: int,
    ):
        self.parse_one = parse_one
        self.owner_of = owner_of
        # An owner has at most half the hand-over's room in flight: the rest is the others'.
        self.waiting = FairQueue(share=slots - 1, most_in_flight=max(1, backlog // 2))
        self.results: queue.Queue[T | None] = queue.Queue(maxsize=max(1, backlog))
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, name=f"ragdesk-parse-{n}", daemon=True)
            for n in range(max(1, slots))
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def put(self, document_id: int) -> None:
        owner = self.owner_of(document_id)
        if owner is not None:  # None: deleted already, nothing to do
            self.waiting.put(document_id, owner)

    def finished(self, document_id: int) -> None:
        self.waiting.finished(document_id)

    @property
    def alive(self) -> bool:
        return all(thread.is_alive() for thread in self._threads)

    def stop(self) -> None:
        """No new parses; those in progress end on their own (or when the parser closes)."""
        self._stopping.set()
        self.waiting.close()
        with contextlib.suppress(queue.Full):
            self.results.put_nowait(None)  # wakes a consumer waiting for results

    def join(self, deadline: float) -> bool:
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _run(self) -> None:
        while not self._stopping.is_set():
            document_id = self.waiting.take(timeout=1.0)
            if document_id is None:
                continue
            try:
                result = self.parse_one(document_id)
            except Exception:  # parse_one records its failures; never lose the slot
                log.exception("parsing document %s failed unexpectedly", document_id)
                result = None
            finally:
                self.waiting.parsed(document_id)
            if result is None or not self._hand_over(result):
                self.waiting.finished(document_id)

    def _hand_over(self, result: T) -> bool:
        """Wait for room in ``results``; False when stopping (the document stays unfinished
        in SQLite and resumes on the next start)."""
        while not self._stopping.is_set():
            try:
                self.results.put(result, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False
