"""A collection's settings page (``/collections/{id}/settings``): name, description,
instructions for the model, OCR switch, default chat model, members and groups, the
audit of changes, and deleting it; and "New collection" (``POST /collections``) from the
sidebar and ``/admin``. Admins only (the guard's ``opt=ADMIN``), like the API.

Each form posts with htmx and gets the settings panel back, saved or with the reason it
was not (200 with the message in the panel, as the groups page does), so a mistyped name
never loses what else was typed. Deleting asks in the app's confirmation dialog, then
sends the browser to ``/admin``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import FormMultiDict
from litestar.di import Provide
from litestar.response import Template

from app.auth.collection_audit import CollectionAudit
from app.auth.guards import current_principal
from app.chat.local_models import ChatModels
from app.documents import workspaces
from app.errors import AppError
from app.schemas import RowId
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.deps import provide_services

Req = Request[Any, Any, Any]
_OCR_CHOICES = ("default", "on", "off")


def _field(form: FormMultiDict, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def settings_context(services: Services, collection_id: int, **extra: Any) -> dict[str, Any]:
    collection = workspaces.get(services, collection_id)
    members = services.auth.members.of_collection(collection_id)
    member_ids = {m.user_id for m in members}
    groups = workspaces.groups_of(services, collection_id)
    users = services.auth.users.list()
    return {
        "collection": collection,
        "ocr_deployed": services.settings.ingest.ocr,
        "models": [m.name for m in ChatModels(services.db, services.settings).offered()],
        "members": members,
        "candidates": [u for u in users if u.id not in member_ids],
        "user_names": {u.id: u.name for u in users},
        "groups": groups,
        "all_groups": services.auth.groups.list(),
        "events": CollectionAudit(services.db).of(collection_id, 20),
        "is_default": collection_id == services.collection_id,
        **extra,
    }


class WorkspacesUi(Controller):
    opt = ADMIN
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @post("/collections", status_code=200)
    async def create(self, request: Req, services: Services) -> Response[Any]:
        """A new collection, then its settings page; or the form again with the reason."""
        form = await request.form()
        name = _field(form, "name") or ""
        description = _field(form, "description")
        desk, principal = workspaces.Desk.of(services), current_principal(request)

        def make() -> int:
            made, created = workspaces.create(desk, principal, name)
            if not created:
                raise workspaces.CollectionConflict(f"a collection named {made.name!r} exists")
            if description:
                changes = workspaces.Changes(description=description)
                workspaces.change(desk, principal, made.id, changes)
            return made.id

        try:
            made_id = await asyncio.to_thread(make)
        except AppError as exc:
            context = {"error": exc.detail, "name": name, "description": description or ""}
            return Template("_new_collection_form.html", context=context)
        location = f"/collections/{made_id}/settings"
        return Response("", headers={"HX-Redirect": location, "Location": location})

    @get("/collections/{collection_id:int}/settings")
    async def page(self, collection_id: RowId, services: Services) -> Template:
        context = await asyncio.to_thread(settings_context, services, collection_id)
        return Template("collection_settings.html", context=context)

    @post("/collections/{collection_id:int}/settings", status_code=200)
    async def save(self, collection_id: RowId, request: Req, services: Services) -> Template:
        form = await request.form()
        ocr = _field(form, "ocr")
        changes = workspaces.Changes(
            name=_field(form, "name"),
            description=_field(form, "description"),
            instructions=_field(form, "instructions"),
            ocr=ocr if ocr in _OCR_CHOICES else None,  # type: ignore[arg-type]
            default_model=_field(form, "default_model"),
        )
        desk = workspaces.Desk.of(services)
        return await self._panel(
            services,
            collection_id,
            lambda: workspaces.change(desk, current_principal(request), collection_id, changes),
            "Saved.",
        )

    @post("/collections/{collection_id:int}/members", status_code=200)
    async def add_member(self, collection_id: RowId, request: Req, services: Services) -> Template:
        form = await request.form()
        user, write = _field(form, "user") or "", form.get("access") == "writer"
        principal = current_principal(request)
        return await self._panel(
            services,
            collection_id,
            lambda: workspaces.add_member(
                services, principal, collection_id, user, can_write=write
            ),
            f"{user} may now {'read and write' if write else 'read'} this collection.",
        )

    @post("/collections/{collection_id:int}/members/{user_id:int}/remove", status_code=200)
    async def remove_member(
        self, collection_id: RowId, user_id: RowId, request: Req, services: Services
    ) -> Template:
        principal = current_principal(request)
        return await self._panel(
            services,
            collection_id,
            lambda: workspaces.remove_member(services, principal, collection_id, user_id),
            "Member removed.",
        )

    @post("/collections/{collection_id:int}/groups", status_code=200)
    async def add_group(self, collection_id: RowId, request: Req, services: Services) -> Template:
        form = await request.form()
        group, write = _field(form, "group") or "", form.get("access") == "writer"
        principal = current_principal(request)
        return await self._panel(
            services,
            collection_id,
            lambda: workspaces.grant_group(
                services, principal, collection_id, group, can_write=write
            ),
            f"The group {group} may now {'read and write' if write else 'read'} this collection.",
        )

    @post("/collections/{collection_id:int}/groups/{group_id:int}/remove", status_code=200)
    async def remove_group(
        self, collection_id: RowId, group_id: RowId, request: Req, services: Services
    ) -> Template:
        principal = current_principal(request)
        return await self._panel(
            services,
            collection_id,
            lambda: workspaces.revoke_group(services, principal, collection_id, group_id),
            "Group removed.",
        )

    @post("/collections/{collection_id:int}/delete", status_code=200)
    async def delete(self, collection_id: RowId, request: Req, services: Services) -> Response[Any]:
        """Delete once the name typed matches (the confirmation dialog asked as well)."""
        form = await request.form()
        found = await asyncio.to_thread(workspaces.get, services, collection_id)
        if (_field(form, "confirm") or "").strip() != found.name:
            message = f"Type the collection's name, {found.name}, to delete it."
            context = await asyncio.to_thread(
                settings_context, services, collection_id, error=message
            )
            return Template("_collection_settings.html", context=context)
        desk, principal = workspaces.Desk.of(services), current_principal(request)
        try:
            await asyncio.to_thread(workspaces.delete, desk, principal, collection_id)
        except AppError as exc:
            context = await asyncio.to_thread(
                settings_context, services, collection_id, error=exc.detail
            )
            return Template("_collection_settings.html", context=context)
        return Response("", headers={"HX-Redirect": "/admin", "Location": "/admin"})

    async def _panel(
        self, services: Services, collection_id: int, action: Any, done: str
    ) -> Template:
        """Run ``action``; the panel again, with ``done`` or the reason it was refused."""
        try:
            await asyncio.to_thread(action)
            outcome: dict[str, str] = {"saved": done}
        except AppError as exc:  # the collection itself gone: the panel below says 404
            outcome = {"error": exc.detail}
        context = await asyncio.to_thread(settings_context, services, collection_id, **outcome)
        return Template("_collection_settings.html", context=context)
