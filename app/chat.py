"""A question in, a grounded streamed answer out: retrieval, prompt, generation, citations."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

from app.conversations import Citation, Conversation, Conversations, Message
from app.errors import NotFound, UnprocessableInput, from_engine
from app.stopping import RunningAnswers, StopRequested, stopped_text
from llm.backend import Backend
from llm.citations import attribute, cited_numbers
from llm.engine.params import (
    BackendFailed,
    CompletionRequest,
    EngineError,
    SamplingParams,
    TextDelta,
)
from llm.prompt import Prompt, PromptTooLong, Source, Turn, build_prompt
from llm.registry import Registry
from llm.repetition import RepetitionGuard
from retrieval.search import Retriever
from retrieval.types import Hit

log = logging.getLogger(__name__)

NOTHING_FOUND = (
    "I could not find anything about that in the documents, so I cannot answer it from them."
)
MAX_QUESTION_CHARS = 4000
SNIPPET_CHARS = 300


@dataclass(frozen=True)
class ChatConfig:
    model: str
    top_k: int
    min_score: float
    max_answer_tokens: int
    temperature: float
    timeout_s: float = 300.0


@dataclass(frozen=True)
class TokenEvent:
    text: str


@dataclass(frozen=True)
class DoneEvent:
    message: Message


ChatEvent = TokenEvent | DoneEvent


@dataclass
class _Left:
    """What had been said when the client left mid-answer (None: it did not leave)."""

    partial: str | None = None


def clean_question(raw: str) -> str:
    question = raw.strip()
    if not question:
        raise UnprocessableInput("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise UnprocessableInput(f"the question is longer than {MAX_QUESTION_CHARS} characters")
    return question


class ChatService:
    def __init__(
        self,
        conversations: Conversations,
        retriever: Retriever,
        models: Registry,
        config: ChatConfig,
    ):
        self.conversations = conversations
        self.retriever = retriever
        self.models = models
        self.config = config
        self._answering: set[int] = set()
        self.running = RunningAnswers()  # what the Stop button can cancel

    def ask(self, question: str, conversation_id: int | None) -> tuple[Conversation, Message]:
        """Record the question (in a new conversation unless one is given)."""
        question = clean_question(question)
        if conversation_id is None:
            conversation = self.conversations.create(question)
        elif (found := self.conversations.get(conversation_id)) is None:
            raise NotFound("no such conversation")
        else:
            conversation = found
        return conversation, self.conversations.add_question(conversation.id, question)

    async def answer(self, question: Message) -> AsyncIterator[ChatEvent]:
        """Stream the answer to a recorded question, then store it with its citations.

        A question already answered yields its stored answer at once, so a reconnecting
        client never triggers a second generation.
        """
        existing = await asyncio.to_thread(self.conversations.answer_to, question)
        if existing is not None or question.id in self._answering:
            if existing is not None:
                yield DoneEvent(existing)
            return
        self._answering.add(question.id)
        left = _Left()
        try:
            # aclosing: the inner generator records what was said before we look below.
            async with aclosing(self._generate(question, left)) as events:
                async for event in events:
                    yield event
        except StopRequested:  # the Stop button: store what was said and show it at once
            partial, left.partial = left.partial or "", None
            yield DoneEvent(await self._save(question, stopped_text(partial), ()))
        finally:
            self.running.forget(question.id)
            if left.partial is None:
                self._answering.discard(question.id)
            else:  # the client left: keep what was said, marked as cut short
                self._save_stopped(question, left.partial)

    def stop(self, question_id: int) -> bool:
        """Stop generating the answer to a question; False when none is being generated."""
        if question_id not in self._answering:
            return False
        self.running.stop(question_id)
        return True

    def _save_stopped(self, question: Message, partial: str) -> None:
        """Store a cut-short answer without awaiting (a closing generator must not wait for
        the database); the question counts as being answered until it is stored, so a
        reconnect in between cannot start a second generation."""
        text = f"{partial} …(stopped)" if partial else "(stopped)"
        future = asyncio.get_running_loop().run_in_executor(
            None, self.conversations.add_answer, question, text
        )

        def stored(done: asyncio.Future[Message]) -> None:
            self._answering.discard(question.id)
            if not done.cancelled() and done.exception() is not None:
                log.error("could not store a stopped answer", exc_info=done.exception())

        future.add_done_callback(stored)

    async def _generate(self, question: Message, left: _Left) -> AsyncGenerator[ChatEvent, None]:
        hits = await asyncio.to_thread(
            lambda: (
                self.retriever.search(
                    question.content, self.config.top_k, min_score=self.config.min_score
                ).hits
            )
        )
        if not hits:
            yield TokenEvent(NOTHING_FOUND)
            yield DoneEvent(await self._save(question, NOTHING_FOUND, ()))
            return
        sources = [Source(n, hit.title, hit.page, hit.text) for n, hit in enumerate(hits, 1)]
        key = f"conversation:{question.conversation_id}"
        backend = await asyncio.to_thread(self.models.get, self.config.model, key)
        prompt = await asyncio.to_thread(self._prompt, backend, question, sources)
        request = CompletionRequest(
            prompt=prompt.text,
            params=SamplingParams(
                max_tokens=self.config.max_answer_tokens,
                temperature=self.config.temperature,
                stop=prompt.stop,
            ),
            cache_key=key,
            deadline=time.monotonic() + self.config.timeout_s,
        )
        try:
            completion = self.running.track(
                question.id, await asyncio.to_thread(backend.submit, request)
            )
        except EngineError as exc:
            raise from_engine(exc) from exc
        guard = RepetitionGuard()
        completed = False
        try:
            async for event in completion:
                if isinstance(event, TextDelta):
                    if guard.feed(event.text):
                        completion.cancel()
                        break  # a loop: the answer so far is all there is
                    yield TokenEvent(event.text)
                elif event.reason == "error":
                    raise from_engine(BackendFailed(event.error or "generation failed"))
            completed = True
        finally:
            if not completed:  # the client left (leaving the loop cancelled the request)
                left.partial = guard.text.strip()
        answer = attribute(guard.text.strip(), prompt.sources)
        numbers = cited_numbers(answer, len(prompt.sources))
        citations = tuple(_citation(n, hits[n - 1]) for n in numbers)
        yield DoneEvent(await self._save(question, answer or "(no answer)", citations))

    def _prompt(self, backend: Backend, question: Message, sources: list[Source]) -> Prompt:
        history = self._history(question)
        budget = backend.context_tokens - self.config.max_answer_tokens
        try:
            return build_prompt(
                backend.prompt_format,
                question=question.content,
                sources=sources,
                history=history,
                token_budget=budget,
                count_tokens=backend.count_tokens,
            )
        except PromptTooLong as exc:
            raise UnprocessableInput(str(exc)) from exc

    def _history(self, question: Message) -> list[Turn]:
        turns = self.conversations.turns_before(question)
        return [Turn(asked.content, answered.content) for asked, answered in turns]

    async def _save(
        self, question: Message, answer: str, citations: tuple[Citation, ...]
    ) -> Message:
        return await asyncio.to_thread(self.conversations.add_answer, question, answer, citations)


def _citation(number: int, hit: Hit) -> Citation:
    return Citation(
        number=number,
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        title=hit.title,
        page=hit.page,
        start=hit.start,
        end=hit.end,
        snippet=hit.text[:SNIPPET_CHARS],
    )
