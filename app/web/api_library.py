"""The native JSON API for collections and conversations (``/api/collections``,
``/api/conversations``), limited like everything else to what the caller may see."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, Request, delete, get, patch, post, put
from litestar.di import Provide
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.access import readable_collections, visible_conversation_ids
from app.auth.guards import current_principal
from app.chat.service import ChatService
from app.documents import workspaces
from app.errors import NotFound
from app.schemas import (
    CollectionAccess,
    CollectionDeleted,
    CollectionDetail,
    CollectionGroupIn,
    CollectionGroupOut,
    CollectionIn,
    CollectionList,
    CollectionMemberIn,
    CollectionMemberOut,
    CollectionOut,
    CollectionPatch,
    ConversationDetail,
    ConversationList,
    ConversationOut,
    MessageOut,
    OcrSetting,
    RowId,
)
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.conversations_ui import Conflict
from app.web.deps import provide_chat, provide_services
from retrieval.collections import CollectionSettings
from retrieval.records import CollectionRecord

Req = Request[Any, Any, Any]


def _collection_out(collection: CollectionRecord) -> CollectionOut:
    return CollectionOut(collection.id, collection.name, collection.document_count)


def collection_detail(c: CollectionSettings) -> CollectionDetail:
    ocr: OcrSetting = "default" if c.ocr is None else ("on" if c.ocr else "off")
    return CollectionDetail(
        c.id, c.name, c.document_count, c.description, c.instructions, ocr,
        c.default_model, c.created_at, c.updated_at,
    )  # fmt: skip


def _access(services: Services, collection_id: int) -> CollectionAccess:
    members = services.auth.members.of_collection(collection_id)
    groups = workspaces.groups_of(services, collection_id)
    return CollectionAccess(
        [CollectionMemberOut(m.user_id, m.user_name, m.can_write) for m in members],
        [CollectionGroupOut(g.group_id, g.group_name, g.can_write, g.source) for g in groups],
    )


class CollectionsApi(Controller):
    path = "/api/collections"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @get()
    async def list_collections(self, services: Services) -> CollectionList:
        """The collections the caller may read, with their document counts."""
        found = await asyncio.to_thread(services.store.collections)
        return CollectionList([_collection_out(c) for c in readable_collections(found)])

    @post(status_code=HTTP_201_CREATED, opt=ADMIN)
    async def create_collection(
        self, data: CollectionIn, services: Services, request: Req
    ) -> CollectionOut:
        """A new collection (admins). The same name again returns that collection as it
        is; the name spelt with other case is taken (409)."""
        principal = current_principal(request)
        made, _ = await asyncio.to_thread(
            workspaces.create, workspaces.Desk.of(services), principal, data.name
        )
        return CollectionOut(made.id, made.name, made.document_count)

    @get("/{collection_id:int}")
    async def get_collection(self, collection_id: RowId, services: Services) -> CollectionDetail:
        """A collection the caller may read, with its settings (404 for any other)."""
        found = await asyncio.to_thread(workspaces.get, services, collection_id)
        return collection_detail(found)

    @patch("/{collection_id:int}", opt=ADMIN)
    async def change_collection(
        self, collection_id: RowId, data: CollectionPatch, services: Services, request: Req
    ) -> CollectionDetail:
        """Rename, describe, give instructions, switch OCR, choose a default model."""
        changes = workspaces.Changes(
            data.name, data.description, data.instructions, data.ocr, data.default_model
        )
        changed = await asyncio.to_thread(
            workspaces.change,
            workspaces.Desk.of(services),
            current_principal(request),
            collection_id,
            changes,
        )
        return collection_detail(changed)

    @delete("/{collection_id:int}", status_code=200, opt=ADMIN)
    async def delete_collection(
        self, collection_id: RowId, services: Services, request: Req
    ) -> CollectionDeleted:
        """The collection with its documents (their passages, vectors and originals);
        the default collection, and one a synced source fills, are refused (409)."""
        gone = await asyncio.to_thread(
            workspaces.delete,
            workspaces.Desk.of(services),
            current_principal(request),
            collection_id,
        )
        return CollectionDeleted(collection_id, gone.settings.name, len(gone.document_ids))

    @get("/{collection_id:int}/access", opt=ADMIN)
    async def collection_access(self, collection_id: RowId, services: Services) -> CollectionAccess:
        """Who may read and write it: members and groups."""
        await asyncio.to_thread(workspaces.get, services, collection_id)
        return await asyncio.to_thread(_access, services, collection_id)

    @put("/{collection_id:int}/members", opt=ADMIN)
    async def put_member(
        self, collection_id: RowId, data: CollectionMemberIn, services: Services, request: Req
    ) -> CollectionAccess:
        """Add a member (or change what a member may do)."""
        await asyncio.to_thread(
            workspaces.add_member, services, current_principal(request), collection_id,
            data.user, can_write=data.write,
        )  # fmt: skip
        return await asyncio.to_thread(_access, services, collection_id)

    @delete("/{collection_id:int}/members/{user_id:int}", status_code=200, opt=ADMIN)
    async def delete_member(
        self, collection_id: RowId, user_id: RowId, services: Services, request: Req
    ) -> CollectionAccess:
        await asyncio.to_thread(
            workspaces.remove_member, services, current_principal(request), collection_id, user_id
        )
        return await asyncio.to_thread(_access, services, collection_id)

    @put("/{collection_id:int}/groups", opt=ADMIN)
    async def put_group(
        self, collection_id: RowId, data: CollectionGroupIn, services: Services, request: Req
    ) -> CollectionAccess:
        """Give a group's members access (or change what they may do)."""
        await asyncio.to_thread(
            workspaces.grant_group, services, current_principal(request), collection_id,
            data.group, can_write=data.write,
        )  # fmt: skip
        return await asyncio.to_thread(_access, services, collection_id)

    @delete("/{collection_id:int}/groups/{group_id:int}", status_code=200, opt=ADMIN)
    async def delete_group(
        self, collection_id: RowId, group_id: RowId, services: Services, request: Req
    ) -> CollectionAccess:
        await asyncio.to_thread(
            workspaces.revoke_group, services, current_principal(request), collection_id, group_id
        )
        return await asyncio.to_thread(_access, services, collection_id)


