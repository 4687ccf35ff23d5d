"""The native JSON API under ``/api``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Controller, Request, Response, delete, get, head, post
from litestar.di import Provide
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.access import (
    answer_audit,
    current_user_id,
    readable_documents,
    require_conversation,
)
from app.chat.prefetch import asker_key
from app.chat.records import Message
from app.chat.service import (
    ChatService,
    CheckingEvent,
    DoneEvent,
    ReadingEvent,
    TokenEvent,
    clean_question,
)
from app.documents.intake import (
    Accepted,
    named_collections,
    read_files,
    require_all_supported,
    submit_all,
    upload_collection,
)
from app.errors import NotFound
from app.schemas import (
    ChatDone,
    ChatIn,
    ChatSources,
    CitationOut,
    DocumentList,
    DocumentOut,
    PrefetchIn,
    PrefetchOut,
    RowId,
    SearchIn,
    SearchOut,
)
from app.state import Retrieval, Services
from app.web.busy import require_quiet
from app.web.deps import provide_chat, provide_retrieval, provide_services
from app.web.document_views import original_file, original_file_head
from app.web.stream_errors import retry_after_s, stream_error
from retrieval.store import DocumentGone


class DocumentsApi(Controller):
    path = "/api/documents"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @post(status_code=HTTP_201_CREATED)
    async def upload(
        self, request: Request[Any, Any, Any], services: Services, collection: str | None = None
    ) -> DocumentList:
        """Upload one or more files (multipart parts named ``file``) to the default collection
        or the one named by ``?collection=`` or a ``collection`` form part (its name or id;
        write access needed); ingestion is queued."""
        files = await read_files(request)
        refs = [*([collection] if collection else []), *await named_collections(request)]
        target = await asyncio.to_thread(upload_collection, services, refs)
        require_all_supported(files)
        results = await submit_all(services, files, target)
        return DocumentList(
            [
                DocumentOut.of(r.document, duplicate=r.duplicate)
                for r in results
                if isinstance(r, Accepted)
            ]
        )

    @get()
    async def list_documents(self, services: Services) -> DocumentList:
        documents = await asyncio.to_thread(services.store.list_documents)
        return DocumentList([DocumentOut.of(d) for d in readable_documents(documents)])

    @get("/{document_id:int}")
    async def get_document(self, document_id: RowId, services: Services) -> DocumentOut:
        document = await asyncio.to_thread(services.store.get_document, document_id)
        if document is None:
            raise NotFound("no such document")
        return DocumentOut.of(document)

    @get("/{document_id:int}/download", media_type="application/octet-stream")
    async def download_document(self, document_id: RowId, services: Services) -> Response[bytes]:
        """The uploaded file as it was sent, as an attachment."""
        return await original_file(services, document_id)

    @head("/{document_id:int}/download")
    async def download_document_head(
        self, document_id: RowId, services: Services
    ) -> Response[None]:
        return await original_file_head(services, document_id)

    @delete("/{document_id:int}", status_code=HTTP_204_NO_CONTENT)
    async def delete_document(self, document_id: RowId, services: Services) -> None:
        try:
            await asyncio.to_thread(services.library.delete, document_id)
        except DocumentGone:
            raise NotFound("no such document") from None


class SearchApi(Controller):
    path = "/api/search"
    dependencies = {"retrieval": Provide(provide_retrieval, sync_to_thread=False)}

    @post(status_code=200)
    async def search(self, data: SearchIn, retrieval: Retrieval) -> SearchOut:
        query = clean_question(data.query)
        result = await asyncio.to_thread(retrieval.retriever.search, query, data.k)
        return SearchOut.of(result.hits)


class PrefetchApi(Controller):
    path = "/api/prefetch"
    dependencies = {
        "chat": Provide(provide_chat, sync_to_thread=False),
        "services": Provide(provide_services, sync_to_thread=False),
    }

    @post(status_code=202)
    async def prefetch(
        self, data: PrefetchIn, chat: ChatService, services: Services
    ) -> PrefetchOut:
        """The question being typed: retrieve for it and prefill its prompt up to the
        question at the lowest priority, so ``POST /api/chat`` with the finished question
        starts sooner (app/chat/prefetch.py). ``status``: ``started``, ``skipped`` (busy,
        nothing found), ``short`` (fewer than three words) or ``off``. The draft is not
        stored; the answer's prompt is the same with or without it."""
        await asyncio.to_thread(require_conversation, services.auth, data.conversation_id)
        status = await chat.prefetcher.draft(asker_key(), data.draft, data.conversation_id)
        return PrefetchOut(status)


class ChatApi(Controller):
    path = "/api/chat"
    dependencies = {
        "chat": Provide(provide_chat, sync_to_thread=False),
        "services": Provide(provide_services, sync_to_thread=False),
    }

    @post(status_code=200)
    async def chat(self, data: ChatIn, chat: ChatService, services: Services) -> ServerSentEvent:
        """Server-sent events: ``sources`` lists the passages the model is given, before
        it starts (none when nothing relevant was found), ``token`` events carry text,
        ``done`` the stored answer with its citations, its ``unsupported`` sentences
        (those no cited passage supports, as offsets into the answer) and ``grounded``
        (whether it cites any source), ``error`` a problem found after streaming began."""
        await asyncio.to_thread(require_conversation, services.auth, data.conversation_id)
        await asyncio.to_thread(require_quiet, services, chat, data.conversation_id)
        _, question = await asyncio.to_thread(
            chat.ask, data.message, data.conversation_id, current_user_id()
        )
        return ServerSentEvent(json_events(chat, question, services))


async def json_events(
    chat: ChatService, question: Message, services: Services | None = None
) -> AsyncIterator[ServerSentEventMessage]:
    """The answer's events; one that fails after they began ends with an ``error`` event
    (``status``, ``detail``, and ``retry_after`` in seconds when trying again may work:
    app/web/stream_errors.py). The ``token`` events already sent are the answer so far."""
    try:
        audit = answer_audit(services.auth) if services is not None else None
        async for event in chat.answer(question, on_stored=audit):
            if isinstance(event, ReadingEvent):
                sources = ChatSources([CitationOut.of(c) for c in event.sources], event.query)
                yield ServerSentEventMessage(data=_json(sources), event="sources")
            elif isinstance(event, TokenEvent):
                yield ServerSentEventMessage(data=_json({"text": event.text}), event="token")
            elif isinstance(event, CheckingEvent):
                checking = ChatSources([CitationOut.of(c) for c in event.sources])
                yield ServerSentEventMessage(data=_json(checking), event="checking")
            elif isinstance(event, DoneEvent):
                yield ServerSentEventMessage(data=_json(ChatDone.of(event.message)), event="done")
    except Exception as exc:  # the response has started: report in-band, never just hang up
        error = stream_error(exc, services)
        body: dict[str, object] = {"status": error.status, "detail": error.detail}
        if (retry := retry_after_s(error)) is not None:
            body["retry_after"] = retry
        yield ServerSentEventMessage(data=_json(body), event="error")


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()
