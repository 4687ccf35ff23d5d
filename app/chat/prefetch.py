"""Prefill on the draft: the answer's prompt is read while the question is still typed.

On a CPU the first token of a grounded answer waits seconds for prefill of the passages.
While a question is being typed, its draft is retrieved for and the grounded prompt up to
where the question starts (instructions, the conversation so far, the numbered sources)
is prefilled into the engine's KV cache by a prefill-only request: lowest priority, never
while anything else runs, cancelled by the next draft and by any real request. On Send the
answer is built exactly as without a prefetch; when its prompt starts with the prefetched
text, the engine finds those tokens cached and only the question is left to read.

The draft usually lacks the question's last word, and that word often moves a passage in
or out of the top few: listed best first, the prompt would then differ from the first
passage that moved. So the answer's own passages (found by its own search, exactly as
without a prefetch) are listed in the order its asker's last prefetch listed those of them
it had, the rest after, best first (``keep_order``, ``RAGDESK_PREFETCH_KEEPS_ORDER``): the
same passages, and half the prompt left to read (docs/BENCHMARKS.md). A passage the draft
listed that the finished question ranks just below its top k would still split the prompt
where it stood; when the draft's prompt was read in full and the finished question still
ranks that passage in its top 2k above the relevance floor, one such passage is kept where
it was (``keep_passages``, ``RAGDESK_PREFETCH_KEEPS_PASSAGES``): the answer reads its own
passages and that one, and only its new ones are left to prefill (as often right on the
golden sets: docs/BENCHMARKS.md). With keeping the order off, the answer's prompt never
depends on a prefetch. Either way its output can change only as far as any reuse of
cached cells rounds differently (docs/BENCHMARKS.md). Drafts are neither stored nor
logged: only counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from app.auth.access import current_user_id
from app.chat.answering import Grounding
from app.errors import AppError
from llm.backend import Prefetching
from llm.channel import Completion
from llm.params import CompletionRequest, EngineError, SamplingParams

if TYPE_CHECKING:
    from app.chat.conversations import Conversations
    from app.chat.records import Message
    from llm.backend import Backend
    from llm.registry import Registry
    from retrieval.types import Hit


class Chat(Protocol):
    """What a prefetch needs of the chat service (``app.chat.service.ChatService``, which
    owns the prefetcher: a Protocol rather than an import keeps the two apart)."""

    conversations: Conversations
    models: Registry

    @property
    def answering(self) -> int: ...

    @property
    def default_model(self) -> str: ...

    def model_for(self, conversation_id: int) -> str: ...

    def search_turn(
        self,
        question: str,
        turns: list[tuple[Message, Message]],
        scope: frozenset[int] | None,
    ) -> tuple[str, list[Hit]]: ...

    def qualifying(
        self,
        question: str,
        turns: list[tuple[Message, Message]],
        scope: frozenset[int] | None,
    ) -> list[Hit]: ...

    def grounding(
        self,
        backend: Backend,
        question: str,
        turns: list[tuple[Message, Message]],
        hits: list[Hit],
        scope: frozenset[int] | None = None,
        asked_as: str | None = None,
    ) -> Grounding: ...


log = logging.getLogger(__name__)

MIN_DRAFT_WORDS = 3  # fewer rarely retrieve what the finished question will
MAX_DRAFT_CHARS = 4000
REMEMBERED = 64  # prefetched prompt prefixes kept to recognise their use
MAX_AGE = 600.0  # seconds: a prefix older than this counts as wasted
MAX_ASKERS = 1024  # askers whose last prefetch's listing is kept for their answer, at most
DEADLINE_S = 120.0
MAX_KEPT = 1  # passages an answer keeps from its draft beyond its own top k
_QUESTION_MARK = "RAGDESKDRAFTQUESTIONRAGDESK"  # stands in for the question in the prompt

# outcome ("started", "used", "wasted", "skipped": nothing to prefetch, "busy": the engine
# was not idle) and, for "used", the prompt tokens the
# answer found cached: for /metrics
Count = Callable[[str, int], None]


def asker_key() -> str:
    """Whose drafts replace each other, and whose answer keeps its last draft's order: the
    signed-in user (one prefetch at a time each)."""
    return f"user:{current_user_id()}"


@dataclass(frozen=True)
class Drafted:
    """A draft's prompt up to its question, where it was typed, what it listed, and the
    prefetch that reads it (None until submitted)."""

    prefix: str
    backend: Backend
    conversation_id: int | None  # None: a new conversation
    listed: tuple[Hit, ...]  # the passages as the prompt lists them, in its order
    prefetch: Completion | None = None

    @property
    def read_in_full(self) -> bool:
        """Whether its prefetch has read the whole prefix into the KV cache."""
        ended = self.prefetch.finished if self.prefetch is not None else None
        return ended is not None and ended.reason == "stop"


class Prefetcher:
    """One prefetch in flight per asker (a new draft cancels the last), and the prefixes
    of recent ones, to tell used from wasted when a real answer starts."""

    def __init__(
        self,
        chat: Chat,
        *,
        enabled: bool,
        keep_order: bool = True,
        keep_passages: bool = True,
        count: Count | None = None,
    ):
        self.chat = chat
        self.enabled = enabled
        self.keep_order = keep_order
        self.keep_passages = keep_passages
        self.count = count or (lambda outcome, tokens: None)
        # asker -> the prefix its prefetch in flight computes, and that prefetch
        self._running: dict[str, tuple[str, Completion]] = {}
        self._prefixes: OrderedDict[str, float] = OrderedDict()  # prefix -> when it started
        self._tasks: set[asyncio.Task[None]] = set()
        self._turns: dict[str, int] = {}  # asker -> number of its latest draft
        # asker -> its latest prefetch started: what it listed, where, and when
        self._listed: dict[str, tuple[Drafted, float]] = {}

    async def draft(
        self,
        asker: str,
        text: str,
        conversation_id: int | None,
        *,
        scope: frozenset[int] | None = None,
        model: str | None = None,
    ) -> str:
        """Prefetch for the draft ``text`` of ``asker`` (a user or session key) in a
        conversation (None: a new one), searching ``scope`` (None: the conversation's) with
        ``model`` (None: the conversation's); returns what happened: "started", "skipped"
        (engine busy or not loaded, nothing found, model cannot), "short" or "off"."""
        if not self.enabled:
            return "off"
        draft = " ".join(text.split())[:MAX_DRAFT_CHARS]
        if len(draft.split()) < MIN_DRAFT_WORDS:
            return "short"
        turn = self._turns[asker] = self._turns.get(asker, 0) + 1  # newer drafts win
        try:
            before = self._listed.get(asker, (None, 0.0))[0]
            if before is not None and before.conversation_id != conversation_id:
                before = None
            drafted = await asyncio.to_thread(
                self.prepare, draft, conversation_id, scope, model, before
            )
        except (EngineError, AppError):  # busy, unknown model, too long, conversation gone
            drafted = None
        if self._turns.get(asker) != turn:
            return "skipped"  # a newer draft of the same asker arrived meanwhile
        running = self._running.get(asker)
        if running is not None and drafted is not None and running[0] == drafted.prefix:
            ended = running[1].finished
            if ended is None or ended.reason == "stop":
                return "started"  # the same prompt as the draft before: going on, or done
        if running is not None:
            running[1].cancel()  # the question moved on
            del self._running[asker]
        if drafted is None:
            self.count("skipped", 0)
            return "skipped"
        prefix = drafted.prefix
        request = CompletionRequest(
            prefix,
            SamplingParams(max_tokens=1, temperature=0.0),
            deadline=time.monotonic() + DEADLINE_S,
            prefill_only=True,
        )
        try:
            completion = await asyncio.to_thread(drafted.backend.submit, request)
        except EngineError:  # busy (a prefetch only runs on an idle engine), or too long
            self.count("busy", 0)
            return "skipped"
        self._running[asker] = (prefix, completion)
        self._keep_listed(asker, replace(drafted, prefetch=completion))
        self._remember(prefix)
        self.count("started", 0)
        task = asyncio.get_running_loop().create_task(self._forget(asker, completion))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return "started"

    def used_by(self, prompt: str) -> bool:
        """Whether a real answer's prompt starts with a recent prefetch (then taken as used:
        the caller counts it, with the prompt tokens the answer found cached)."""
        used = [p for p in self._prefixes if prompt.startswith(p)]
        for prefix in used:
            del self._prefixes[prefix]
        return bool(used)

    def last_draft(self, asker: str, conversation_id: int, first_turn: bool) -> Drafted | None:
        """The last prefetch of ``asker``, to lay out the answer it was typed for; None when
        keeping the order is off, or that prefetch was for another conversation
        (``first_turn``: the answer's conversation has no earlier turn, so a draft typed
        where a new conversation would start counts) or is stale. Each prefetch lays out one
        answer at most."""
        drafted, started = self._listed.pop(asker, (None, 0.0))
        if not self.keep_order or drafted is None or time.monotonic() - started > MAX_AGE:
            return None
        where = drafted.conversation_id
        if where != conversation_id and not (where is None and first_turn):
            return None
        return drafted

    def may_keep(self, drafted: Drafted | None, hits: Sequence[Hit]) -> bool:
        """Whether the passages that still qualify for the answer are worth finding: the
        draft listed one the answer's own ``hits`` lack, and its prompt is read in full. An
        answer that found nothing keeps nothing: it says the documents do not cover it."""
        if not self.keep_passages or drafted is None or not drafted.read_in_full or not hits:
            return False
        found = {hit.chunk_id for hit in hits}
        return any(hit.chunk_id not in found for hit in drafted.listed)

    def listed_like(
        self, drafted: Drafted | None, hits: Sequence[Hit], still: Sequence[Hit] = ()
    ) -> list[Hit]:
        """``hits`` (best first) with those ``drafted`` listed first, as it listed them,
        the rest after them, best first (``keep_order``). Of the passages it listed that
        ``hits`` lack, the first ``MAX_KEPT`` that are ``still`` found (the answer's top
        2k: ``Chat.qualifying``) keep their place, as the draft read them."""
        if not self.keep_order or drafted is None:
            return list(hits)
        found = {hit.chunk_id: hit for hit in hits}
        qualifying = {hit.chunk_id: hit for hit in still}
        kept: list[Hit] = []
        spare = MAX_KEPT
        for hit in drafted.listed:
            if hit.chunk_id in found:
                kept.append(found[hit.chunk_id])
            elif spare and _same_passage(hit, qualifying.get(hit.chunk_id)):
                kept.append(hit)
                spare -= 1
        listed = {hit.chunk_id for hit in drafted.listed}
        return kept + [hit for hit in hits if hit.chunk_id not in listed]

    def prepare(
        self,
        draft: str,
        conversation_id: int | None,
        scope: frozenset[int] | None,
        model: str | None,
        before: Drafted | None = None,
    ) -> Drafted | None:
        """What a prefetch of ``draft`` would read: the grounded prompt up to its question,
        the backend to run it on and what it lists; None when there is nothing to
        prefetch. The passages the draft ``before`` listed too keep their order, so its
        prefill goes on where it was."""
        chat = self.chat
        conversations = chat.conversations
        turns = []
        if conversation_id is not None:
            scope = scope if scope is not None else conversations.scope_of(conversation_id)
            model = model or chat.model_for(conversation_id)
            turns = conversations.turns(conversation_id)
        # Only a loaded model that no real request uses, and nobody's answer under way: a
        # draft never loads a model (loading holds the registry for seconds) nor adds work
        # to a busy server. Prefetches alone running do not count: this draft's replaces
        # its asker's last one, and goes on from what that one read.
        backend = chat.models.if_loaded(
            model or chat.default_model, f"conversation:{conversation_id}"
        )
        if not isinstance(backend, Prefetching) or not backend.prefetches:
            return None
        if chat.answering or backend.serving:
            return None
        _, found = chat.search_turn(draft, turns, scope)
        if not found:
            return None
        hits = self.listed_like(before, found)
        grounding: Grounding = chat.grounding(
            backend, _QUESTION_MARK, turns, hits, scope, asked_as=draft
        )
        text = grounding.prompt.text
        at = text.find(_QUESTION_MARK)
        if at <= 0:
            return None
        return Drafted(text[:at].rstrip(" "), backend, conversation_id, tuple(hits))

    async def _forget(self, asker: str, completion: Completion) -> None:
        """Once a prefetch ends (done or cancelled), it no longer stands in the way."""
        async for _ in completion:
            pass
        running = self._running.get(asker)
        if running is not None and running[1] is completion:
            del self._running[asker]

    def _keep_listed(self, asker: str, drafted: Drafted) -> None:
        """What ``asker``'s prefetch lists, for its answer; past ``MAX_ASKERS`` askers,
        the one whose prefetch is oldest is forgotten (the dict is kept in that order)."""
        self._listed.pop(asker, None)
        while len(self._listed) >= MAX_ASKERS:
            del self._listed[next(iter(self._listed))]
        self._listed[asker] = (drafted, time.monotonic())

    def _remember(self, prefix: str) -> None:
        self._prefixes.pop(prefix, None)
        self._prefixes[prefix] = now = time.monotonic()
        while self._prefixes and (
            len(self._prefixes) > REMEMBERED or now - next(iter(self._prefixes.values())) > MAX_AGE
        ):
            self._prefixes.popitem(last=False)
            self.count("wasted", 0)


def _same_passage(drafted: Hit, now: Hit | None) -> bool:
    """Whether ``now`` is the passage ``drafted`` was when its draft listed it (a chunk
    whose text changed is stored anew, under another id)."""
    return now is not None and (
        drafted.document_id,
        drafted.title,
        drafted.page,
        drafted.start,
        drafted.end,
    ) == (now.document_id, now.title, now.page, now.start, now.end)
