"""👍/👎 on answers: the htmx endpoint behind an answer's feedback buttons and its comment
popover, the JSON API (``/api/answers/{id}/feedback``), and the admins' list of feedback
(``/admin/feedback``) with its export as golden-set lines for ``ragdesk eval --answers``."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.di import Provide
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Template
from msgspec import Struct

from app.auth.access import current_user_id
from app.auth.guards import NotAuthenticated
from app.chat.feedback import (
    MAX_COMMENT_CHARS,
    RATINGS,
    AnswerFeedback,
    Feedback,
    Rating,
    golden_jsonl,
)
from app.chat.records import Message
from app.errors import NotFound, UnprocessableInput
from app.schemas import RowId
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.deps import provide_services


class FeedbackForm(Struct):
    rating: str = ""
    comment: str | None = None  # absent: the comment given before stays


class FeedbackIn(msgspec.Struct, forbid_unknown_fields=True):
    """``rating`` "up" or "down"; ``comment`` optional (omitted: any earlier one stays)."""

    rating: Literal["up", "down"]
    comment: Annotated[str, msgspec.Meta(max_length=MAX_COMMENT_CHARS)] | None = None


class FeedbackOut(msgspec.Struct):
    answer_id: int
    rating: str
    comment: str
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, feedback: Feedback) -> FeedbackOut:
        return cls(
            feedback.message_id,
            feedback.rating,
            feedback.comment,
            feedback.created_at,
            feedback.updated_at,
        )


def _answer(services: Services, message_id: int) -> Message:
    """An answer the caller may see (the guard checked its conversation from the path)."""
    answer = services.conversations.message(message_id)
    if answer is None or answer.role != "assistant":
        raise NotFound("no such answer")
    return answer


def _give(services: Services, message_id: int, rating: str, comment: str | None) -> Feedback:
    user_id = current_user_id()
    if user_id is None:
        raise NotAuthenticated()
    if rating not in RATINGS:
        raise UnprocessableInput("rating must be 'up' or 'down'")
    if comment is not None and len(comment) > MAX_COMMENT_CHARS:
        raise UnprocessableInput(f"the comment is longer than {MAX_COMMENT_CHARS} characters")
    _answer(services, message_id)
    chosen: Rating = "up" if rating == "up" else "down"
    return AnswerFeedback(services.db).give(message_id, user_id, chosen, comment)


def _withdraw(services: Services, message_id: int) -> bool:
    user_id = current_user_id()
    if user_id is None:
        raise NotAuthenticated()
    _answer(services, message_id)
    return AnswerFeedback(services.db).withdraw(message_id, user_id)


def _mine(services: Services, message_id: int) -> Feedback | None:
    _answer(services, message_id)
    user_id = current_user_id()
    return None if user_id is None else AnswerFeedback(services.db).of(message_id, user_id)


class FeedbackUi(Controller):
    path = "/ui/messages"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @post("/{message_id:int}/feedback", status_code=200)
    async def give(
        self,
        message_id: RowId,
        data: Annotated[FeedbackForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
        services: Services,
    ) -> Template:
        """A 👍/👎 click (no comment: the comment popover opens), the popover's Send, or a
        click on the thumb already pressed (``rating`` "none"): the rating is taken back."""
        if data.rating == "none":
            await asyncio.to_thread(_withdraw, services, message_id)
            return Template("_feedback.html", context={"message": {"id": message_id}})
        feedback = await asyncio.to_thread(_give, services, message_id, data.rating, data.comment)
        return Template(
            "_feedback.html",
            context={
                "message": {"id": message_id},
                "feedback": {message_id: feedback},
                "ask_comment": data.comment is None,
                "thanked": data.comment is not None,
            },
        )


class FeedbackApi(Controller):
    """Feedback through the native API, for the caller's own answers (keys that may see
    stored conversations, as for ``/api/conversations``)."""

    path = "/api/answers"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @post("/{answer_id:int}/feedback", status_code=200)
    async def give(self, answer_id: RowId, data: FeedbackIn, services: Services) -> FeedbackOut:
        """Give or change the caller's 👍/👎 ("up"/"down") on an answer, with a comment."""
        feedback = await asyncio.to_thread(_give, services, answer_id, data.rating, data.comment)
        return FeedbackOut.of(feedback)

    @delete("/{answer_id:int}/feedback", status_code=204)
    async def withdraw(self, answer_id: RowId, services: Services) -> None:
        """Take back the caller's feedback on an answer (404 when there was none)."""
        if not await asyncio.to_thread(_withdraw, services, answer_id):
            raise NotFound("no feedback of yours on this answer")

    @get("/{answer_id:int}/feedback")
    async def mine(self, answer_id: RowId, services: Services) -> FeedbackOut:
        """The caller's feedback on an answer (404 when none was given)."""
        feedback = await asyncio.to_thread(_mine, services, answer_id)
        if feedback is None:
            raise NotFound("no feedback on this answer yet")
        return FeedbackOut.of(feedback)


def _rating(raw: str) -> Rating | None:
    if raw not in ("", *RATINGS):
        raise UnprocessableInput("rating: 'up', 'down' or empty")
    return None if raw == "" else ("up" if raw == "up" else "down")


class FeedbackPages(Controller):
    path = "/admin/feedback"
    opt = ADMIN

    @get("/")
    async def listing(self, request: Request[Any, Any, Any], rating: str = "") -> Template:
        """Every feedback, newest first, with its question, answer, sources and comment."""
        services: Services = request.app.state.services
        chosen = _rating(rating)
        entries = await asyncio.to_thread(AnswerFeedback(services.db).listing, chosen)
        return Template("feedback.html", context={"entries": entries, "rating": chosen or ""})

    @get("/export")
    async def export(self, request: Request[Any, Any, Any], rating: str = "") -> Response[str]:
        """The feedback as golden-set lines (see :func:`app.chat.feedback.golden_line`)."""
        services: Services = request.app.state.services
        chosen = _rating(rating)
        entries = await asyncio.to_thread(AnswerFeedback(services.db).listing, chosen, 100_000)
        stamp = time.strftime("%Y%m%d")
        name = f"feedback-{chosen or 'all'}-{stamp}.jsonl"
        return Response(
            golden_jsonl(entries),
            media_type="application/x-ndjson; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
