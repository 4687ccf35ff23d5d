"""Sharing a conversation, as the UI and the API both do it: check the names asked for,
share, revoke, and build the read-only view a reader opens. Every change is audited."""

from __future__ import annotations

from dataclasses import dataclass

from app.auth.principal import Principal
from app.auth.scope import current_access
from app.auth.share_audit import ShareAudit
from app.auth.sharing import may_read_shared, openable_documents
from app.auth.users import NAME
from app.chat.records import Conversation, Message
from app.chat.redaction import redact
from app.chat.shares import SHARE_KINDS, Share, ShareKind, Shares
from app.errors import NotFound, UnprocessableInput
from app.state import Services

MAX_NAME_CHARS = 64
MAX_TARGETS = 50  # names in one request


@dataclass(frozen=True)
class Target:
    kind: ShareKind
    id: int
    name: str


@dataclass(frozen=True)
class SharedView:
    conversation: Conversation
    owner: str | None
    messages: list[Message]  # citations the reader may not open are hidden
    is_owner: bool


def shares_of(services: Services) -> Shares:
    return Shares(services.db)


def audit_of(services: Services) -> ShareAudit:
    return ShareAudit(services.db)


def caller() -> Principal:
    """This request's principal (the guard has made sure there is one)."""
    access = current_access()
    if access is None or access.principal is None:
        raise NotFound("no such conversation")
    return access.principal


def resolve(services: Services, principal: Principal, kind: str, name: str) -> Target:
    """The user or group named, or a 422 that says what is wrong with the name."""
    name = name.strip()
    if kind not in SHARE_KINDS:
        raise UnprocessableInput("share with a 'user' or a 'group'")
    if not name:
        raise UnprocessableInput(f"name the {kind} to share with")
    if len(name) > MAX_NAME_CHARS or not NAME.fullmatch(name):
        raise UnprocessableInput(
            f"a {kind} name is 1-{MAX_NAME_CHARS} letters, digits or . _ @ - characters"
        )
    if kind == "group":
        group = services.auth.groups.by_name(name)
        if group is None:
            raise UnprocessableInput(f"there is no group named {name!r}")
        return Target("group", group.id, group.name)
    user = services.auth.users.by_name(name)
    if user is None:
        raise UnprocessableInput(f"there is no user named {name!r}")
    if user.id == principal.user.id:
        raise UnprocessableInput("you cannot share a conversation with yourself")
    if user.disabled:
        raise UnprocessableInput(f"the account {name!r} is disabled")
    return Target("user", user.id, user.name)


def resolve_all(
    services: Services, principal: Principal, users: list[str], groups: list[str]
) -> list[Target]:
    if not users and not groups:
        raise UnprocessableInput("name at least one user or group to share with")
    if len(users) + len(groups) > MAX_TARGETS:
        raise UnprocessableInput(f"share with at most {MAX_TARGETS} users and groups at once")
    named = [("user", n) for n in users] + [("group", n) for n in groups]
    return [resolve(services, principal, kind, name) for kind, name in named]


def share(services: Services, conversation_id: int, targets: list[Target]) -> list[Share]:
    """Share with each target (again: no change); the shares, new ones audited."""
    principal = caller()
    _owned(services, principal, conversation_id)
    shares, audit = shares_of(services), audit_of(services)
    made = []
    for target in targets:
        found, new = shares.add(conversation_id, target.kind, target.id, principal.user.id)
        if new:
            audit.record(principal, "share", found)
        made.append(found)
    return made


def revoke(services: Services, conversation_id: int | None, share_id: int) -> Share:
    """Revoke a share of the conversation (None: any conversation, for an admin)."""
    principal = caller()
    shares = shares_of(services)
    found = shares.get(share_id)
    if found is None or conversation_id not in (None, found.conversation_id):
        raise NotFound("no such share")
    if conversation_id is not None:
        _owned(services, principal, conversation_id)
    if shares.remove(share_id):
        audit_of(services).record(principal, "revoke", found)
    return found


def _owned(services: Services, principal: Principal, conversation_id: int) -> None:
    """Only the one who may manage the conversation shares it (the guard checked the
    path; a body or form naming another conversation is checked here)."""
    if principal.restricted or not services.auth.ownership.may_see(principal, conversation_id):
        raise NotFound("no such conversation")


def shared_view(services: Services, conversation_id: int) -> SharedView:
    """The conversation as the caller may read it, shared or their own (404 otherwise,
    as for a conversation that does not exist); the passages shown are audited."""
    principal = caller()
    shares = shares_of(services)
    conversation = services.conversations.get(conversation_id)
    if conversation is None or not may_read_shared(
        services.auth, shares, principal, conversation_id
    ):
        raise NotFound("no such conversation")
    messages = services.conversations.messages(conversation_id)
    openable = openable_documents(services.store, messages)
    shown = [redact(m, openable) for m in messages]
    owner = shares.owner_of(conversation_id)
    is_owner = services.auth.ownership.may_see(principal, conversation_id)
    if not is_owner:
        audit_of(services).record_shown(principal, shown)
    return SharedView(conversation, owner[1] if owner else None, shown, is_owner)
