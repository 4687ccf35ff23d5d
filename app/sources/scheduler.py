"""Syncs in the server: one background thread runs sources when their interval is due, and
on-demand syncs (the API) each get a thread; a source never syncs twice at once."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager

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
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._loop, name="ragdesk-sync", daemon=True)

    @property
    def store(self) -> SourceStore:
        return self.sources.store

    def start(self) -> None:
        # Runs left "running" by a front that stopped: those whose lock no live front holds.
        free = []
        for source_id in self.store.running_sources():
            claim = self._claim(source_id)
            if claim is not None:
                free.append(source_id)
                claim.close()
        self.store.interrupt_running(free)
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
        claim = self._claim(source.id)
        if claim is None:
            raise SyncBusy(source.name)
        try:
            run_id = self.store.start_run(source.id, trigger)
            # Read before the thread starts: a run that fails at once would otherwise be
            # reported as already failed to the caller that started it.
            run = self.store.run(run_id)
            assert run is not None
            thread = threading.Thread(
                target=self._run_claimed, args=(claim, source, trigger, run_id), daemon=True
            )
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()
        except BaseException:
            claim.close()
            raise
        return run

    def delete(self, source: Source, wait_s: float = 600.0) -> None:
        """Delete a source (waits for a sync of it in progress, here or elsewhere, to end)."""
        deadline = time.monotonic() + wait_s
        while (claim := self._claim(source.id)) is None:
            if time.monotonic() > deadline:
                raise SyncBusy(source.name)
            time.sleep(0.2)
        with claim:
            self.sources.delete(source.id)

    def busy(self, source_id: int) -> bool:
        claim = self._claim(source_id)
        if claim is None:
            return True
        claim.close()
        return False

    def _claim(self, source_id: int) -> ExitStack | None:
        """The source's lock, held until the returned stack closes; None when a sync of it
        runs (in this front or another)."""
        stack = ExitStack()
        if stack.enter_context(self.store.db.held("sync", source_id)):
            return stack
        stack.close()
        return None

    def _run_claimed(
        self, claim: ExitStack, source: Source, trigger: str, run_id: int | None
    ) -> None:
        with claim:
            self.sources.syncer.run(source, trigger, run_id)

    def _loop(self) -> None:
        stopping = self.sources.syncer.stopping
        while not stopping.wait(self.check_s):
            if not self.ready():
                continue
            try:
                for source in self.store.due(time.time()):
                    if stopping.is_set():
                        break
                    claim = self._claim(source.id)
                    if claim is not None:
                        self._run_claimed(claim, source, "schedule", None)
            except Exception:  # keep scheduling: one bad moment must not end the thread
                log.exception("scheduled sync failed")


@asynccontextmanager
async def sources_lifespan(app: Litestar) -> AsyncIterator[None]:
    """Entered after the services' lifespan (it needs them), left before it."""
    services: Services = app.state.services
    settings = services.settings
    store = SourceStore(services.db)
    sources = Sources(store, services.library, settings.ingest, settings.server.max_upload_bytes)
    # Scheduled syncs run where ingestion does: never on a web front (RAGDESK_ROLE=web).
    check_s = 0.0 if settings.server.role == "web" else settings.ingest.sync_check_s
    scheduler = SyncScheduler(sources, check_s, lambda: services.library.worker is not None)
    await asyncio.to_thread(scheduler.start)
    app.state.sources = scheduler
    try:
        yield
    finally:
        await asyncio.to_thread(scheduler.stop)
