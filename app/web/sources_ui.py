"""The admins' page for synced sources (``/admin/sources``): the list with each source's
last run, a create form, *Sync now* with a row that polls its run until it ends, each
source's runs (with their problems) and files, and delete. The same service calls and
checks as the JSON API (app/web/api_sources.py), rendered as htmx partials."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import FormMultiDict, State
from litestar.di import Provide
from litestar.response import Template

from app.errors import UnprocessableInput
from app.schemas import RowId
from app.sources.scheduler import SyncBusy, SyncScheduler
from app.sources.schemas import FileOut, RunOut, SourceIn, SourceOut
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.api_sources import add_source, provide_scheduler, source_or_404, source_out
from app.web.deps import provide_services

# Form fields that mean "not given" when left blank.
OPTIONAL = ("path", "bucket", "endpoint_url", "region", "credentials")
FIELDS = ("name", "kind", "collection", "prefix", "interval_s", *OPTIONAL)
SYNCED = "source-synced"  # HX-Trigger of a row whose run has ended: its history reloads


def every(seconds: float) -> str:
    """An interval in words: "on demand", "every 15 min", "every 2 h" …"""
    if seconds <= 0:
        return "on demand"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"every {int(seconds // size)} {unit}"
    return f"every {seconds:g} s"


def running(source: SourceOut) -> bool:
    return source.syncing or (source.last_run is not None and source.last_run.status == "running")


def _form_values(form: FormMultiDict) -> dict[str, str]:
    return {f: str(form.get(f, "")).strip() for f in FIELDS}


def source_in(values: dict[str, str]) -> SourceIn:
    """The form as the API's ``SourceIn``, checked by the same constraints."""
    data: dict[str, Any] = {f: values[f] or None for f in OPTIONAL}
    data.update(name=values["name"], kind=values["kind"], prefix=values["prefix"])
    data["collection"] = values["collection"] or "default"
    try:
        data["interval_s"] = float(values["interval_s"] or 0)
    except ValueError:
        raise UnprocessableInput("the interval is a number of seconds") from None
    try:
        return msgspec.convert(data, SourceIn)
    except msgspec.ValidationError as exc:
        raise UnprocessableInput(_plain(str(exc))) from None


def _plain(message: str) -> str:
    """msgspec's "Expected `str` of length <= 64 - at `$.name`" as "name: expected …"."""
    text, _, where = message.partition(" - at `$.")
    field = where.rstrip("`")
    text = text.replace("`", "")
    return f"{field}: {text[0].lower()}{text[1:]}" if field and text else message


def panel_context(services: Services, scheduler: SyncScheduler, **extra: Any) -> dict[str, Any]:
    sources = [source_out(services, scheduler, s) for s in scheduler.store.all()]
    return {
        "sources": sources,
        "collections": services.store.collections(),
        "roots": [str(root) for root in services.settings.ingest.source_roots],
        "credential_names": sorted(services.settings.ingest.source_credentials),
        "values": {"kind": "directory", "collection": "default", "interval_s": "0"},
        "every": every,
        "running": running,
        **extra,
    }


def _row(services: Services, scheduler: SyncScheduler, source_id: int) -> SourceOut:
    return source_out(services, scheduler, source_or_404(scheduler, source_id))


def _history(scheduler: SyncScheduler, source_id: int) -> dict[str, Any]:
    source = source_or_404(scheduler, source_id)
    runs = [RunOut.of(run) for run in scheduler.store.runs(source_id)]
    files = sorted(
        (FileOut.of(f) for f in scheduler.store.files(source_id).values()), key=lambda f: f.path
    )
    return {"source": source, "runs": runs, "files": files}


def _row_template(source: SourceOut, **extra: Any) -> Template:
    context = {"source": source, "every": every, "running": running, **extra}
    headers = {} if running(source) else {"HX-Trigger": SYNCED}
    return Template("_sources_row.html", context=context, headers=headers)


class SourcesPages(Controller):
    path = "/admin/sources"
    opt = ADMIN
    dependencies = {
        "services": Provide(provide_services, sync_to_thread=False),
        "scheduler": Provide(provide_scheduler, sync_to_thread=False),
    }

    @get("/")
    async def listing(self, services: Services, scheduler: SyncScheduler) -> Template:
        context = await asyncio.to_thread(panel_context, services, scheduler)
        return Template("sources.html", context=context)

    @post("/", status_code=200)
    async def create(
        self, request: Request[Any, Any, State], services: Services, scheduler: SyncScheduler
    ) -> Template:
        """The panel again: with the new source, or with the form as filled and why the
        source was refused (the API's 422 text; 200 here, as the page shows it)."""
        values = _form_values(await request.form())
        try:
            data = source_in(values)
            created = await asyncio.to_thread(add_source, services, scheduler, data)
        except UnprocessableInput as exc:
            context = await asyncio.to_thread(panel_context, services, scheduler, error=exc.detail)
            context["values"] = values
            return Template("_sources_panel.html", context=context)
        context = await asyncio.to_thread(panel_context, services, scheduler, created=created)
        return Template("_sources_panel.html", context=context)

    @get("/{source_id:int}/row")
    async def row(self, source_id: RowId, services: Services, scheduler: SyncScheduler) -> Template:
        """The source's row, polled while its sync runs."""
        return _row_template(await asyncio.to_thread(_row, services, scheduler, source_id))

    @post("/{source_id:int}/sync", status_code=200)
    async def sync(
        self, source_id: RowId, services: Services, scheduler: SyncScheduler
    ) -> Template:
        """Start a sync now: the row comes back running and polls (the API's 409: the row
        says "already syncing", and follows the sync under way)."""
        services.require_retrieval()
        source = await asyncio.to_thread(source_or_404, scheduler, source_id)
        try:
            await asyncio.to_thread(scheduler.trigger, source, "ui")
        except SyncBusy:
            row = await asyncio.to_thread(_row, services, scheduler, source_id)
            return _row_template(row, note="already syncing")
        return _row_template(await asyncio.to_thread(_row, services, scheduler, source_id))

    @get("/{source_id:int}/history")
    async def history(self, source_id: RowId, scheduler: SyncScheduler) -> Template:
        """The source's last 50 runs with their problems, and the files it holds."""
        context = await asyncio.to_thread(_history, scheduler, source_id)
        return Template("_sources_history.html", context=context)

    @delete("/{source_id:int}", status_code=200)
    async def remove(
        self, source_id: RowId, services: Services, scheduler: SyncScheduler
    ) -> Response[Any]:
        """The source goes and its synced documents leave search; the panel without it."""
        source = await asyncio.to_thread(source_or_404, scheduler, source_id)
        await asyncio.to_thread(scheduler.delete, source)
        context = await asyncio.to_thread(panel_context, services, scheduler, deleted=source.name)
        return Template("_sources_panel.html", context=context)
