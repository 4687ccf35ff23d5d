"""Syncs in the server: one background thread runs sources when their interval is due, and
on-demand syncs (the API) each get a thread; a source never syncs twice at once."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from litestar import Litestar

from app.sources.records import Source, SyncRun
from app.sources.service import Sources
from app.sources.store import SourceStore
from app.state import Services

log = logging.getLogger(__name__)


class SyncBusy(Exception):
    """That source is syncing now."""


class SyncScheduler:
    def __init__(self, sources: Sources, check_s: float, ready: Callable[[], bool]):
        self.sources = sources
        self.check_s = check_s
        self.ready = ready  # ingestion is running: deletions reach the vector index at once
        self._locks: dict[int, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._loop, name="ragdesk-sync", daemon=True)

    @property
    def store(self) -> SourceStore:
        return self.sources.store

    def start(self) -> None:
        self.store.interrupt_running()
        if self.check_s > 0:
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.sources.syncer.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in [self._thread, *self._threads]:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))

    def trigger(self, source: Source, trigger: str = "api") -> SyncRun:
        """Start a sync now in its own thread; returns its run (``running``)."""
        lock = self._lock(source.id)
        if not lock.acquire(blocking=False):
            raise SyncBusy(source.name)
        try:
            run_id = self.store.start_run(source.id, trigger)
            # Read before the thread starts: a run that fails at once would otherwise be
            # reported as already failed to the caller that started it.
            run = self.store.run(run_id)
            assert run is not None
            thread = threading.Thread(
                target=self._run_locked, args=(lock, source, trigger, run_id), daemon=True
            )
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()
        except BaseException:
            lock.release()
            raise
        return run

    def delete(self, source: Source) -> None:
        """Delete a source (waits for a sync of it in progress to end)."""
        with self._lock(source.id):
            self.sources.delete(source.id)

    def busy(self, source_id: int) -> bool:
        return self._lock(source_id).locked()

    def _lock(self, source_id: int) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(source_id, threading.Lock())

    def _run_locked(
        self, lock: threading.Lock, source: Source, trigger: str, run_id: int | None
    ) -> None:
        try:
            self.sources.syncer.run(source, trigger, run_id)
        finally:
            lock.release()

    def _loop(self) -> None:
        stopping = self.sources.syncer.stopping
        while not stopping.wait(self.check_s):
            if not self.ready():
                continue
            try:
                for source in self.store.due(time.time()):
                    lock = self._lock(source.id)
                    if stopping.is_set() or not lock.acquire(blocking=False):
                        continue
                    self._run_locked(lock, source, "schedule", None)
            except Exception:  # keep scheduling: one bad moment must not end the thread
                log.exception("scheduled sync failed")


@asynccontextmanager
async def sources_lifespan(app: Litestar) -> AsyncIterator[None]:
    """Entered after the services' lifespan (it needs them), left before it."""
    services: Services = app.state.services
    settings = services.settings
    store = SourceStore(services.db)
    sources = Sources(store, services.library, settings.ingest, settings.server.max_upload_bytes)
    scheduler = SyncScheduler(
        sources, settings.ingest.sync_check_s, lambda: services.library.worker is not None
    )
    await asyncio.to_thread(scheduler.start)
    app.state.sources = scheduler
    try:
        yield
    finally:
        await asyncio.to_thread(scheduler.stop)
