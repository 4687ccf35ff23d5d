"""The admins' page for groups (``/admin/groups``): each group with its members and
collections, each row marked by where it came from (added here, from a sign-in's group
claim, from RAGDESK_OIDC_GROUP_COLLECTIONS). The same service calls and checks as the
JSON API (``GroupsApi`` in app/web/api_accounts.py), rendered as htmx partials."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.response import Template

from app.auth.users import AccountError
from app.errors import NotFound, UnprocessableInput
from app.schemas import RowId
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.api_accounts import (
    GroupCollectionIn,
    GroupOut,
    add_group_member,
    grant_group_collection,
    group_or_404,
    group_out,
)
from app.web.deps import provide_services

# What a row's source is called on the page.
ORIGINS = {"local": "added here", "oidc": "from sign-in", "settings": "from settings"}


def _choices(services: Services) -> dict[str, Any]:
    return {
        "users": services.auth.users.list(),
        "collections": services.store.collections(),
        "origins": ORIGINS,
    }


def panel_context(services: Services, **extra: Any) -> dict[str, Any]:
    groups = [group_out(services, g) for g in services.auth.groups.list()]
    return {"groups": groups, **_choices(services), **extra}


def group_context(services: Services, group_id: int) -> dict[str, Any]:
    return {"group": group_out(services, group_or_404(services, group_id)), **_choices(services)}


def _create(services: Services, name: str) -> GroupOut:
    try:
        return group_out(services, services.auth.groups.create(name))
    except AccountError as exc:
        raise UnprocessableInput(str(exc)) from None


def _remove_member(services: Services, group_id: int, user_id: int) -> dict[str, Any]:
    if not services.auth.groups.remove_member(group_or_404(services, group_id).id, user_id):
        raise NotFound("no such member")
    return group_context(services, group_id)


def _revoke(services: Services, group_id: int, collection_id: int) -> dict[str, Any]:
    if not services.auth.groups.revoke(group_or_404(services, group_id).id, collection_id):
        raise NotFound("the group has no such collection")
    return group_context(services, group_id)


def _field(form: Any, name: str) -> str:
    value = form.get(name, "")
    return value.strip() if isinstance(value, str) else ""


class GroupsPages(Controller):
    path = "/admin/groups"
    opt = ADMIN
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @get("/")
    async def listing(self, services: Services) -> Template:
        context = await asyncio.to_thread(panel_context, services)
        return Template("groups.html", context=context)

    @post("/", status_code=200)
    async def create(self, request: Request[Any, Any, State], services: Services) -> Template:
        """The panel with the new group, or why not (200: the page shows the reason)."""
        name = _field(await request.form(), "name")
        try:
            created = await asyncio.to_thread(_create, services, name)
        except UnprocessableInput as exc:
            context = await asyncio.to_thread(panel_context, services, error=exc.detail, name=name)
            return Template("_groups_panel.html", context=context)
        context = await asyncio.to_thread(panel_context, services, created=created.name)
        return Template("_groups_panel.html", context=context)

    @delete("/{group_id:int}", status_code=200)
    async def remove(self, group_id: RowId, services: Services) -> Template:
        """The group, its memberships and its collections go."""
        group = await asyncio.to_thread(group_or_404, services, group_id)
        await asyncio.to_thread(services.auth.groups.delete, group.id)
        context = await asyncio.to_thread(panel_context, services, deleted=group.name)
        return Template("_groups_panel.html", context=context)

    @post("/{group_id:int}/members", status_code=200)
    async def add_member(
        self, group_id: RowId, request: Request[Any, Any, State], services: Services
    ) -> Template:
        """The user joins (an admin's addition: a sign-in never removes it)."""
        user = _field(await request.form(), "user")
        group = await asyncio.to_thread(add_group_member, services, group_id, user)
        context = await asyncio.to_thread(group_context, services, group.id)
        return Template("_groups_group.html", context=context)

    @delete("/{group_id:int}/members/{user_id:int}", status_code=200)
    async def remove_member(self, group_id: RowId, user_id: RowId, services: Services) -> Template:
        context = await asyncio.to_thread(_remove_member, services, group_id, user_id)
        return Template("_groups_group.html", context=context)

    @post("/{group_id:int}/collections", status_code=200)
    async def grant(
        self, group_id: RowId, request: Request[Any, Any, State], services: Services
    ) -> Template:
        """Members may read the collection, and as writers upload and delete in it."""
        form = await request.form()
        try:
            data = msgspec.convert(
                {"collection": _field(form, "collection"), "write": form.get("access") == "writer"},
                GroupCollectionIn,
            )
        except msgspec.ValidationError as exc:
            raise UnprocessableInput(f"collection: {exc}") from None
        group = await asyncio.to_thread(grant_group_collection, services, group_id, data)
        context = await asyncio.to_thread(group_context, services, group.id)
        return Template("_groups_group.html", context=context)

    @delete("/{group_id:int}/collections/{collection_id:int}", status_code=200)
    async def revoke(self, group_id: RowId, collection_id: RowId, services: Services) -> Template:
        context = await asyncio.to_thread(_revoke, services, group_id, collection_id)
        return Template("_groups_group.html", context=context)
