"""Synced sources over the JSON API (``/api/sources``), for admins only: create, list and
delete sources, start a sync, list runs and the files a source holds."""

from __future__ import annotations

import asyncio

from litestar import Controller, delete, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.status_codes import HTTP_201_CREATED, HTTP_202_ACCEPTED, HTTP_204_NO_CONTENT

from app.errors import NotFound, UnprocessableInput
from app.schemas import RowId
from app.sources.records import Source
from app.sources.scheduler import SyncBusy, SyncScheduler
from app.sources.schemas import (
    FileList,
    FileOut,
    RunList,
    RunOut,
    SourceIn,
    SourceList,
    SourceOut,
)
from app.sources.service import InvalidSource, SourceSpec
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.conversations_ui import Conflict
from app.web.deps import provide_services


def provide_scheduler(state: State) -> SyncScheduler:
    scheduler: SyncScheduler = state.sources
    return scheduler


class SourcesApi(Controller):
    path = "/api/sources"
    opt = ADMIN
    dependencies = {
        "services": Provide(provide_services, sync_to_thread=False),
        "scheduler": Provide(provide_scheduler, sync_to_thread=False),
    }

    @get()
    async def list_sources(self, services: Services, scheduler: SyncScheduler) -> SourceList:
        sources = await asyncio.to_thread(scheduler.store.all)
        return SourceList(
            [await asyncio.to_thread(source_out, services, scheduler, s) for s in sources]
        )

    @post(status_code=HTTP_201_CREATED)
    async def create_source(
        self, data: SourceIn, services: Services, scheduler: SyncScheduler
    ) -> SourceOut:
        """A directory under RAGDESK_SOURCE_ROOTS, or an S3 bucket (prefix) with credentials
        named from RAGDESK_SOURCE_CREDENTIALS; ``interval_s`` > 0 syncs it on a schedule."""
        return await asyncio.to_thread(add_source, services, scheduler, data)

    @get("/{source_id:int}")
    async def get_source(
        self, source_id: RowId, services: Services, scheduler: SyncScheduler
    ) -> SourceOut:
        source = await asyncio.to_thread(source_or_404, scheduler, source_id)
        return await asyncio.to_thread(source_out, services, scheduler, source)

    @delete("/{source_id:int}", status_code=HTTP_204_NO_CONTENT)
    async def delete_source(self, source_id: RowId, scheduler: SyncScheduler) -> None:
        """The source and its runs; the documents its syncs brought in leave search (hand
        uploads into the same collection stay). Waits for a sync in progress to end."""
        source = await asyncio.to_thread(source_or_404, scheduler, source_id)
        await asyncio.to_thread(scheduler.delete, source)

    @post("/{source_id:int}/sync", status_code=HTTP_202_ACCEPTED)
    async def sync_source(
        self, source_id: RowId, services: Services, scheduler: SyncScheduler
    ) -> RunOut:
        """Start a sync now; the run is returned ``running``: poll its URL for the counts.
        409 when the source is syncing already, 503 until ingestion has started."""
        services.require_retrieval()
        source = await asyncio.to_thread(source_or_404, scheduler, source_id)
        try:
            run = await asyncio.to_thread(scheduler.trigger, source, "api")
        except SyncBusy:
            raise Conflict(f"source {source.name!r} is syncing now") from None
        return RunOut.of(run)

    @get("/{source_id:int}/runs")
    async def list_runs(self, source_id: RowId, scheduler: SyncScheduler) -> RunList:
        """The source's last 50 runs, newest first."""
        await asyncio.to_thread(source_or_404, scheduler, source_id)
        runs = await asyncio.to_thread(scheduler.store.runs, source_id)
        return RunList([RunOut.of(run) for run in runs])

    @get("/{source_id:int}/runs/{run_id:int}")
    async def get_run(self, source_id: RowId, run_id: RowId, scheduler: SyncScheduler) -> RunOut:
        run = await asyncio.to_thread(scheduler.store.run, run_id)
        if run is None or run.source_id != source_id:
            raise NotFound("no such run")
        return RunOut.of(run)

    @get("/{source_id:int}/files")
    async def list_files(self, source_id: RowId, scheduler: SyncScheduler) -> FileList:
        """Each file the last syncs saw: its path or key, its document, when last seen."""
        await asyncio.to_thread(source_or_404, scheduler, source_id)
        files = await asyncio.to_thread(scheduler.store.files, source_id)
        return FileList([FileOut.of(f) for f in files.values()])


def add_source(services: Services, scheduler: SyncScheduler, data: SourceIn) -> SourceOut:
    """Create the source ``data`` describes (the API and the admin page alike); 422 with
    the reason when it is refused."""
    spec = SourceSpec(
        name=data.name.strip(),
        collection_id=_collection_id(services, data.collection),
        kind=data.kind,
        path=data.path,
        bucket=data.bucket,
        prefix=data.prefix,
        endpoint_url=data.endpoint_url,
        region=data.region,
        credentials=data.credentials,
        interval_s=data.interval_s,
    )
    try:
        source = scheduler.sources.create(spec)
    except InvalidSource as exc:
        raise UnprocessableInput(str(exc)) from None
    return source_out(services, scheduler, source)


def source_or_404(scheduler: SyncScheduler, source_id: int) -> Source:
    source = scheduler.store.get(source_id)
    if source is None:
        raise NotFound("no such source")
    return source


def _collection_id(services: Services, name: str) -> int:
    found = [c.id for c in services.store.collections() if c.name == name.strip()]
    if not found:
        raise UnprocessableInput(f"no collection named {name!r}")
    return found[0]


def source_out(services: Services, scheduler: SyncScheduler, source: Source) -> SourceOut:
    names = {c.id: c.name for c in services.store.collections()}
    runs = scheduler.store.runs(source.id, limit=1)
    return SourceOut.of(
        source,
        names.get(source.collection_id, ""),
        scheduler.store.file_count(source.id),
        scheduler.busy(source.id),
        runs[0] if runs else None,
    )
