"""Server-rendered pages and the htmx partials they are made of."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import Provide
from litestar.enums import RequestEncodingType
from litestar.params import Body, Parameter
from litestar.response import Redirect, ServerSentEvent, Template
from litestar.response.sse import ServerSentEventMessage
from msgspec import Struct

from app.auth.access import (
    answer_audit,
    current_user_id,
    require_conversation,
    require_message,
)
from app.chat.citation_nav import citation_nav
from app.chat.prefetch import asker_key
from app.chat.records import Message
from app.chat.rendering import highlight_passage
from app.chat.service import ChatService, CheckingEvent, DoneEvent, ReadingEvent, TokenEvent
from app.documents.intake import IncomingFile, read_files, submit_all
from app.errors import AppError, NotFound
from app.schemas import MAX_ROW_ID, RowId
from app.state import Services
from app.web.busy import require_quiet
from app.web.deps import provide_chat, provide_services
from app.web.document_views import document_row_template, pdf_page_image
from app.web.stream_errors import stream_error
from app.web.ui_context import (
    choose_model,
    choose_scope,
    cited_documents,
    conversation_list_context,
    library_context,
    shell_context,
    status_context,
)
from app.web.upload_ui import UploadFailure, upload_failure_reason, upload_target
from retrieval.display import shown
from retrieval.store import DocumentGone


class AskForm(Struct):
    message: str = ""
    conversation_id: str = ""
    model: str | None = None  # the composer's choice ("": the default); absent: unchanged
    scope: str | None = None  # the collections searched ("": all readable); absent: unchanged


OptionalRowId = Annotated[int | None, Parameter(ge=1, le=MAX_ROW_ID)]
_ROW_ID = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit() accepts '²'


def form_row_id(raw: str) -> int | None:
    """An optional id from a form field: empty is None, anything else must name a row."""
    if not raw:
        return None
    if not _ROW_ID.fullmatch(raw) or not 1 <= int(raw) <= MAX_ROW_ID:
        raise NotFound("no such conversation")
    return int(raw)


class Pages(Controller):
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @get("/")
    async def home(self, services: Services) -> Template:
        context = await asyncio.to_thread(shell_context, services, None)
        return Template("chat.html", context=context)

    @get("/c/{conversation_id:int}")
    async def conversation(self, conversation_id: RowId, services: Services) -> Template:
        context = await asyncio.to_thread(shell_context, services, conversation_id)
        if context["conversation"] is None:
            raise NotFound("no such conversation")
        return Template("chat.html", context=context)

    @get("/documents/{document_id:int}")
    async def document(self, document_id: RowId) -> Redirect:
        return Redirect(f"/documents/{document_id}/pages/1")

    @get("/documents/{document_id:int}/pages/{page:int}/image", media_type="image/png")
    async def page_image(
        self, document_id: RowId, page: RowId, services: Services
    ) -> Response[bytes]:
        """The PDF page as it looks, beside its text in the viewer."""
        return await pdf_page_image(services, document_id, page)

    @get("/documents/{document_id:int}/pages/{page:int}")
    async def document_page(
        self,
        document_id: RowId,
        page: RowId,
        services: Services,
        chunk: OptionalRowId = None,
        answer: OptionalRowId = None,
    ) -> Template:
        """The cited page, with the cited passage highlighted and scrolled into view; with
        ``answer``, Previous/Next through that answer's other citations."""
        context = await page_view(services, document_id, page, chunk, answer)
        return Template("document.html", context=context)


async def page_view(
    services: Services, document_id: int, page: int, chunk: int | None, answer: int | None
) -> dict[str, Any]:
    """A document's page with the passage ``chunk`` highlighted (when it is on that page),
    and with ``answer`` where it sits among that answer's citations: the full-page viewer
    and the inspector's passage view show the same."""
    document = await asyncio.to_thread(services.store.get_document, document_id)
    found_page = await asyncio.to_thread(services.store.labelled_page, document_id, page)
    if document is None or found_page is None:
        raise NotFound("no such document page")
    text, label = found_page
    found = await asyncio.to_thread(services.store.chunk, chunk) if chunk else None
    passage = found if found and (found.document_id, found.page) == (document_id, page) else None
    span = (passage.start, passage.end) if passage else (None, None)
    changed = None  # what a citation of the answer quoted, when its passage is gone
    if chunk is not None and found is None and answer is not None:
        quoted = await asyncio.to_thread(_quoted, services, answer, chunk, document_id)
        at = text.find(quoted) if quoted else -1
        if quoted and at >= 0:  # re-chunked, same words: the citation still points at them
            span = (at, at + len(quoted))
        else:
            changed = quoted
    body = highlight_passage(text, *span)
    nav = None
    if answer is not None:
        nav = await asyncio.to_thread(
            citation_nav, services, answer, document_id, page, chunk if passage else None
        )
    return {
        "document": document,
        "page": page,
        "label": label,
        "body": body,
        "passage": passage or span[0] is not None,
        "nav": nav,
        "changed": changed,
        "boxes": passage.boxes if passage else (),
    }


