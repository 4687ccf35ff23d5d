"""htmx endpoints that manage conversations: list and filter, rename, pin, delete, export,
regenerate the last answer, edit and resend a question."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Annotated

from litestar import Controller, Response, delete, get, post
from litestar.di import Provide
from litestar.enums import RequestEncodingType
from litestar.params import Body, Parameter
from litestar.response import Template
from msgspec import Struct

from app.chat.records import Conversation, Message
from app.chat.service import ChatService, clean_question
from app.errors import AppError, NotFound, UnprocessableInput
from app.schemas import RowId
from app.state import Services
from app.web.deps import provide_chat, provide_services
from app.web.pages import form_row_id
from app.web.ui_context import (
    choose_scope,
    cited_documents,
    conversation_list_context,
    feedback_given,
    scope_context,
)

MAX_TITLE_CHARS = 80
MAX_QUERY_CHARS = 200
Form = Body(media_type=RequestEncodingType.URL_ENCODED)


class Conflict(AppError):
    status = 409
    title = "Conflict"


class RenameForm(Struct):
    title: str = ""


class PinForm(Struct):
    pinned: str = ""


class ScopeForm(Struct):
    scope: str = ""  # comma-separated collection ids; "": all the caller may read


class EditForm(Struct):
    message: str = ""


def _conversation(services: Services, conversation_id: int) -> Conversation:
    conversation = services.conversations.get(conversation_id)
    if conversation is None:
        raise NotFound("no such conversation")
    return conversation


def _require_idle(chat: ChatService, messages: list[Message]) -> None:
    """Changing history while an answer is being written would race its storage."""
    if messages and messages[-1].role == "user" and chat.is_answering(messages[-1].id):
        raise Conflict("an answer is being written: stop it first")


class ConversationsUi(Controller):
    path = "/ui"
    dependencies = {
        "services": Provide(provide_services, sync_to_thread=False),
        "chat": Provide(provide_chat, sync_to_thread=False),
    }

    @get("/conversations")
    async def list_conversations(
        self,
        services: Services,
        q: Annotated[str, Parameter(max_length=MAX_QUERY_CHARS)] = "",
        conversation_id: Annotated[str, Parameter(max_length=20)] = "",
    ) -> Template:
        """The sidebar's list, filtered by title; ``conversation_id`` is the one shown."""
        selected = form_row_id(conversation_id)

        def context() -> dict[str, object]:
            found = services.conversations.get(selected) if selected else None
            return {**conversation_list_context(services, q.strip()), "conversation": found}

        return Template("_conversation_list.html", context=await asyncio.to_thread(context))

    @post("/conversations/{conversation_id:int}/rename", status_code=200)
    async def rename(
        self,
        conversation_id: RowId,
        data: Annotated[RenameForm, Form],
        services: Services,
    ) -> Template:
        title = " ".join(data.title.split())
        if not title:
            raise UnprocessableInput("the title is empty")
        if len(title) > MAX_TITLE_CHARS:
            raise UnprocessableInput(f"the title is longer than {MAX_TITLE_CHARS} characters")
        await asyncio.to_thread(_conversation, services, conversation_id)
        await asyncio.to_thread(services.conversations.rename, conversation_id, title)
        return await self._header(services, conversation_id)

    @post("/conversations/{conversation_id:int}/scope", status_code=200)
    async def scope(
        self, conversation_id: RowId, data: Annotated[ScopeForm, Form], services: Services
    ) -> Template:
        """The collections the conversation's next questions search (the composer's control)."""

        def change() -> dict[str, object]:
            conversation = _conversation(services, conversation_id)
            services.conversations.set_scope(conversation.id, choose_scope(services, data.scope))
            return scope_context(services, services.conversations.get(conversation.id))

        return Template("_scope.html", context=await asyncio.to_thread(change))

    @post("/conversations/{conversation_id:int}/pin", status_code=200)
    async def pin(
        self, conversation_id: RowId, data: Annotated[PinForm, Form], services: Services
    ) -> Template:
        if data.pinned not in ("0", "1"):
            raise UnprocessableInput("pinned must be 0 or 1")
        await asyncio.to_thread(_conversation, services, conversation_id)
        await asyncio.to_thread(
            services.conversations.set_pinned, conversation_id, data.pinned == "1"
        )
        return await self._header(services, conversation_id)

    async def _header(self, services: Services, conversation_id: int) -> Template:
        """The conversation's header, with the sidebar list refreshed out of band."""

        def context() -> dict[str, object]:
            return {
                **conversation_list_context(services),
                "conversation": _conversation(services, conversation_id),
                "pinned": services.conversations.is_pinned(conversation_id),
                "refresh_list": True,
            }

        return Template("_conversation_header.html", context=await asyncio.to_thread(context))

    @delete("/conversations/{conversation_id:int}", status_code=200)
    async def delete_conversation(
        self, conversation_id: RowId, services: Services, chat: ChatService
    ) -> Response[str]:
        await asyncio.to_thread(_conversation, services, conversation_id)
        messages = await asyncio.to_thread(services.conversations.messages, conversation_id)
        _require_idle(chat, messages)
        if not await asyncio.to_thread(services.conversations.delete, conversation_id):
            raise NotFound("no such conversation")
        return Response("", headers={"HX-Redirect": "/"})

    @get("/conversations/{conversation_id:int}/export")
    async def export(self, conversation_id: RowId, services: Services) -> Response[str]:
        conversation = await asyncio.to_thread(_conversation, services, conversation_id)
        messages = await asyncio.to_thread(services.conversations.messages, conversation_id)
        filename = f"{_slug(conversation.title) or 'conversation'}-{conversation_id}.md"
        return Response(
            export_markdown(conversation, messages),
            media_type="text/markdown",  # Litestar adds "; charset=utf-8"
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )

    @post("/messages/{message_id:int}/regenerate", status_code=200)
    async def regenerate(
        self, message_id: RowId, services: Services, chat: ChatService
    ) -> Template:
        """Write the last answer of a conversation again (its question stays); the answer
        it replaces is kept as an earlier version, one ‹ click away."""
        answer = await asyncio.to_thread(services.conversations.message, message_id)
        if answer is None or answer.role != "assistant":
            raise NotFound("no such answer")
        messages = await asyncio.to_thread(services.conversations.messages, answer.conversation_id)
        if messages[-1].id != answer.id or answer.reply_to is None:
            raise Conflict("only the last answer of a conversation can be written again")
        question = await asyncio.to_thread(services.conversations.message, answer.reply_to)
        if question is None:
            raise Conflict("the question of this answer is gone")
        await asyncio.to_thread(services.conversations.supersede, answer)
        return Template("_answer_stream.html", context={"question": question})

    @post("/questions/{question_id:int}/versions/{version:int}", status_code=200)
    async def choose_version(
        self,
        question_id: RowId,
        version: Annotated[int, Parameter(ge=1, le=10_000)],
        services: Services,
        chat: ChatService,
    ) -> Template:
        """Show the ``version``-th answer to a question (‹ 1/2 ›): it becomes the current
        one, which later turns' prompts repeat as the conversation so far."""
        if chat.is_answering(question_id):
            raise Conflict("an answer is being written: stop it first")
        chosen = await asyncio.to_thread(
            services.conversations.choose_version, question_id, version
        )
        if chosen is None:
            raise NotFound("no such version of this answer")

        def context() -> dict[str, object]:
            return {
                "message": chosen,
                "documents": cited_documents(services, chosen),
                "feedback": feedback_given(services, [chosen]),
            }

        return Template("_answer_done.html", context=await asyncio.to_thread(context))

    @post("/messages/{message_id:int}/edit", status_code=200)
    async def edit(
        self,
        message_id: RowId,
        data: Annotated[EditForm, Form],
        services: Services,
        chat: ChatService,
    ) -> Template:
        """Replace a question and everything after it by the edited question, then answer."""
        text = clean_question(data.message)
        question = await asyncio.to_thread(services.conversations.message, message_id)
        if question is None or question.role != "user":
            raise NotFound("no such question")
        conversations = services.conversations
        messages = await asyncio.to_thread(conversations.messages, question.conversation_id)
        _require_idle(chat, messages)
        kept = [m for m in messages if m.id < question.id]
        await asyncio.to_thread(conversations.truncate_from, question)
        retitled = not kept and await asyncio.to_thread(
            conversations.retitle, question.conversation_id, question.content, text
        )
        conversation, asked = await asyncio.to_thread(chat.ask, text, question.conversation_id)
        given = await asyncio.to_thread(feedback_given, services, kept)
        listed = await asyncio.to_thread(conversation_list_context, services) if retitled else {}
        return Template(
            "_edited.html",
            context={
                "messages": kept,
                "question": asked,
                "conversation": conversation,
                "feedback": given,
                "retitled": retitled,
                **listed,
            },
        )


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60]


def export_markdown(conversation: Conversation, messages: list[Message]) -> str:
    """The conversation as Markdown: questions as quotes, answers as written, sources listed."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation.created_at))
    lines = [f"# {conversation.title}", "", f"_Exported from Ragdesk; started {when}._", ""]
    for message in messages:
        if message.role == "user":
            lines += ["## Question", "", *(f"> {line}" for line in message.content.split("\n"))]
        else:
            lines += ["## Answer", "", message.content]
            if message.citations:
                lines += ["", "Sources:", ""]
                # "[n]" bullets, not "n." items: Markdown renumbers ordered lists 1, 2, ...
                lines += [f"- [{c.number}] {c.title}, {c.where}" for c in message.citations]
        lines.append("")
    return "\n".join(lines)