class ConversationsApi(Controller):
    path = "/api/conversations"
    dependencies = {
        "services": Provide(provide_services, sync_to_thread=False),
        "chat": Provide(provide_chat, sync_to_thread=False),
    }

    @get()
    async def list_conversations(self, services: Services) -> ConversationList:
        """The caller's conversations, most recent first."""
        only = await asyncio.to_thread(visible_conversation_ids, services.auth)
        visible = await asyncio.to_thread(services.conversations.listing, "", 200, only)
        return ConversationList(
            [ConversationOut(c.id, c.title, c.created_at, c.updated_at) for c, _ in visible]
        )

    @get("/{conversation_id:int}")
    async def get_conversation(
        self, conversation_id: RowId, services: Services
    ) -> ConversationDetail:
        """A conversation with its questions and answers (answers with their citations,
        their unsupported sentences and whether they are grounded at all)."""
        conversation = await asyncio.to_thread(services.conversations.get, conversation_id)
        if conversation is None:
            raise NotFound("no such conversation")
        messages = await asyncio.to_thread(services.conversations.messages, conversation_id)
        c = conversation
        return ConversationDetail(
            c.id, c.title, c.created_at, c.updated_at, [MessageOut.of(m) for m in messages]
        )

    @delete("/{conversation_id:int}", status_code=HTTP_204_NO_CONTENT)
    async def delete_conversation(
        self, conversation_id: RowId, services: Services, chat: ChatService
    ) -> None:
        messages = await asyncio.to_thread(services.conversations.messages, conversation_id)
        if messages and messages[-1].role == "user" and chat.is_answering(messages[-1].id):
            raise Conflict("an answer is being written: stop it first")
        if not await asyncio.to_thread(services.conversations.delete, conversation_id):
            raise NotFound("no such conversation")