def _quoted(services: Services, answer_id: int, chunk_id: int, document_id: int) -> str | None:
    """The passage text (its first words) an answer the asker may see recorded when it
    cited ``chunk_id`` of ``document_id``."""
    try:
        require_message(services.auth, answer_id)
    except NotFound:
        return None
    answer = services.conversations.message(answer_id)
    if answer is None:
        return None
    cited = [c for c in answer.citations if c.chunk_id == chunk_id and c.document_id == document_id]
    return cited[0].snippet if cited else None


def _choices(services: Services, data: AskForm) -> tuple[str | None, frozenset[int] | None]:
    """The composer's model ("": the default) and scope ("": all readable) as chat takes
    them; None for either the form leaves out (unchanged)."""
    model = None if data.model is None else choose_model(services, data.model)
    scope = None if data.scope is None else choose_scope(services, data.scope)
    return model, scope


class Partials(Controller):
    """htmx endpoints: each returns the same partial its page includes.

    Only handlers that take ``chat`` wait for the generator; the rest work during start-up.
    """

    path = "/ui"
    dependencies = {
        "services": Provide(provide_services, sync_to_thread=False),
        "chat": Provide(provide_chat, sync_to_thread=False),
    }

    @post("/ask", status_code=200)
    async def ask(
        self,
        data: Annotated[AskForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
        chat: ChatService,
        services: Services,
    ) -> Template:
        conversation_id = form_row_id(data.conversation_id)
        await asyncio.to_thread(require_conversation, services.auth, conversation_id)
        await asyncio.to_thread(require_quiet, services, chat, conversation_id)
        # Checked before the question is recorded: 400 unless chat offers the model.
        model, scope = await asyncio.to_thread(_choices, services, data)
        conversation, question = await asyncio.to_thread(
            chat.ask, data.message, conversation_id, current_user_id()
        )
        if data.model is not None and conversation.model != model:
            await asyncio.to_thread(services.conversations.set_model, conversation.id, model)
        if data.scope is not None and conversation.scope != scope:
            await asyncio.to_thread(services.conversations.set_scope, conversation.id, scope)
        return Template(
            "_turn.html",
            context={
                "question": question,
                "conversation": conversation,
                "new_conversation": conversation_id is None,
                **await asyncio.to_thread(conversation_list_context, services),
            },
            headers={"HX-Push-Url": f"/c/{conversation.id}"} if conversation_id is None else {},
        )

    @post("/prefetch", status_code=204)
    async def prefetch(
        self,
        data: Annotated[AskForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
        chat: ChatService,
        services: Services,
    ) -> None:
        """The question box while it is typed in (htmx, after a pause): prefill its
        answer's prompt at the lowest priority (app/chat/prefetch.py). Nothing is stored."""
        conversation_id = form_row_id(data.conversation_id)
        await asyncio.to_thread(require_conversation, services.auth, conversation_id)
        model, scope = await asyncio.to_thread(_choices, services, data)
        await chat.prefetcher.draft(
            asker_key(), data.message, conversation_id, scope=scope, model=model
        )

    @get("/answers/{question_id:int}/stream")
    async def answer_stream(
        self,
        question_id: RowId,
        chat: ChatService,
        services: Services,
        request: Request[Any, Any, Any],
    ) -> ServerSentEvent:
        question = await asyncio.to_thread(services.conversations.message, question_id)
        if question is None or question.role != "user":
            raise NotFound("no such question")
        return ServerSentEvent(html_events(chat, question, request))

    @post("/questions/{question_id:int}/stop", status_code=204)
    async def stop_answer(self, question_id: RowId, chat: ChatService, services: Services) -> None:
        """The Stop button: the stream then ends with the partial answer, marked stopped.
        With several fronts, the one writing the answer may be another: all are told."""
        if chat.stop(question_id):
            return
        relay = services.stop_relay
        if relay is None:
            raise NotFound("no answer to that question is being written")
        if not await asyncio.to_thread(relay.stop_everywhere, question_id):
            raise NotFound("no answer to that question is being written")

    @get("/documents/{document_id:int}/pages/{page:int}/passage")
    async def passage(
        self,
        document_id: RowId,
        page: RowId,
        services: Services,
        chunk: OptionalRowId = None,
        answer: OptionalRowId = None,
    ) -> Template:
        """A cited passage in the inspector, inside its page's text (the window's own
        viewer; "Open in full" goes to the page viewer)."""
        context = await page_view(services, document_id, page, chunk, answer)
        full = f"/documents/{document_id}/pages/{page}"
        query = "&".join(f"{k}={v}" for k, v in (("chunk", chunk), ("answer", answer)) if v)
        return Template(
            "_passage.html",
            context={**context, "full": f"{full}?{query}#passage" if query else full},
        )

    @get("/messages/{message_id:int}/sources")
    async def sources(self, message_id: RowId, services: Services) -> Template:
        message = await asyncio.to_thread(services.conversations.message, message_id)
        if message is None:
            raise NotFound("no such message")
        documents = await asyncio.to_thread(cited_documents, services, message)
        return Template("_sources.html", context={"message": message, "documents": documents})

    @post("/documents", status_code=200)
    async def upload(self, request: Request[Any, Any, Any], services: Services) -> Template:
        """The upload dialog: files into the collection chosen in it. Whatever goes wrong,
        the dialog gets a row per file saying so in plain words (with the error's status)."""
        files: list[IncomingFile] = []
        try:
            files = await read_files(request)
            target = upload_target((await request.form()).get("collection"))
            results = await submit_all(services, files, target)
        except AppError as exc:
            names = [shown(f.filename) for f in files] or ["Upload"]
            failure = UploadFailure(names, upload_failure_reason(exc))
            return Template(
                "_upload_rows.html",
                context={"results": [], "failure": failure},
                status_code=exc.status,
                headers=exc.headers,
            )
        return Template("_upload_rows.html", context={"results": results})

    @get("/documents/{document_id:int}/row")
    async def document_row(self, document_id: RowId, services: Services) -> Template:
        return await document_row_template(services, document_id, "_document_row.html")

    @delete("/documents/{document_id:int}", status_code=200)
    async def delete_document(self, document_id: RowId, services: Services) -> Response[str]:
        try:
            await asyncio.to_thread(services.library.delete, document_id)
        except DocumentGone:
            raise NotFound("no such document") from None
        return Response("", headers={"HX-Trigger": "documents-changed"})

    @get("/library")
    async def library(self, services: Services) -> Template:
        """The sidebar's collections with their document counts."""
        context = await asyncio.to_thread(library_context, services)
        return Template("_library.html", context=context)

    @get("/status")
    async def status(self, services: Services) -> Template:
        return Template("_status.html", context={"status": status_context(services)})


# The streamed answer is redrawn whole at each token while short, then at most this often.
LONG_ANSWER_CHARS = 2000
RERENDER_S = 0.1


async def html_events(
    chat: ChatService, question: Message, request: Request[Any, Any, Any]
) -> AsyncIterator[ServerSentEventMessage]:
    """What the model reads, the answer so far as rendered Markdown at each token (a list
    is a list, bold is bold, while it is written), which passages it is checking the
    answer against, then the finished message replacing the stream (with its citations
    linked). A failure after the stream began replaces it with the text written so far
    and the error under it (app/web/stream_errors.py)."""
    templates = request.app.template_engine
    assert templates is not None
    written, drawn_at = "", 0.0
    try:
        audit = answer_audit(request.app.state.services.auth)
        async for event in chat.answer(question, on_stored=audit):
            if isinstance(event, ReadingEvent):
                html = templates.get_template("_reading.html").render(
                    sources=event.sources,
                    searched=event.query if event.query != question.content else None,
                )
                yield ServerSentEventMessage(data=html, event="sources")
            elif isinstance(event, CheckingEvent):
                html = templates.get_template("_checking.html").render(sources=event.sources)
                yield ServerSentEventMessage(data=html, event="checking")
            elif isinstance(event, TokenEvent):
                written += event.text
                # Rendering all of it costs ~1 ms a KB, on the event loop: a long answer is
                # redrawn at most every RERENDER_S (the finished one replaces it anyway).
                now = time.monotonic()
                if len(written) > LONG_ANSWER_CHARS and now - drawn_at < RERENDER_S:
                    continue
                drawn_at = now
                html = templates.get_template("_token.html").render(written=written)
                yield ServerSentEventMessage(data=html, event="token")
            elif isinstance(event, DoneEvent):
                services = request.app.state.services
                documents = await asyncio.to_thread(cited_documents, services, event.message)
                html = templates.get_template("_answer_done.html").render(
                    message=event.message, documents=documents, repeated=event.repeated
                )
                yield ServerSentEventMessage(data=html, event="done")
    except Exception as exc:  # the response has started: say so in the page, never hang up
        error = stream_error(exc, getattr(request.app.state, "services", None))
        html = templates.get_template("_error.html").render(
            status=error.status, title=error.title, detail=error.detail
        )
        if written:  # what was read so far stays on the page
            kept = templates.get_template("_token.html").render(written=written)
            html = f'<div class="msg-body markdown">{kept}</div>{html}'
        yield ServerSentEventMessage(data=html, event="done")
