"""What the MCP tools do, on the app's services: no SDK types here (``server`` registers
these and turns an ``AppError`` into the tool error the client reads).

Every tool runs for a ``Caller`` whose access is the request's (``app.auth.scope``): the
guard's permission filter, the one ``/v1`` and ``/api`` use. Search goes through the
``ScopedRetriever``, answers through ``ChatService`` (the path of ``/api/chat``), listings
through ``readable_collections``/``readable_documents``; an id or name the caller may not
read is answered exactly as one that does not exist, so nothing is learnt of the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from app.auth.access import answer_audit, readable_collections
from app.auth.principal import Principal
from app.chat.answering import citation_of
from app.chat.service import DoneEvent, clean_question
from app.errors import AppError, NotFound
from app.mcp_door.limits import MAX_PAGE_CHARS
from app.mcp_door.results import (
    Answer,
    CollectionOut,
    Collections,
    DocumentOut,
    Documents,
    PageText,
    Passage,
    SearchResults,
)
from app.state import Services
from retrieval.records import CollectionRecord


@dataclass(frozen=True)
class Caller:
    """Who calls (the key's principal, access already set for this task) and the
    address the links in results start with (scheme and host of the request)."""

    principal: Principal
    base_url: str


class AnswerNotFinished(AppError):
    status = 503
    title = "Unavailable"


class McpTools:
    def __init__(self, services: Services):
        self.services = services

    async def search(
        self, caller: Caller, query: str, collections: Sequence[int | str] | None, k: int
    ) -> SearchResults:
        retrieval = self.services.require_retrieval()
        query = clean_question(query)
        ids = await asyncio.to_thread(self._collection_ids, collections)
        result = await asyncio.to_thread(retrieval.retriever.search, query, k, collection_ids=ids)
        passages = [
            Passage.cited(citation_of(hit), caller.base_url, text=hit.reading, score=hit.score)
            for hit in result.hits
        ]
        return SearchResults(query, passages)

    async def ask(
        self, caller: Caller, question: str, collections: Sequence[int | str] | None
    ) -> Answer:
        """Asked as ``/api/chat`` asks: a new conversation of the caller's user (limited to
        ``collections`` when given), answered, checked and stored by ``ChatService``, the
        passages shown recorded in the answer audit for the caller's key."""
        chat = self.services.require_chat()
        ids = await asyncio.to_thread(self._collection_ids, collections)
        conversation, asked = await asyncio.to_thread(
            chat.ask, question, None, caller.principal.user.id
        )
        if ids is not None:
            await asyncio.to_thread(self.services.conversations.set_scope, conversation.id, ids)
        done: DoneEvent | None = None
        async for event in chat.answer(asked, on_stored=answer_audit(self.services.auth)):
            if isinstance(event, DoneEvent):
                done = event
        if done is None:  # another request was already answering this very question
            raise AnswerNotFinished("the answer is not finished; ask again")
        return Answer.of(done.message, caller.base_url)

    async def list_collections(self) -> Collections:
        records = await asyncio.to_thread(self.services.store.collections)
        return Collections([CollectionOut.of(c) for c in readable_collections(records)])

    async def list_documents(
        self, caller: Caller, collection: int | str, limit: int, offset: int
    ) -> Documents:
        found = await asyncio.to_thread(self._collection, collection)
        records = await asyncio.to_thread(self.services.store.list_documents, found.id)
        shown = [DocumentOut.of(d, caller.base_url) for d in records[offset : offset + limit]]
        return Documents(CollectionOut.of(found), shown, len(records), offset)

    async def read_page(self, caller: Caller, document_id: int, page: int) -> PageText:
        """A page's text, if the caller may read its collection (a document it may not is
        "no such document", as on ``/api/documents/{id}``)."""
        store, members = self.services.store, self.services.auth.members
        document = await asyncio.to_thread(store.get_document, document_id)
        if document is None or not members.can_read(caller.principal, document.collection_id):
            raise NotFound("no such document")
        text = await asyncio.to_thread(store.page_text, document_id, page)
        if text is None:
            raise NotFound(f"the document has no page {page} (it has {document.page_count})")
        return PageText(
            document_id=document.id,
            title=document.display_title,
            page=page,
            page_count=document.page_count,
            text=text[:MAX_PAGE_CHARS],
            truncated=len(text) > MAX_PAGE_CHARS,
            link=f"{caller.base_url}/documents/{document.id}/pages/{page}",
        )

    # --- collections named by the caller -----------------------------------------------------
    def _collection_ids(self, refs: Sequence[int | str] | None) -> frozenset[int] | None:
        """The collections named (None: every one the caller may read)."""
        if refs is None:
            return None
        readable = readable_collections(self.services.store.collections())
        return frozenset(_find(readable, ref).id for ref in refs)

    def _collection(self, ref: int | str) -> CollectionRecord:
        return _find(readable_collections(self.services.store.collections()), ref)


def _find(readable: list[CollectionRecord], ref: int | str) -> CollectionRecord:
    """A readable collection by id, or by name (a name of digits that names none is read
    as an id: clients often send ids as strings); 404 alike for unknown and unreadable."""
    for record in readable:
        if record.name == ref or record.id == ref:
            return record
    if isinstance(ref, str) and ref.isdecimal() and len(ref) < 20:
        return _find(readable, int(ref))
    raise NotFound(f"no collection {ref!r}")
