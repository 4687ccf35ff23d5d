"""The native JSON API for accounts (admins only): ``/api/users``, ``/api/keys`` and
``/api/groups`` (groups, their members and their collections).

Generated passwords and new keys are in the creating response only; the server keeps
their hashes.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.di import Provide
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.groups import Group
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
    Name,
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


class GroupIn(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class GroupMemberIn(msgspec.Struct, forbid_unknown_fields=True):
    user: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class GroupCollectionIn(msgspec.Struct, forbid_unknown_fields=True):
    collection: Name
    write: bool = False  # members may upload and delete too


class GroupMemberOut(msgspec.Struct):
    user_id: int
    user_name: str
    source: str  # local (added here) or oidc (from the provider's group claim)


class GroupCollectionOut(msgspec.Struct):
    collection_id: int
    collection: str
    write: bool
    source: str  # local (given here) or settings (RAGDESK_OIDC_GROUP_COLLECTIONS)


class GroupOut(msgspec.Struct):
    id: int
    name: str
    created_at: float
    members: list[GroupMemberOut]
    collections: list[GroupCollectionOut]


class GroupList(msgspec.Struct):
    groups: list[GroupOut]


class GroupsApi(_AccountsApi):
    """Groups: members read (and, with ``write``, change) the group's collections."""

    path = "/api/groups"

    @get()
    async def list_groups(self, services: Services) -> GroupList:
        return await asyncio.to_thread(_group_list, services)

    @post(status_code=HTTP_201_CREATED)
    async def create_group(self, data: GroupIn, services: Services) -> GroupOut:
        try:
            group = await asyncio.to_thread(services.auth.groups.create, data.name)
        except AccountError as exc:
            raise UnprocessableInput(str(exc)) from None
        return await asyncio.to_thread(group_out, services, group)

    @delete("/{group_id:int}", status_code=HTTP_204_NO_CONTENT)
    async def delete_group(self, group_id: RowId, services: Services) -> None:
        if not await asyncio.to_thread(services.auth.groups.delete, group_id):
            raise NotFound("no such group")

    @post("/{group_id:int}/members")
    async def add_member(
        self, group_id: RowId, data: GroupMemberIn, services: Services
    ) -> GroupOut:
        """The user joins the group (an admin's addition: sign-in never removes it)."""
        return await asyncio.to_thread(add_group_member, services, group_id, data.user)

    @delete("/{group_id:int}/members/{user_id:int}", status_code=HTTP_204_NO_CONTENT)
    async def remove_member(self, group_id: RowId, user_id: RowId, services: Services) -> None:
        if not await asyncio.to_thread(services.auth.groups.remove_member, group_id, user_id):
            raise NotFound("no such member")

    @post("/{group_id:int}/collections")
    async def grant_collection(
        self, group_id: RowId, data: GroupCollectionIn, services: Services
    ) -> GroupOut:
        """Members may read the collection (and change it, with ``write``)."""
        return await asyncio.to_thread(grant_group_collection, services, group_id, data)

    @delete("/{group_id:int}/collections/{collection_id:int}", status_code=HTTP_204_NO_CONTENT)
    async def revoke_collection(
        self, group_id: RowId, collection_id: RowId, services: Services
    ) -> None:
        if not await asyncio.to_thread(services.auth.groups.revoke, group_id, collection_id):
            raise NotFound("the group has no such collection")


def group_out(services: Services, group: Group) -> GroupOut:
    groups = services.auth.groups
    members = [GroupMemberOut(m.user_id, m.user_name, m.source) for m in groups.members(group.id)]
    grants = [
        GroupCollectionOut(g.collection_id, g.collection_name, g.can_write, g.source)
        for g in groups.grants(group.id)
    ]
    return GroupOut(group.id, group.name, group.created_at, members, grants)


def _group_list(services: Services) -> GroupList:
    return GroupList([group_out(services, g) for g in services.auth.groups.list()])


def group_or_404(services: Services, group_id: int) -> Group:
    group = services.auth.groups.get(group_id)
    if group is None:
        raise NotFound("no such group")
    return group


def add_group_member(services: Services, group_id: int, user_name: str) -> GroupOut:
    group = group_or_404(services, group_id)
    user = services.auth.users.by_name(user_name)
    if user is None:
        raise UnprocessableInput(f"no user named {user_name!r}")
    services.auth.groups.add_member(group.id, user.id)
    return group_out(services, group)


def grant_group_collection(services: Services, group_id: int, data: GroupCollectionIn) -> GroupOut:
    group = group_or_404(services, group_id)
    ids = {c.name: c.id for c in services.store.collections()}
    if data.collection not in ids:
        raise UnprocessableInput(f"no collection named {data.collection!r}")
    services.auth.groups.grant(group.id, ids[data.collection], can_write=data.write)
    return group_out(services, group)
