"""Administering collections as workspaces, the same for the API, the pages and the CLI:
create, rename, describe, switch OCR, choose a default chat model, delete. Each change is
checked (names, lengths, offered models) and recorded in the collection audit.

Only whoever may administer (an admin's session or unrestricted key: the guard's
``opt={"admin": True}``) gets here; the handlers see to that before calling.

Deleting: the default collection is refused (uploads without a collection, the samples
and every fresh key's first collection land there, so it always exists), and so is a
collection a synced source fills (delete the source first: its next run would otherwise
bring the documents back). Everything else goes with it: documents, passages, vectors,
originals no other collection holds, memberships and group grants; conversations scoped
to it keep their other collections, or search everything their asker may read when it
was their only one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from app.auth.collection_audit import CollectionAudit
from app.auth.principal import Principal
from app.chat.conversations import Conversations
from app.chat.local_models import ChatModels
from app.config.settings import Settings
from app.errors import AppError, NotFound, UnprocessableInput
from app.state import Services
from retrieval.collections import (
    MAX_DESCRIPTION_CHARS,
    MAX_INSTRUCTIONS_CHARS,
    CollectionError,
    CollectionInUse,
    CollectionMissing,
    CollectionNameTaken,
    CollectionSettings,
    DeletedCollection,
    Workspaces,
    clean_name,
    clean_text,
)
from retrieval.db import Database
from retrieval.library import Library

OcrChoice = Literal["on", "off", "default"]
_OCR: dict[str, bool | None] = {"on": True, "off": False, "default": None}


class CollectionConflict(AppError):
    status = 409
    title = "Conflict"


@dataclass(frozen=True)
class Changes:
    """What a PATCH (or the settings form) changes; None: left as it is. ``default_model``
    "" clears it (the deployment's model again)."""

    name: str | None = None
    description: str | None = None
    instructions: str | None = None
    ocr: OcrChoice | None = None
    default_model: str | None = None


@dataclass(frozen=True)
class Desk:
    """What administering collections needs: the running app's (:meth:`of`), or what the
    command line opens itself (``app.documents.collections_cli``)."""

    db: Database
    settings: Settings
    library: Library
    conversations: Conversations
    default_collection: int

    @classmethod
    def of(cls, services: Services) -> Desk:
        return cls(
            services.db,
            services.settings,
            services.library,
            services.conversations,
            services.collection_id,
        )


def _app_error(exc: CollectionError) -> AppError:
    if isinstance(exc, CollectionMissing):
        return NotFound("no such collection")
    if isinstance(exc, CollectionNameTaken | CollectionInUse):
        return CollectionConflict(str(exc))
    return UnprocessableInput(str(exc))


def get(desk: Desk | Services, collection_id: int) -> CollectionSettings:
    found = Workspaces(desk.db).get(collection_id)
    if found is None:
        raise NotFound("no such collection")
    return found


def create(desk: Desk, principal: Principal | None, name: str) -> tuple[CollectionSettings, bool]:
    """A new collection (``created`` False: one with exactly this name existed)."""
    try:
        settings, created = Workspaces(desk.db).create(name)
    except CollectionError as exc:
        raise _app_error(exc) from None
    if created:
        CollectionAudit(desk.db).record(principal, settings.id, settings.name, "created")
    return settings, created


def change(
    desk: Desk, principal: Principal | None, collection_id: int, changes: Changes
) -> CollectionSettings:
    """Apply ``changes`` (all checked before any is stored) and record them."""
    workspaces = Workspaces(desk.db)
    before = get(desk, collection_id)
    model = _checked_model(desk, changes.default_model)
    try:  # refused before anything is stored, rather than half-applied
        if changes.name is not None:
            clean_name(changes.name)
        if changes.description is not None:
            clean_text(changes.description, "description", MAX_DESCRIPTION_CHARS)
        if changes.instructions is not None:
            clean_text(changes.instructions, "instructions", MAX_INSTRUCTIONS_CHARS)
    except CollectionError as exc:
        raise _app_error(exc) from None
    renamed = changes.name is not None and changes.name.strip() != before.name
    if renamed and (reason := _named_by_settings(desk, before)):
        raise CollectionConflict(f"{before.name!r} cannot be renamed: {reason}")
    try:
        after = before
        if changes.name is not None and renamed:
            after = workspaces.rename(collection_id, changes.name)
        if changes.description is not None or changes.instructions is not None:
            after = workspaces.describe(
                collection_id, description=changes.description, instructions=changes.instructions
            )
        if changes.ocr is not None:
            after = workspaces.set_ocr(collection_id, _OCR[changes.ocr])
        if model is not None:
            after = workspaces.set_default_model(collection_id, model or None)
    except CollectionError as exc:
        raise _app_error(exc) from None
    _record_changes(desk, principal, before, after)
    return after


def _named_by_settings(desk: Desk, collection: CollectionSettings) -> str | None:
    """Why the deployment's settings need this collection under its name, if they do: the
    server finds the default collection by its name at every start, and single sign-on
    grants groups collections by name at every sign-in. Renamed or deleted, each would
    come back empty under the old name, and what was in it would be left out (or, for
    the default, become deletable)."""
    if collection.id == desk.default_collection:
        return "it is the default collection, which the server finds by its name"
    granted = desk.settings.auth.oidc_group_collections
    if any(collection.name in grants for grants in granted.values()):
        return (
            "RAGDESK_OIDC_GROUP_COLLECTIONS gives single sign-on groups this collection by "
            "name; change that setting first"
        )
    return None


def _checked_model(desk: Desk, raw: str | None) -> str | None:
    """The default model asked for: "" to clear; else one chat offers (422 otherwise)."""
    if raw is None:
        return None
    name = raw.strip()
    if not name:
        return ""
    offered = [m.name for m in ChatModels(desk.db, desk.settings).offered()]
    if name not in offered:
        listed = ", ".join(offered)
        raise UnprocessableInput(
            f"the model {name[:80]!r} is not offered in chat (offered: {listed})"
        )
    return name


def _record_changes(
    desk: Desk,
    principal: Principal | None,
    before: CollectionSettings,
    after: CollectionSettings,
) -> None:
    audit = CollectionAudit(desk.db)
    if before.name != after.name:
        audit.record(principal, after.id, after.name, "renamed", f"from {before.name!r}")
    changed = [
        field
        for field in ("description", "instructions", "ocr", "default_model")
        if getattr(before, field) != getattr(after, field)
    ]
    if changed:
        audit.record(principal, after.id, after.name, "changed", ", ".join(changed))


def delete(desk: Desk, principal: Principal | None, collection_id: int) -> DeletedCollection:
    """Delete the collection and everything in it (see the module's docstring)."""
    settings = get(desk, collection_id)
    if collection_id == desk.default_collection:
        raise CollectionConflict(
            f"{settings.name!r} is the default collection: uploads that name no collection "
            "go there, so it cannot be deleted (delete its documents instead)"
        )
    if reason := _named_by_settings(desk, settings):
        raise CollectionConflict(f"{settings.name!r} cannot be deleted: {reason}")
    sources = _sources_filling(desk.db, collection_id)
    if sources:
        raise CollectionConflict(
            f"the synced source {sources[0]!r} fills this collection: delete the source first"
        )
    with desk.db.write() as db:  # claims of sources deleted since: nothing needs them
        db.execute("DELETE FROM sync_claims WHERE collection_id = ?", [collection_id])
    try:
        deleted = desk.library.delete_collection(Workspaces(desk.db), collection_id)
    except CollectionError as exc:
        raise _app_error(exc) from None
    _narrow_scopes(desk, collection_id)
    detail = f"{len(deleted.document_ids)} documents"
    CollectionAudit(desk.db).record(principal, collection_id, settings.name, "deleted", detail)
    return deleted


def _sources_filling(db: Database, collection_id: int) -> list[str]:
    rows = db.read().execute("SELECT name FROM sources WHERE collection_id = ?", [collection_id])
    return sorted(str(r[0]) for r in rows)  # code points, whatever PostgreSQL's collation


def _narrow_scopes(desk: Desk, collection_id: int) -> None:
    """Conversations that searched the deleted collection keep their others; one that
    searched only it searches everything its asker may read (None), rather than nothing."""
    rows = desk.db.read().execute(  # the JSON lists that spell the id (and some longer ones)
        "SELECT id, scope FROM conversations WHERE scope IS NOT NULL AND scope LIKE ?",
        [f"%{collection_id}%"],
    )
    for conversation_id, scope in rows.fetchall():
        searched = {int(c) for c in json.loads(scope)}
        if collection_id in searched:
            left = searched - {collection_id}
            desk.conversations.set_scope(int(conversation_id), left or None)


@dataclass(frozen=True)
class GroupAccess:
    group_id: int
    group_name: str
    can_write: bool
    source: str  # local (given here or on /admin/groups) or settings (single sign-on)


def groups_of(services: Services, collection_id: int) -> list[GroupAccess]:
    """The groups whose members may read (or write) the collection."""
    rows = services.db.read().execute(
        """SELECT g.id, g.name, gc.can_write, gc.source FROM group_collections gc
           JOIN groups g ON g.id = gc.group_id WHERE gc.collection_id = ?""",
        [collection_id],
    )
    found = [GroupAccess(int(r[0]), str(r[1]), bool(r[2]), str(r[3])) for r in rows]
    return sorted(found, key=lambda g: g.group_name)  # code points, as on SQLite


def add_member(
    services: Services,
    principal: Principal | None,
    collection_id: int,
    user_name: str,
    *,
    can_write: bool,
) -> None:
    settings = get(services, collection_id)
    user = services.auth.users.by_name(user_name.strip())
    if user is None:
        raise UnprocessableInput(f"no user named {user_name.strip()[:64]!r}")
    services.auth.members.add(collection_id, user.id, can_write=can_write)
    access = "read and write" if can_write else "read"
    CollectionAudit(services.db).record(
        principal, collection_id, settings.name, "member added", f"{user.name} ({access})"
    )


def remove_member(
    services: Services, principal: Principal | None, collection_id: int, user_id: int
) -> None:
    settings = get(services, collection_id)
    member = next(
        (m for m in services.auth.members.of_collection(collection_id) if m.user_id == user_id),
        None,
    )
    if member is None:
        raise NotFound("no such member of this collection")
    services.auth.members.remove(collection_id, user_id)
    CollectionAudit(services.db).record(
        principal, collection_id, settings.name, "member removed", member.user_name
    )


def grant_group(
    services: Services,
    principal: Principal | None,
    collection_id: int,
    group_name: str,
    *,
    can_write: bool,
) -> None:
    settings = get(services, collection_id)
    group = services.auth.groups.by_name(group_name.strip())
    if group is None:
        raise UnprocessableInput(f"no group named {group_name.strip()[:64]!r}")
    services.auth.groups.grant(group.id, collection_id, can_write=can_write)
    access = "read and write" if can_write else "read"
    CollectionAudit(services.db).record(
        principal, collection_id, settings.name, "group added", f"{group.name} ({access})"
    )


def revoke_group(
    services: Services, principal: Principal | None, collection_id: int, group_id: int
) -> None:
    settings = get(services, collection_id)
    group = services.auth.groups.get(group_id)
    if group is None or not services.auth.groups.revoke(group_id, collection_id):
        raise NotFound("no such group on this collection")
    CollectionAudit(services.db).record(
        principal, collection_id, settings.name, "group removed", group.name
    )
