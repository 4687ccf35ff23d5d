"""Grounded answers on ``/v1/chat/completions``: the model ``rag`` (every readable
collection) or ``rag:<collection>``, or ``"ragdesk": {"collections": [...]}`` with any
model, answers from the documents as chat does, with ``[n]`` markers and a ``citations``
array (on the message, or in the last chunk of a stream), next to ``unsupported`` (the
sentences no cited passage supports) and ``grounded`` (whether any source is cited).

Stateless: the last user message is the question, earlier user/assistant messages become
history turns without sources; nothing is stored but the audit of the passages shown and
what each answer cited (``app.openai.followups``). Retrieval reads the conversation as
chat does: a follow-up is searched for with the subject of the questions before it
(``retrieval.followup``), and ``query`` says what was searched for; one that refers back
to an answer sent back as it was given reads the documents that answer cited first.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import msgspec
from litestar import MediaType, Request, Response
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage

from app.auth.access import readable_collections, request_audit
from app.auth.guards import may_load_any_model
from app.chat.answering import MAX_QUESTION_CHARS, NOTHING_FOUND, Grounding
from app.chat.finished import FinishedAnswer, FinishedListener, tell_later
from app.chat.stopping import stopped_text
from app.openai.errors import OpenAIError, error_body
from app.openai.followups import FollowUpMemory
from app.openai.generation import FINISH_REASONS, Started, collect, failed, start, usage_out
from app.openai.schemas import (
    ChatChoice,
    ChatChunk,
    ChatCompletionIn,
    ChatCompletionOut,
    ChunkChoice,
    Delta,
    GroundedChunk,
    GroundedMessageOut,
    PromptTokensDetails,
    UsageOut,
)
from app.schemas import CitationOut, UnsupportedOut
from app.state import Services
from app.usage.events import set_channel
from llm.backend import Backend
from llm.chat_format import ChatMessage, ChatPrompt, ChatTemplateFailed
from llm.params import TextDelta, Usage
from llm.prompt import PromptTooLong, Turn, demonstrated
from llm.repetition import RepetitionGuard
from retrieval.followup import followed, followed_each
from retrieval.types import Hit

log = logging.getLogger(__name__)
T = TypeVar("T")

RAG_MODEL = "rag"
RAG_PREFIX = "rag:"


def is_grounded(data: ChatCompletionIn) -> bool:
    return data.ragdesk is not None or data.model == RAG_MODEL or data.model.startswith(RAG_PREFIX)


def rag_model_names(services: Services) -> list[str]:
    """``rag`` and ``rag:<collection>`` for each collection the request may read."""
    readable = readable_collections(services.store.collections())
    return [RAG_MODEL, *(RAG_PREFIX + c.name for c in readable)]


def _collection_ids(services: Services, data: ChatCompletionIn) -> frozenset[int] | None:
    """The named collections (None: every readable one); a name that is unknown or may not
    be read is a 404 either way, so the answer says nothing about others' collections."""
    named: list[tuple[str, str]] = []  # (name, param)
    if data.model.startswith(RAG_PREFIX):
        named.append((data.model.removeprefix(RAG_PREFIX), "model"))
    if data.ragdesk is not None:
        named += [(name, "ragdesk.collections") for name in data.ragdesk.collections]
    if not named:
        return None
    ids = {c.name: c.id for c in readable_collections(services.store.collections())}
    for name, param in named:
        if name not in ids:
            code = "model_not_found" if param == "model" else "collection_not_found"
            raise OpenAIError(f"no collection named {name!r}", status=404, param=param, code=code)
    return frozenset(ids[name] for name, _ in named)


