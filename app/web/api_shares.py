"""The JSON API for sharing conversations read-only: the owner's
``/api/conversations/{id}/shares`` (list, share, revoke), the reader's ``/api/shared``
(what is shared with them, and a shared conversation with the passages they may not
open hidden) and the admins' ``/api/shares`` (every share; revoke any)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import msgspec
from litestar import Controller, delete, get, post
from litestar.di import Provide
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.chat.shares import Share, SharedConversation
from app.schemas import ConversationDetail, MessageOut, RowId
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.deps import provide_services
from app.web.share_actions import (
    MAX_NAME_CHARS,
    MAX_TARGETS,
    caller,
    resolve_all,
    revoke,
    share,
    shared_view,
    shares_of,
)

ShareName = Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS)]
ShareNames = Annotated[list[ShareName], msgspec.Meta(max_length=MAX_TARGETS)]


def shared_url(conversation_id: int) -> str:
    """The stable address of the read-only view (the same for every reader)."""
    return f"/shared/{conversation_id}"


class ShareIn(msgspec.Struct, forbid_unknown_fields=True):
    """Users and groups (by name) to share the conversation with."""

    users: ShareNames = msgspec.field(default_factory=list)
    groups: ShareNames = msgspec.field(default_factory=list)


class ShareOut(msgspec.Struct):
    id: int
    conversation_id: int
    kind: str  # "user" or "group"
    name: str
    shared_at: float
    url: str  # the read-only view

    @classmethod
    def of(cls, share: Share) -> ShareOut:
        return cls(
            share.id,
            share.conversation_id,
            share.kind,
            share.target_name,
            share.created_at,
            shared_url(share.conversation_id),
        )


class ShareList(msgspec.Struct):
    shares: list[ShareOut]


class AdminShareOut(ShareOut):
    title: str = ""
    owner: str | None = None


class AdminShareList(msgspec.Struct):
    shares: list[AdminShareOut]


class SharedOut(msgspec.Struct):
    """A conversation shared with the caller; ``via``: "you" and/or the groups it reached
    them through."""

    conversation_id: int
    title: str
    owner: str | None
    via: list[str]
    shared_at: float
    updated_at: float
    url: str

    @classmethod
    def of(cls, shared: SharedConversation) -> SharedOut:
        s = shared
        return cls(
            s.conversation_id,
            s.title,
            s.owner,
            list(s.via),
            s.shared_at,
            s.updated_at,
            shared_url(s.conversation_id),
        )


class SharedList(msgspec.Struct):
    conversations: list[SharedOut]


class SharedDetail(ConversationDetail):
    """A conversation as a reader sees it: a citation of a document they may not open has
    ``document_id`` 0, ``title`` "a document you cannot open" and no passage or url."""

    owner: str | None = None


def _listed(services: Services, conversation_id: int) -> ShareList:
    found = shares_of(services).of_conversation(conversation_id)
    return ShareList([ShareOut.of(s) for s in found])


class ConversationSharesApi(Controller):
    """The owner's side. The guard answers 404 for a conversation that is not the
    caller's, so no one shares or lists the shares of someone else's conversation."""

    path = "/api/conversations/{conversation_id:int}/shares"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @get()
    async def list_shares(self, conversation_id: RowId, services: Services) -> ShareList:
        """Who the conversation is shared with."""
        return await asyncio.to_thread(_listed, services, conversation_id)

    @post(status_code=HTTP_201_CREATED)
    async def add_shares(
        self, conversation_id: RowId, data: ShareIn, services: Services
    ) -> ShareList:
        """Share read-only with the users and groups named (all or none: an unknown name
        is a 422 and nothing is shared); returns every share of the conversation."""

        def run() -> ShareList:
            targets = resolve_all(services, caller(), data.users, data.groups)
            share(services, conversation_id, targets)
            return _listed(services, conversation_id)

        return await asyncio.to_thread(run)

    @delete("/{share_id:int}", status_code=HTTP_204_NO_CONTENT)
    async def revoke_share(
        self, conversation_id: RowId, share_id: RowId, services: Services
    ) -> None:
        await asyncio.to_thread(revoke, services, conversation_id, share_id)


class SharedApi(Controller):
    """The reader's side."""

    path = "/api/shared"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @get()
    async def list_shared(self, services: Services) -> SharedList:
        """The conversations shared with the caller, directly or through a group."""

        def run() -> SharedList:
            principal = caller()
            if principal.restricted:
                return SharedList([])
            found = shares_of(services).with_user(principal.user.id)
            return SharedList([SharedOut.of(s) for s in found])

        return await asyncio.to_thread(run)

    @get("/{shared_id:int}")
    async def get_shared(self, shared_id: RowId, services: Services) -> SharedDetail:
        """A conversation shared with the caller (or their own), read-only, with the
        passages of collections they may not read hidden."""
        view = await asyncio.to_thread(shared_view, services, shared_id)
        c = view.conversation
        messages = [MessageOut.of(m) for m in view.messages]
        for message in messages:
            for citation in message.citations:
                if citation.document_id == 0:
                    citation.url = ""
        return SharedDetail(c.id, c.title, c.created_at, c.updated_at, messages, owner=view.owner)


class SharesAdminApi(Controller):
    """Admins see every share (not the conversations' text) and may revoke any."""

    path = "/api/shares"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @get(opt=ADMIN)
    async def list_every_share(self, services: Services) -> AdminShareList:
        found = await asyncio.to_thread(shares_of(services).every)
        return AdminShareList(
            [
                AdminShareOut(
                    **msgspec.structs.asdict(ShareOut.of(s)), title=s.title, owner=s.owner
                )
                for s in found
            ]
        )

    @delete("/{share_id:int}", status_code=HTTP_204_NO_CONTENT, opt=ADMIN)
    async def revoke_any_share(self, share_id: RowId, services: Services) -> None:
        await asyncio.to_thread(revoke, services, None, share_id)
