"""A question in, a grounded streamed answer out: retrieval, prompt, generation, citations."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from app.auth.scope import readable_now
from app.chat.answering import MAX_QUESTION_CHARS, NOTHING_FOUND, Grounding, source_of
from app.chat.conversations import Conversations
from app.chat.finished import FinishedAnswer, FinishedListener, ListenerFactory, tell_later
from app.chat.prefetch import Prefetcher, asker_key
from app.chat.records import Citation, Conversation, Message, ShownSource, TurnContext
from app.chat.stopping import RunningAnswers, StopRequested, stopped_text
from app.config.settings import Settings
from app.errors import NotFound, UnprocessableInput, from_engine, is_store_unavailable
from llm.backend import Backend
from llm.params import (
    BackendFailed,
    CompletionRequest,
    EngineError,
    SamplingParams,
    TextDelta,
    UnknownModel,
    Usage,
)
from llm.prompt import PromptTooLong, Turn, demonstrated
from llm.registry import Registry
from llm.repetition import RepetitionGuard
from llm.support import Unsupported
from retrieval.collections import Workspaces
from retrieval.focus import focus
from retrieval.followup import (
    asks_about_the_last_answer,
    conversation_query,
    followed_each,
    prefer_cited,
)
from retrieval.search import Retriever
from retrieval.types import Hit

log = logging.getLogger(__name__)

REGENERATE_TEMPERATURE = 0.8  # an answer written again samples at least this warm
_Checked = tuple[tuple[Citation, ...], tuple[Unsupported, ...]]  # what an answer cites, and
# which of its sentences no source supports


@dataclass(frozen=True)
class ChatConfig:
    model: str
    top_k: int
    min_score: float
    max_answer_tokens: int
    temperature: float
    timeout_s: float = 300.0
    passage_chars: int = 0  # longer passages are focused on the question (0: shown whole)
    withhold_unsupported: bool = True  # an answer no source supports anywhere is not shown
    check_answers: bool = True  # ask the model whether the cited passages state the answer
    prefetch: bool = True  # prefill the prompt of a draft question (app/chat/prefetch.py)
    prefetch_keeps_order: bool = True  # an answer lists its passages as its draft did
    prefetch_keeps_passages: bool = True  # and keeps one its draft read that still qualifies

    @classmethod
    def from_settings(cls, settings: Settings, model: str | None = None) -> ChatConfig:
        """How chat answers, from the settings (``model``: another than the configured one)."""
        return cls(
            model=model or settings.generation.chat_model,
            top_k=settings.search.top_k,
            min_score=settings.search.min_score,
            max_answer_tokens=settings.generation.max_answer_tokens,
            temperature=settings.generation.temperature,
            timeout_s=settings.generation.request_timeout_s,
            passage_chars=settings.search.passage_chars,
            withhold_unsupported=settings.generation.withhold_unsupported,
            check_answers=settings.generation.check_answers,
            prefetch=settings.generation.prefetch,
            prefetch_keeps_order=settings.generation.prefetch_keeps_order,
            prefetch_keeps_passages=settings.generation.prefetch_keeps_passages,
        )


@dataclass(frozen=True)
class ReadingEvent:
    """The passages the model is about to read, sent before it starts: on 2 CPU cores the
    first token takes seconds (prefill), and the reader sees meanwhile what it is reading;
    ``query``: what was searched for (a follow-up carries the last turn's subject)."""

    sources: tuple[Citation, ...]
    query: str = ""


@dataclass(frozen=True)
class CheckingEvent:
    """The answer is written; the model is asked whether the passages it cites state it
    (a second or more of prefill here), and the answer may yet be withheld."""

    sources: tuple[Citation, ...]


@dataclass(frozen=True)
class TokenEvent:
    text: str


@dataclass(frozen=True)
class DoneEvent:
    message: Message
    looped: bool = False  # the repetition guard cut the answer short
    usage: Usage | None = None  # the model's token counts; None when no model ran
    repeated: bool = False  # written again, it came out as an earlier version: kept that one


ChatEvent = ReadingEvent | TokenEvent | CheckingEvent | DoneEvent


@dataclass
class _Progress:
    """One answer as it is produced: what had been said when the client left (None: it
    did not leave), what the model was shown, and whom to tell once it is stored."""

    partial: str | None = None
    context: TurnContext | None = None
    grounding: Grounding | None = None  # the prompt's sources: what a stopped answer cites
    on_stored: Callable[[Message], None] | None = None  # e.g. the audit of shown sources
    settling: asyncio.Future[Message] | None = None  # the complete answer being stored
    # For whoever listens once it has finished (usage analytics: app/chat/finished.py).
    started: float = field(default_factory=time.monotonic)
    first_text: float | None = None
    model: str = ""
    usage: Usage | None = None
    document_ids: tuple[int, ...] = ()


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
        self.workspaces = Workspaces(conversations.db)  # instructions and default models
        self._answering: set[int] = set()
        self.running = RunningAnswers()  # what the Stop button can cancel
        self.prefetcher = Prefetcher(
            self,
            enabled=config.prefetch,
            keep_order=config.prefetch_keeps_order,
            keep_passages=config.prefetch_keeps_passages,
        )
        self.on_finished: ListenerFactory | None = None  # e.g. app.usage's recorder

    def ask(
        self, question: str, conversation_id: int | None, owner: int | None = None
    ) -> tuple[Conversation, Message]:
        """Record the question (in a new conversation of ``owner`` unless one is given)."""
        question = clean_question(question)
        if conversation_id is None:
            conversation = self.conversations.create(question, owner)
        elif (found := self.conversations.get(conversation_id)) is None:
            raise NotFound("no such conversation")
        else:
            conversation = found
        return conversation, self.conversations.add_question(conversation.id, question)

    async def answer(
        self, question: Message, on_stored: Callable[[Message], None] | None = None
    ) -> AsyncIterator[ChatEvent]:
        """Stream the answer to a recorded question, then store it with its citations.

        A question already answered yields its stored answer at once, so a reconnecting
        client never triggers a second generation. ``on_stored`` is called (in a worker
        thread) with the answer once it is stored, however it ended: complete, stopped, or
        cut short by a client that left.
        """
        existing = await asyncio.to_thread(self.conversations.answer_to, question)
        if existing is not None or question.id in self._answering:
            if existing is not None:
                yield DoneEvent(existing)
            return
        self._answering.add(question.id)
        progress = _Progress(on_stored=on_stored)
        listener = self.finished_listener()  # made now: it captures who asks, and by which door
        done: Message | None = None
        failed = False
        try:
            # aclosing: the inner generator records what was said before we look below.
            async with aclosing(self._generate(question, progress)) as events:
                async for event in events:
                    if isinstance(event, TokenEvent) and progress.first_text is None:
                        progress.first_text = time.monotonic()
                    elif isinstance(event, DoneEvent):
                        done = event.message
                    yield event
        except StopRequested:  # the Stop button: store what was said and show it at once
            partial, progress.partial = progress.partial or "", None
            checked = _stopped_checked(progress, partial)
            done = await self._save(question, stopped_text(partial), progress, checked)
            yield DoneEvent(done)
        except Exception:
            failed = True
            raise
        finally:
            if listener is not None:
                _tell(listener, question, progress, done, failed=failed)
            self.running.forget(question.id)
            settling = progress.settling
            if progress.partial is not None:  # the client left: keep what was said, cut short
                self._save_stopped(question, progress.partial, progress)
            elif settling is not None and not settling.done():  # it left during the check
                settling.add_done_callback(lambda done: self._settled(question, done))
            else:
                self._answering.discard(question.id)

    def retrieve(
        self, query: str, collection_ids: frozenset[int] | None = None, *, k: int | None = None
    ) -> list[Hit]:
        """The passages a question is answered from (every door retrieves through here,
        with the question's standalone query: ``retrieval.followup``): the top k (``k``:
        another depth) over the collections given (None: the retriever's own scope), none
        below the relevance floor."""
        config = self.config
        result = self.retriever.search(
            query, k or config.top_k, min_score=config.min_score, collection_ids=collection_ids
        )
        if not config.passage_chars:
            return result.hits
        return focus(query, result.hits, self.retriever.embedder, config.passage_chars)

    def search_turn(
        self,
        question: str,
        turns: list[tuple[Message, Message]],
        scope: frozenset[int] | None,
        *,
        k: int | None = None,
    ) -> tuple[str, list[Hit]]:
        """What a question asked after ``turns`` is searched for (``retrieval.followup``),
        and the passages found (``k``: another depth than the top k): for one about the
        last answer ("How high is it?", "And the lowest?"), those of the documents it cited
        (``prefer_cited``)."""
        cited = {c.document_id for c in turns[-1][1].citations} if turns else set()
        asked = [asked.content for asked, _ in turns]
        return self.search_after(asked, question, cited, scope, k=k)

    def qualifying(
        self,
        question: str,
        turns: list[tuple[Message, Message]],
        scope: frozenset[int] | None,
    ) -> list[Hit]:
        """The passages that still qualify for ``question``: what its own search finds at
        twice the depth, 2k, narrowed alike (a passage its draft listed may stay in its
        answer: ``app.chat.prefetch``)."""
        return self.search_turn(question, turns, scope, k=2 * self.config.top_k)[1]

    def search_after(
        self,
        asked: list[str],
        question: str,
        last_cited: Collection[int],
        scope: frozenset[int] | None,
        *,
        k: int | None = None,
    ) -> tuple[str, list[Hit]]:
        """``search_turn`` for any door: ``asked`` are the questions before (oldest first),
        ``last_cited`` the documents the last answer cited (grounded ``/v1`` remembers
        them: ``app.chat.cited_answers``). What the search found (the caller's readable
        collections only) may be narrowed: nothing is added."""
        query = conversation_query([*asked, question])
        hits = self.retrieve(query, scope, k=k)
        if asked and last_cited and asks_about_the_last_answer(question):
            hits = prefer_cited(hits, last_cited, question)
        return query, hits

    @property
    def default_model(self) -> str:
        """The model a conversation that chose none is answered by."""
        return self.config.model

    def is_answering(self, question_id: int) -> bool:
        """From the moment its answer starts (retrieval included) until it is stored."""
        return question_id in self._answering

    @property
    def answering(self) -> int:
        """How many answers are under way now, each from its retrieval until it is stored."""
        return len(self._answering)

    def stop(self, question_id: int) -> bool:
        """Stop generating the answer to a question; False when none is being generated."""
        if question_id not in self._answering:
            return False
        self.running.stop(question_id)
        return True

    def _settled(self, question: Message, done: asyncio.Future[Message]) -> None:
        """A complete answer is stored after its client left (see ``_generate``)."""
        self._answering.discard(question.id)
        if not done.cancelled() and (failed := done.exception()) is not None:
            _not_stored("an answer", failed)

    def _save_stopped(self, question: Message, partial: str, progress: _Progress) -> None:
        """Store a cut-short answer without awaiting (a closing generator must not wait for
        the database); the question counts as being answered until it is stored, so a
        reconnect in between cannot start a second generation."""
        text = stopped_text(partial)
        checked = _stopped_checked(progress, partial)
        future = asyncio.get_running_loop().run_in_executor(
            None, self._store, question, text, progress, checked
        )

        def stored(done: asyncio.Future[Message]) -> None:
            self._answering.discard(question.id)
            if not done.cancelled() and (failed := done.exception()) is not None:
                _not_stored("a stopped answer", failed)

        future.add_done_callback(stored)

    async def _generate(
        self, question: Message, progress: _Progress
    ) -> AsyncGenerator[ChatEvent, None]:
        # The conversation's chosen collections; the retriever narrows them (and None, all)
        # to what the asker may read, so a stored scope never widens access.
        scope = await asyncio.to_thread(self.conversations.scope_of, question.conversation_id)
        turns = await asyncio.to_thread(self.conversations.turns_before, question)
        query, hits = await asyncio.to_thread(self.search_turn, question.content, turns, scope)
        # "Searched in" names what was searched: the scope as narrowed for this asker (a
        # collection they may no longer read is neither searched nor named).
        searched_in = (
            None
            if scope is None
            else await asyncio.to_thread(self.conversations.names_of, readable_now(scope) or ())
        )
        earlier = await asyncio.to_thread(self.conversations.earlier_answers, question)
        if not earlier:  # a first answer: its passages as the draft prefetched listed them
            prefetcher = self.prefetcher
            drafted = prefetcher.last_draft(asker_key(), question.conversation_id, not turns)
            still: list[Hit] = []
            if prefetcher.may_keep(drafted, hits):
                still = await asyncio.to_thread(self.qualifying, question.content, turns, scope)
            hits = prefetcher.listed_like(drafted, hits, still)
        if not hits:
            progress.context = TurnContext(NOTHING_FOUND, query=query, scope=searched_in)
            yield TokenEvent(NOTHING_FOUND)
            if NOTHING_FOUND in earlier:  # written again, nothing is found again
                version = earlier.index(NOTHING_FOUND) + 1
                kept = await asyncio.to_thread(
                    self.conversations.choose_version, question.id, version
                )
                if kept is not None:
                    yield DoneEvent(kept, repeated=True)
                    return
            yield DoneEvent(await self._save(question, NOTHING_FOUND, progress))
            return
        key = f"conversation:{question.conversation_id}"
        model = await asyncio.to_thread(self.model_for, question.conversation_id)
        progress.model, progress.document_ids = model, tuple(h.document_id for h in hits)
        backend = await asyncio.to_thread(self.models.get, model, key)
        grounding = await asyncio.to_thread(
            self.grounding, backend, question.content, turns, hits, scope
        )
        progress.grounding = grounding
        yield ReadingEvent(tuple(grounding.reading()), query)
        prompt = grounding.prompt
        prefetched = self.prefetcher.used_by(prompt.text)
        request = CompletionRequest(
            prompt=prompt.text,
            params=SamplingParams(
                max_tokens=self.config.max_answer_tokens,
                stop=prompt.stop,
                **self._sampling(again=bool(earlier)),
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
        guard = RepetitionGuard(said=demonstrated(prompt.text))
        completed = False
        usage: Usage | None = None
        try:
            async for event in completion:
                if isinstance(event, TextDelta):
                    if guard.feed(event.text):
                        completion.cancel()
                        break  # a loop: the answer so far is all there is
                    yield TokenEvent(event.text)
                elif event.reason == "error":
                    raise from_engine(BackendFailed(event.error or "generation failed"))
                else:
                    usage = progress.usage = event.usage
            completed = True
            guard.end()  # the worked example cut short, or without its full stop, is out too
            if prefetched:
                self.prefetcher.count("used", usage.cached_tokens if usage else 0)
        finally:
            if not completed:  # the client left (leaving the loop cancelled the request)
                progress.partial = guard.text.strip()
                progress.context = _context(grounding, guard.text, query, searched_in, model)
        checked = grounding.checked(guard.text, withhold=self.config.withhold_unsupported)
        progress.context = _context(grounding, guard.text, query, searched_in, model)
        # Not asked about a follow-up: the checker reads the passages and the question
        # alone, and "How high is it?" names nothing they could state (three ways of
        # showing it the question measured: each withheld more right answers than wrong).
        follow_up = query != question.content
        check = self.config.check_answers and not follow_up
        asked = grounding.to_check(backend, checked) if check else ()

        def settle() -> Message:  # the second look and the store, in one worker thread
            answer, citations, unsupported = (
                grounding.second_look(backend, checked, deadline=request.deadline)
                if asked
                else checked
            )
            if answer in earlier:  # the same words again: show that version, add none
                kept = self.conversations.choose_version(question.id, earlier.index(answer) + 1)
                if kept is not None:
                    if progress.on_stored is not None:  # its passages were shown again
                        progress.on_stored(kept)
                    return kept
            return self._store(question, answer, progress, (citations, unsupported))

        # Started before anything else is awaited, and shielded: a client that leaves
        # while the model checks does not stop the answer from being stored.
        progress.settling = asyncio.ensure_future(asyncio.to_thread(settle))
        if asked:
            yield CheckingEvent(asked)
        stored = await asyncio.shield(progress.settling)
        repeated = stored.content in earlier
        yield DoneEvent(stored, looped=guard.repeated, usage=usage, repeated=repeated)

    def finished_listener(self) -> FinishedListener | None:
        """Who is told how an answer of this request ended (usage analytics), made in the
        request: it captures who asks, and by which door; None when nobody listens."""
        if self.on_finished is None:
            return None
        try:
            return self.on_finished()
        except Exception:  # analytics never fail an answer
            log.exception("could not start recording an answer's usage")
            return None

    def _sampling(self, *, again: bool) -> dict[str, Any]:
        """How the answer is sampled: as configured (greedy by default), or, written
        again (Regenerate), at least at REGENERATE_TEMPERATURE with a fresh seed, since a
        greedy model would write the same words."""
        if not again:
            return {"temperature": self.config.temperature}
        temperature = max(self.config.temperature, REGENERATE_TEMPERATURE)
        return {"temperature": temperature, "seed": secrets.randbelow(2**31)}

    def model_for(self, conversation_id: int) -> str:
        """The conversation's chosen model while chat offers it and the registry serves
        it; else the default model of the collections it is scoped to, when they agree on
        one that is still offered and served; otherwise the configured one."""
        chosen = self.conversations.chosen_model(conversation_id)
        if chosen is None:
            chosen = self.scope_default_model(self.conversations.scope_of(conversation_id))
        if chosen is None:
            return self.config.model
        try:
            self.models.resolve(chosen)
        except UnknownModel:  # added after this server started, or configured away
            return self.config.model
        return chosen

    def scope_default_model(self, scope: frozenset[int] | None) -> str | None:
        """The one default model the collections of ``scope`` set (None when they set none
        or disagree, or it is no longer offered in chat: the admin's offer list rules).
        Only collections the asker may still read count, as for everything of a scope."""
        models = self.workspaces.default_models(_still_readable(scope))
        if len(models) != 1:
            return None
        model = models.pop()
        offers = self.conversations.db.read().execute(
            "SELECT 1 FROM chat_model_offers WHERE name = ?", [model]
        )
        return model if model == self.config.model or offers.fetchone() else None

    def guidance(self, scope: frozenset[int] | None) -> list[tuple[str, str]]:
        """The instructions of the collections a conversation is scoped to, by name (an
        unscoped conversation searches everything the asker may read: none apply). Those
        of a collection the asker may no longer read are not given: it is not searched,
        and the model could be asked to repeat them."""
        return self.workspaces.instructions_for(_still_readable(scope))

    def grounding(
        self,
        backend: Backend,
        question: str,
        turns: list[tuple[Message, Message]],
        hits: list[Hit],
        scope: frozenset[int] | None = None,
        asked_as: str | None = None,
    ) -> Grounding:
        """This turn's prompt after the earlier turns, which repeat the sources they were
        shown (so their numbers stay citable), with the instructions of the collections
        of ``scope`` (the conversation's); a follow-up with the questions it leans on
        (``retrieval.followup.followed``, of ``asked_as`` when the prompt's question is
        a stand-in: a prefetch's marker for its draft)."""
        earlier = {
            s.citation.chunk_id: s.citation
            for _, answered in turns
            if answered.context
            for s in answered.context.sources
        }
        asked = [q.content for q, _ in turns]
        *laid_out, follows = followed_each([*asked, question if asked_as is None else asked_as])
        try:
            return Grounding.build(
                backend,
                question=question,
                hits=hits,
                history=[
                    _turn(q, answered, turn_follows)
                    for (q, answered), turn_follows in zip(turns, laid_out, strict=True)
                ],
                earlier=earlier,
                answer_tokens=self.config.max_answer_tokens,
                guidance=self.guidance(scope),
                follows=follows,
            )
        except PromptTooLong as exc:
            raise UnprocessableInput(str(exc)) from exc
        except EngineError as exc:  # e.g. ChatTemplateFailed: the model's template refused
            raise from_engine(exc) from exc  # its status (400), not the stream's 500

    async def _save(
        self, question: Message, answer: str, progress: _Progress, checked: _Checked = ((), ())
    ) -> Message:
        return await asyncio.to_thread(self._store, question, answer, progress, checked)

    def _store(
        self, question: Message, answer: str, progress: _Progress, checked: _Checked = ((), ())
    ) -> Message:
        citations, unsupported = checked
        stored = self.conversations.add_answer(
            question, answer, citations, progress.context, unsupported
        )
        if progress.on_stored is not None:
            progress.on_stored(stored)
        return stored


def _not_stored(what: str, exc: BaseException) -> None:
    """An answer nobody waits for any more could not be stored: the database being
    away is one line (readiness and the requests of the moment say the rest); anything
    else is a bug, with its traceback."""
    if is_store_unavailable(exc):
        log.warning("could not store %s: %s", what, exc)
    else:
        log.error("could not store %s", what, exc_info=exc)


def _still_readable(scope: frozenset[int] | None) -> frozenset[int]:
    """The collections of a conversation's scope the current asker may read (none for an
    unscoped conversation: its settings apply to no collection in particular)."""
    return frozenset() if scope is None else readable_now(scope) or frozenset()


def _tell(
    listener: FinishedListener,
    question: Message,
    progress: _Progress,
    done: Message | None,
    *,
    failed: bool,
) -> None:
    """Tell ``listener`` how the answer ended, in a worker thread; an answer whose client
    left during the check is told once it is stored."""
    settling = progress.settling
    if done is None and not failed and progress.partial is None and settling is not None:
        if not settling.done():
            settling.add_done_callback(
                lambda _: _tell(listener, question, progress, None, failed=False)
            )
            return
        if not settling.cancelled() and settling.exception() is None:
            done = settling.result()
    stopped = progress.partial is not None
    if done is not None:
        answer: str | None = done.content
    else:
        answer = stopped_text(progress.partial or "") if stopped else None
    now = time.monotonic()
    finished = FinishedAnswer(
        question=question.content,
        answer=answer,
        model=progress.model,
        ttft_s=None if progress.first_text is None else progress.first_text - progress.started,
        total_s=now - progress.started,
        usage=progress.usage,
        document_ids=progress.document_ids,
        message_id=done.id if done is not None else None,
        failed=failed or answer is None,
        stopped=stopped,
        cited=done is not None and bool(done.citations),
    )
    tell_later(listener, finished)


def _stopped_checked(progress: _Progress, partial: str) -> _Checked:
    """What a stopped answer cites, numbered as the reader saw it stream, and its sentences
    no cited passage supports: the same rule as for a finished answer, so a cut-short
    "Meal allowance: 100 pounds a day [1]" is marked when [1] says 32 GBP. (The model's
    second look is not asked: the answer is marked unverified as a whole instead.)"""
    grounding = progress.grounding
    if grounding is None or not partial:
        return (), ()
    return grounding.cited_as_written(partial), grounding.unsupported(partial)


def _turn(asked: Message, answered: Message, follows: tuple[str, ...]) -> Turn:
    """An earlier turn as the model saw it (answers from before m005 have no context),
    with the questions it followed up."""
    context = answered.context
    if context is None:
        return Turn(asked.content, answered.content, follows=follows)
    sources = tuple(source_of(s) for s in context.sources)
    return Turn(asked.content, context.answer, sources, context.refers, follows)


def _context(
    grounding: Grounding,
    generated: str,
    query: str,
    scope: tuple[str, ...] | None,
    model: str,
) -> TurnContext:
    """What the model saw and said, stored with the answer for the next turn's prompt,
    what was searched for to find its sources, in which collections, and which model
    wrote it (each answer names it)."""
    turn = grounding.prompt.turn
    listed = tuple(
        ShownSource(citation, source.text)
        for citation, source in zip(grounding.listed(), turn.sources, strict=True)
    )
    return TurnContext(generated, listed, turn.refers, query, scope, model)