def _question_and_history(messages: list[ChatMessage]) -> tuple[str, list[Turn]]:
    """The last user message, and the user/assistant pairs before it (system messages are
    left out: the grounded layout has its own instructions)."""
    if messages[-1].role != "user" or not messages[-1].content.strip():
        raise OpenAIError(
            "a grounded answer needs the last message to be a non-empty user question",
            param="messages",
        )
    question = messages[-1].content.strip()
    if len(question) > MAX_QUESTION_CHARS:
        raise OpenAIError(
            f"the question is longer than {MAX_QUESTION_CHARS} characters", param="messages"
        )
    history: list[Turn] = []
    pending: str | None = None
    for message in messages[:-1]:
        if message.role == "user":
            if pending is not None:
                history.append(Turn(pending))
            pending = message.content
        elif message.role == "assistant":
            history.append(Turn(pending or "", message.content))
            pending = None
    if pending is not None:
        history.append(Turn(pending))
    laid_out = followed_each([turn.question for turn in history])
    return question, [
        replace(turn, follows=follows) for turn, follows in zip(history, laid_out, strict=True)
    ]


@dataclass
class _Grounded:
    """The grounding of one stateless /v1 question, built when the backend is known."""

    question: str
    history: list[Turn]
    hits: list[Hit]
    answer_tokens: int
    query: str  # what retrieval searched for
    guidance: list[tuple[str, str]] = field(default_factory=list)  # named collections'
    grounding: Grounding | None = None

    def prompt_for(self, backend: Backend) -> ChatPrompt:
        try:
            self.grounding = Grounding.build(
                backend,
                question=self.question,
                hits=self.hits,
                history=self.history,
                answer_tokens=self.answer_tokens,
                guidance=self.guidance,
                follows=followed([*(turn.question for turn in self.history), self.question]),
            )
        except PromptTooLong as exc:
            raise OpenAIError(str(exc), param="messages", code="context_length_exceeded") from exc
        except ChatTemplateFailed as exc:  # the model's own template refused: a 400 as well
            raise OpenAIError(exc.detail, param="messages") from exc
        prompt = self.grounding.prompt
        return ChatPrompt(prompt.text, prompt.stop, strip_leading_space=True)

    def guard(self) -> RepetitionGuard:
        """Chat's guard on the answer as it comes: the prompt's worked example is never
        said (a document can ask for it, and it would come out cited), a loop is cut."""
        assert self.grounding is not None
        return RepetitionGuard(said=demonstrated(self.grounding.prompt.text))

    def cite(self, text: str, *, repoint: bool = True) -> _Cited:
        """The answer with bare sentences attributed (and miscited ones re-pointed, unless
        not ``repoint``), the sources it cites, and the sentences no cited passage
        supports."""
        assert self.grounding is not None
        answer, citations = self.grounding.cite(text, repoint=repoint)
        unsupported = self.grounding.unsupported(answer)
        return _Cited(
            answer,
            [CitationOut.of(c) for c in citations],
            [UnsupportedOut.of(u) for u in unsupported],
        )


@dataclass(frozen=True)
class _Cited:
    answer: str
    citations: list[CitationOut]
    unsupported: list[UnsupportedOut]  # offsets into ``answer``

    @property
    def grounded(self) -> bool:
        return bool(self.citations)

    def unsupported_in(self, streamed: str) -> list[UnsupportedOut]:
        """The unsupported sentences with offsets into the text as it was streamed (the
        deltas joined): ``answer`` is that text stripped, with ``[n]`` markers added to
        sentences that had none, so each answer position maps back to a streamed one."""
        base = streamed.strip()
        lead = len(streamed) - len(streamed.lstrip())
        at: list[int] = []  # answer position -> position in base
        j = 0
        for char in self.answer:
            at.append(j)
            if j < len(base) and base[j] == char:
                j += 1
        at.append(j)
        if j != len(base):  # not derived by insertions alone: no offsets to trust
            return []
        found = []
        for u in self.unsupported:
            start, end = lead + at[u.start], lead + at[u.end]
            if start < end:
                found.append(UnsupportedOut(start, end, streamed[start:end], u.reason))
        return found


