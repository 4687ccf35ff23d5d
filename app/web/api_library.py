"""The native JSON API for collections and conversations (``/api/collections``,
``/api/conversations``), limited like everything else to what the caller may see."""

from __future__ import annotations

import asyncio

from litestar import Controller, delete, get, post
from litestar.di import Provide
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.access import readable_collections, visible_conversation_ids
from app.chat.service import ChatService
from app.errors import NotFound, UnprocessableInput
from app.schemas import (
    CollectionIn,
    CollectionList,
    CollectionOut,
    ConversationDetail,
    ConversationList,
    ConversationOut,
    MessageOut,
    RowId,
)
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.conversations_ui import Conflict
from app.web.deps import provide_chat, provide_services
from retrieval.records import CollectionRecord


def _collection_out(collection: CollectionRecord) -> CollectionOut:
    return CollectionOut(collection.id, collection.name, collection.document_count)


class CollectionsApi(Controller):
    path = "/api/collections"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @get()
    async def list_collections(self, services: Services) -> CollectionList:
        """The collections the caller may read, with their document counts."""
        found = await asyncio.to_thread(services.store.collections)
        return CollectionList([_collection_out(c) for c in readable_collections(found)])

    @post(status_code=HTTP_201_CREATED, opt=ADMIN)
    async def create_collection(self, data: CollectionIn, services: Services) -> CollectionOut:
        """A new collection (admins; an existing name is returned as it is)."""
        name = data.name.strip()
        if not name:
            raise UnprocessableInput("a collection name cannot be blank")
        await asyncio.to_thread(services.store.ensure_collection, name)
        found = await asyncio.to_thread(services.store.collections)
        return next(_collection_out(c) for c in found if c.name == name)


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
