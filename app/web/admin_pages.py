"""Account pages: one's own API keys (``/account``), and for admins users, collection
membership, every key and the models chat offers (``/admin``). Secrets are shown once,
in the answer to the form that made them, and never again."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import FormMultiDict
from litestar.response import Redirect, Template

from app.auth.access import readable_collections
from app.auth.guards import auth_of, current_principal
from app.auth.passwords import generate_password
from app.auth.principal import Principal, Role
from app.auth.users import AccountError
from app.chat.local_models import ChatModels, ModelError
from app.documents import workspaces
from app.errors import NotFound, UnprocessableInput
from app.state import Services
from app.web.ui_context import served_models
from retrieval.collections import Workspaces

ADMIN = {"admin": True}


def _services(request: Request[Any, Any, Any]) -> Services:
    services: Services = request.app.state.services
    return services


def _principal(request: Request[Any, Any, Any]) -> Principal:
    principal = current_principal(request)
    assert principal is not None  # the guard let the request through
    return principal


def _ids(form: FormMultiDict, field: str) -> set[int]:
    values = [str(v) for v in form.getall(field)] if field in form else []
    if not all(v.isascii() and v.isdigit() and len(v) < 19 for v in values):
        raise UnprocessableInput(f"{field}: ids are whole numbers")
    return {int(v) for v in values}


def _one_id(form: FormMultiDict, field: str) -> int:
    ids = _ids(form, field)
    if len(ids) != 1:
        raise UnprocessableInput(f"{field}: give one id")
    return ids.pop()


def _text(form: FormMultiDict, field: str, limit: int = 100) -> str:
    value = form.get(field, "")
    return value.strip()[:limit] if isinstance(value, str) else ""


def account_context(request: Request[Any, Any, Any], **extra: Any) -> dict[str, Any]:
    services, principal = _services(request), _principal(request)
    return {
        "principal": principal,
        "keys": services.auth.keys.list(principal.user.id),
        "collections": readable_collections(services.store.collections()),
        "names": {c.id: c.name for c in services.store.collections()},
        **extra,
    }


def admin_context(request: Request[Any, Any, Any], **extra: Any) -> dict[str, Any]:
    services = _services(request)
    auth = services.auth
    collections = services.store.collections()
    return {
        "principal": _principal(request),
        "users": auth.users.list(),
        "keys": auth.keys.list(),
        "collections": collections,
        "members": {c.id: auth.members.of_collection(c.id) for c in collections},
        "names": {c.id: c.name for c in collections},
        **chat_models_context(services),
        **extra,
    }


def chat_models_context(services: Services) -> dict[str, Any]:
    """The models the admin may offer in chat (the default always is), which are offered,
    and which of them this server cannot load until it restarts."""
    models = ChatModels(services.db, services.settings)
    offerable = models.offerable()
    served = served_models(services)
    return {
        "chat_models": [models.known()[0], *offerable],
        "offered_models": models.offered_names(),
        "unserved_models": set() if served is None else {m.name for m in offerable} - served,
    }


class AccountPages(Controller):
    @get("/account")
    async def account(self, request: Request[Any, Any, Any]) -> Template:
        context = await asyncio.to_thread(account_context, request)
        return Template("account.html", context=context)

    @post("/account/keys", status_code=200, opt={"account": True})
    async def create_key(self, request: Request[Any, Any, Any]) -> Template:
        """A key for oneself, limited to collections one may read; shown once."""
        form = await request.form()
        principal, services = _principal(request), _services(request)
        wanted = _ids(form, "collection")
        allowed = {c.id for c in readable_collections(services.store.collections())}
        if not wanted <= allowed:
            raise NotFound("no such collection")
        key, _ = await asyncio.to_thread(
            services.auth.keys.create,
            principal.user,
            name=_text(form, "name"),
            read_only=form.get("read_only") == "on",
            collections=wanted or None,
        )
        context = await asyncio.to_thread(account_context, request, new_key=key)
        return Template("account.html", context=context)

    @post("/account/password", status_code=303, opt={"account": True})
    async def change_password(self, request: Request[Any, Any, Any]) -> Response[Any]:
        """A new password (the current one is asked again); then sign in with it."""
        form, principal, auth = await request.form(), _principal(request), auth_of(request)
        current, new = str(form.get("current", "")), str(form.get("new", ""))
        user = await asyncio.to_thread(auth.users.authenticate, principal.user.name, current)
        if user is None:
            raise UnprocessableInput("the current password is wrong")
        try:
            await asyncio.to_thread(auth.users.set_password, user.id, new)
        except AccountError as exc:
            raise UnprocessableInput(str(exc)) from None
        return Redirect("/login", status_code=303)  # every session of the user has ended

    @post("/account/keys/{key_id:int}/revoke", status_code=303, opt={"account": True})
    async def revoke_key(self, request: Request[Any, Any, Any], key_id: int) -> Redirect:
        user_id = _principal(request).user.id
        if not await asyncio.to_thread(auth_of(request).keys.revoke, key_id, user_id):
            raise NotFound("no such key")
        return Redirect("/account", status_code=303)


class AdminPages(Controller):
    path = "/admin"
    opt = ADMIN

    @get("/")
    async def admin(self, request: Request[Any, Any, Any]) -> Template:
        return Template("admin.html", context=await asyncio.to_thread(admin_context, request))

    @post("/users", status_code=200)
    async def create_user(self, request: Request[Any, Any, Any]) -> Template:
        form = await request.form()
        name = _text(form, "name", 64)
        role: Role = "admin" if form.get("role") == "admin" else "staff"
        password = generate_password()
        try:
            user = await asyncio.to_thread(auth_of(request).users.create, name, password, role)
        except AccountError as exc:
            raise UnprocessableInput(str(exc)) from None
        created = {"name": user.name, "password": password}
        context = await asyncio.to_thread(admin_context, request, created=created)
        return Template("admin.html", context=context)

    @post("/users/{user_id:int}/disabled", status_code=303)
    async def set_disabled(self, request: Request[Any, Any, Any], user_id: int) -> Redirect:
        auth, form = auth_of(request), await request.form()
        if user_id == _principal(request).user.id:
            raise UnprocessableInput("you cannot disable your own account")
        if await asyncio.to_thread(auth.users.get, user_id) is None:
            raise NotFound("no such user")
        await asyncio.to_thread(auth.users.set_disabled, user_id, form.get("disabled") == "on")
        return Redirect("/admin", status_code=303)

    @post("/members", status_code=303)
    async def add_member(self, request: Request[Any, Any, Any]) -> Redirect:
        """Membership of a collection (created when new), read or read and write."""
        form, services = await request.form(), _services(request)
        user = await asyncio.to_thread(services.auth.users.by_name, _text(form, "user", 64))
        collection = _text(form, "collection", 100)
        if user is None or not collection:
            raise UnprocessableInput("give an existing user and a collection name")
        create = form.get("create") == "on"
        collection_id = await asyncio.to_thread(_collection_for_member, request, collection, create)
        write = form.get("can_write") == "on"
        await asyncio.to_thread(services.auth.members.add, collection_id, user.id, can_write=write)
        return Redirect("/admin", status_code=303)

    @post("/members/remove", status_code=303)
    async def remove_member(self, request: Request[Any, Any, Any]) -> Redirect:
        form = await request.form()
        collection_id, user_id = _one_id(form, "collection_id"), _one_id(form, "user_id")
        await asyncio.to_thread(auth_of(request).members.remove, collection_id, user_id)
        return Redirect("/admin", status_code=303)

    @post("/keys/{key_id:int}/revoke", status_code=303)
    async def revoke_key(self, request: Request[Any, Any, Any], key_id: int) -> Redirect:
        if not await asyncio.to_thread(auth_of(request).keys.revoke, key_id):
            raise NotFound("no such key")
        return Redirect("/admin", status_code=303)

    @post("/models", status_code=303)
    async def offer_models(self, request: Request[Any, Any, Any]) -> Redirect:
        """The models chat offers besides the default: exactly those checked."""
        form, services = await request.form(), _services(request)
        names = [str(v) for v in form.getall("offered")] if "offered" in form else []
        try:
            await asyncio.to_thread(ChatModels(services.db, services.settings).set_offered, names)
        except ModelError as exc:
            raise UnprocessableInput(str(exc)) from None
        return Redirect("/admin", status_code=303)


def _collection_for_member(request: Request[Any, Any, Any], name: str, create: bool) -> int:
    """The collection named (regardless of case), or, when the admin said so (``create``),
    a new one, made as "New collection" makes it (name checked, audited): a typo must not
    make a collection nobody asked for."""
    services = _services(request)
    found = Workspaces(services.db).by_name(name)
    if found is not None:
        return found.id
    if not create:
        raise UnprocessableInput(
            f"no collection is named {name[:100]!r}: pick one from the list, or check "
            "“create it if it is new” to make it"
        )
    made, _ = workspaces.create(workspaces.Desk.of(services), _principal(request), name)
    return made.id