async def grounded_completion(
    data: ChatCompletionIn,
    messages: list[ChatMessage],
    services: Services,
    request: Request[Any, Any, Any],
) -> Response[Any]:
    chat = services.require_chat()
    ids = await asyncio.to_thread(_collection_ids, services, data)
    question, history = _question_and_history(messages)
    set_channel("v1")
    recorded = _Usage(chat.finished_listener(), question)  # as chat's: the same recorder
    memory = FollowUpMemory.of(services)
    cited_before = await asyncio.to_thread(memory.cited_before, question, history)
    asked = [turn.question for turn in history]
    query, hits = await asyncio.to_thread(chat.search_after, asked, question, cited_before, ids)
    if not hits:  # as chat does: no source, no model
        await recorded.finished(NOTHING_FOUND, "", None)
        return _nothing_found(data, query)
    recorded.document_ids = tuple(hit.document_id for hit in hits)
    answer_tokens = data.max_completion_tokens or data.max_tokens or chat.config.max_answer_tokens
    # The instructions of the collections the request named (``rag:<name>``), as for a
    # conversation scoped to them in chat; a question over everything gets none.
    guidance = await asyncio.to_thread(chat.guidance, ids)
    grounding = _Grounded(question, history, hits, answer_tokens, query, guidance)
    model = (
        chat.config.model
        if data.model == RAG_MODEL or data.model.startswith(RAG_PREFIX)
        else data.model
    )
    temperature = chat.config.temperature if data.temperature is None else data.temperature
    sampling = msgspec.structs.replace(data, model=model, temperature=temperature)
    started = await recorded.failing(
        start(
            services,
            sampling,
            grounding.prompt_for,
            max_tokens=answer_tokens,
            response_format=data.response_format,
            prefix="chatcmpl",
            may_load_any=may_load_any_model(request),
        )
    )
    assert grounding.grounding is not None  # start() built the prompt
    await asyncio.to_thread(request_audit(services.auth), started.id, grounding.grounding.listed())
    if data.stream:
        usage = data.stream_options is not None and data.stream_options.include_usage
        chunks = _chunks(started, grounding, recorded, memory, include_usage=usage)
        return ServerSentEvent(chunks)
    text, done = await recorded.failing(collect(started, request, grounding.guard()))
    cited = grounding.cite(text)
    await recorded.finished(cited.answer, done.model, done.usage, cited=cited.grounded)
    await asyncio.to_thread(memory.remember, question, cited.answer, cited.citations)
    message = GroundedMessageOut(
        cited.answer,
        citations=cited.citations,
        unsupported=cited.unsupported,
        grounded=cited.grounded,
        query=grounding.query,
    )
    choice = ChatChoice(0, message, FINISH_REASONS[done.reason])
    out = ChatCompletionOut(
        started.id, int(time.time()), done.model, [choice], usage_out(done.usage)
    )
    return Response(out, media_type=MediaType.JSON)


def _nothing_found(data: ChatCompletionIn, query: str) -> Response[Any]:
    response_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if data.stream:
        return ServerSentEvent(_nothing_found_chunks(response_id, created, data.model, query))
    usage = UsageOut(0, 0, 0, PromptTokensDetails(0))
    choice = ChatChoice(0, GroundedMessageOut(NOTHING_FOUND, query=query), "stop")
    out = ChatCompletionOut(response_id, created, data.model, [choice], usage)
    return Response(out, media_type=MediaType.JSON)


def _sse(value: object) -> ServerSentEventMessage:
    return ServerSentEventMessage(data=msgspec.json.encode(value).decode())


async def _nothing_found_chunks(
    response_id: str, created: int, model: str, query: str
) -> AsyncIterator[ServerSentEventMessage]:
    yield _sse(ChatChunk(response_id, created, model, [ChunkChoice(0, Delta("assistant", ""))]))
    yield _sse(
        ChatChunk(response_id, created, model, [ChunkChoice(0, Delta(content=NOTHING_FOUND))])
    )
    last = [ChunkChoice(0, Delta(), "stop")]
    yield _sse(GroundedChunk(response_id, created, model, last, query=query))
    yield ServerSentEventMessage(data="[DONE]")


