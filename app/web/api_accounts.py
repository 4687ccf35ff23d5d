"""The native JSON API for accounts (admins only): ``/api/users`` and ``/api/keys``.

Generated passwords and new keys are in the creating response only; the server keeps
their hashes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, Request, delete, get, post
from litestar.di import Provide
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.keys import ApiKey
from app.auth.passwords import generate_password
from app.auth.principal import User
from app.auth.users import AccountError
from app.errors import NotFound, UnprocessableInput
from app.schemas import (
    KeyCreated,
    KeyIn,
    KeyList,
    KeyOut,
    RowId,
    UserCreated,
    UserIn,
    UserList,
    UserOut,
)
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.deps import provide_services


def _user_fields(user: User) -> dict[str, Any]:
    return {"id": user.id, "name": user.name, "role": user.role, "disabled": user.disabled}


def _key_fields(key: ApiKey) -> dict[str, Any]:
    collections = None if key.collections is None else sorted(key.collections)
    return {
        "id": key.id,
        "user_id": key.user_id,
        "user_name": key.user_name,
        "name": key.name,
        "prefix": key.prefix,
        "read_only": key.read_only,
        "collections": collections,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
        "revoked_at": key.revoked_at,
    }


class _AccountsApi(Controller):
    """What every accounts controller shares: admins only, with the services."""

    opt = ADMIN
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}


class UsersApi(_AccountsApi):
    path = "/api/users"

    @get()
    async def list_users(self, services: Services) -> UserList:
        users = await asyncio.to_thread(services.auth.users.list)
        return UserList([UserOut(**_user_fields(u)) for u in users])

    @post(status_code=HTTP_201_CREATED)
    async def create_user(self, data: UserIn, services: Services) -> UserCreated:
        """A user with a generated password (in this response only)."""
        password = generate_password()
        try:
            user = await asyncio.to_thread(
                services.auth.users.create, data.name, password, data.role
            )
        except AccountError as exc:
            raise UnprocessableInput(str(exc)) from None
        return UserCreated(**_user_fields(user), password=password)


class KeysApi(_AccountsApi):
    path = "/api/keys"

    @get()
    async def list_keys(self, services: Services) -> KeyList:
        """Every key: prefix, owner, scope, last use, revocation (never the key itself)."""
        keys = await asyncio.to_thread(services.auth.keys.list)
        return KeyList([KeyOut(**_key_fields(k)) for k in keys])

    @post(status_code=HTTP_201_CREATED)
    async def create_key(self, data: KeyIn, services: Services) -> KeyCreated:
        """A key for ``user``, limited to ``collections`` (names) when given."""
        return await asyncio.to_thread(_create_key, services, data)

    @delete("/{key_id:int}", status_code=HTTP_204_NO_CONTENT)
    async def revoke_key(self, key_id: RowId, request: Request[Any, Any, Any]) -> None:
        services: Services = request.app.state.services
        if not await asyncio.to_thread(services.auth.keys.revoke, key_id):
            raise NotFound("no such key")


def _create_key(services: Services, data: KeyIn) -> KeyCreated:
    user = services.auth.users.by_name(data.user)
    if user is None:
        raise UnprocessableInput(f"no user named {data.user!r}")
    collections = None
    if data.collections is not None:
        ids = {c.name: c.id for c in services.store.collections()}
        missing = [name for name in data.collections if name not in ids]
        if missing:
            raise UnprocessableInput(f"no collection named {missing[0]!r}")
        collections = [ids[name] for name in data.collections]
    key, created = services.auth.keys.create(
        user, name=data.name, read_only=data.read_only, collections=collections
    )
    return KeyCreated(**_key_fields(created), key=key)