async def _chunks(
    started: Started,
    grounding: _Grounded,
    recorded: _Usage,
    memory: FollowUpMemory,
    *,
    include_usage: bool,
) -> AsyncIterator[ServerSentEventMessage]:
    created = int(time.time())
    first = [ChunkChoice(0, Delta(role="assistant", content=""))]
    yield _sse(ChatChunk(started.id, created, started.model, first))
    parts: list[str] = []
    try:
        async for event in started.guarded(grounding.guard()):
            if isinstance(event, TextDelta):
                recorded.first_text()
                parts.append(event.text)
                choices = [ChunkChoice(0, Delta(content=event.text))]
                yield _sse(ChatChunk(started.id, created, started.model, choices))
            elif event.reason == "error":
                error = failed(event)
                await recorded.finished(None, started.model, None)
                yield _sse(error_body(error.status, error.message, None, None))
                return
            else:
                streamed = "".join(parts)
                # The client has the markers as streamed: citations keep those numbers (a
                # miscited sentence is flagged rather than re-pointed), so each [n] it shows
                # is listed, and every answer position maps back to a streamed one.
                cited = grounding.cite(streamed, repoint=False)
                await recorded.finished(
                    cited.answer, event.model, event.usage, cited=cited.grounded
                )
                # Under the text the client put together, before it can send it back.
                question = grounding.question
                await asyncio.to_thread(memory.remember, question, streamed, cited.citations)
                last = [ChunkChoice(0, Delta(), FINISH_REASONS[event.reason])]
                yield _sse(
                    GroundedChunk(
                        started.id,
                        created,
                        event.model,
                        last,
                        citations=cited.citations,
                        unsupported=cited.unsupported_in(streamed),
                        grounded=cited.grounded,
                        query=grounding.query,
                    )
                )
                if include_usage:
                    usage = usage_out(event.usage)
                    yield _sse(ChatChunk(started.id, created, event.model, [], usage))
    finally:  # closed before the end: the client left mid-answer, recorded as stopped
        recorded.left("".join(parts), started.model)
    yield ServerSentEventMessage(data="[DONE]")


class _Usage:
    """The usage event of one grounded answer (app/usage): who asked is captured when the
    request starts; the event is written in a worker thread when it ends, once."""

    def __init__(self, listener: FinishedListener | None, question: str) -> None:
        self.listener, self.question = listener, question
        self.started = time.monotonic()
        self.first: float | None = None
        self.document_ids: tuple[int, ...] = ()
        self.told = False

    def first_text(self) -> None:
        if self.first is None:
            self.first = time.monotonic()

    async def failing(self, work: Awaitable[T]) -> T:
        """``work``'s result; an answer that fails on the way is recorded as failed."""
        try:
            return await work
        except Exception:
            await self.finished(None, "", None)
            raise

    def left(self, partial: str, model: str) -> None:
        """The client left before the end (nothing to await in a closing stream): the
        answer so far, recorded as stopped, from a worker thread; nothing when told."""
        told = self._telling(stopped_text(partial), model, None, stopped=True)
        if told is not None:
            listener, finished = told
            tell_later(listener, finished)

    async def finished(
        self, answer: str | None, model: str, usage: Usage | None, *, cited: bool = False
    ) -> None:
        told = self._telling(answer, model, usage, cited=cited)
        if told is not None:
            listener, finished = told
            await asyncio.to_thread(listener, finished)

    def _telling(
        self, answer: str | None, model: str, usage: Usage | None, **flags: bool
    ) -> tuple[FinishedListener, FinishedAnswer] | None:
        """The listener and what to tell it, the first time only (None after, or when
        nobody listens). Nothing found: the answer came at once, its first text too."""
        if self.told or self.listener is None:
            return None
        self.told = True
        now = time.monotonic()
        ttft = now - self.started if answer == NOTHING_FOUND else None
        if self.first is not None:
            ttft = self.first - self.started
        finished = FinishedAnswer(
            self.question, answer, model, ttft, now - self.started, usage,
            self.document_ids, failed=answer is None, **flags,
        )  # fmt: skip
        return self.listener, finished
