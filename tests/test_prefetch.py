"""Prefill on the draft (app/chat/prefetch.py): prefill-only requests in the real engine,
and the prefetcher through chat, /api/prefetch and the web chat's question box."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
from litestar.testing import TestClient

from app.chat.prefetch import Drafted, Prefetcher, asker_key
from app.chat.service import DoneEvent
from llm.backend import FakeBackend
from llm.channel import Completion
from llm.engine.engine import BACKGROUND_CHUNK
from llm.local import LocalModel
from llm.params import CompletionRequest, Finished, Overloaded, SamplingParams, Usage
from retrieval.types import Hit
from tests.completions import collect as collect_completion
from tests.conftest import add_user, fake_model, login, upload, wait_for, wait_indexed
from tests.retrieval_kit import make_kit
from tests.test_chat import collect, service
from tests.test_engine import GREEDY, load, run

PASSAGES = "\n".join(
    f"[{n}] Handbook (page {n}): Section {n} says the allowance for item {n} is {n * 7} euros."
    for n in range(1, 30)
)
PREFIX = f"Sources:\n{PASSAGES}\n\nQuestion:"
QUESTIONS = [
    " What is the allowance for item 12?\nAnswer:",
    " Which section covers item 3?\nAnswer:",
]


def prefill(model: LocalModel, prompt: str) -> Finished:
    request = CompletionRequest(prompt, SamplingParams(max_tokens=1), prefill_only=True)
    events = list(model.submit(request))
    assert len(events) == 1 and isinstance(events[0], Finished)  # it generates nothing
    return events[0]


@pytest.mark.real
def test_a_prefetched_prefix_leaves_only_the_question_to_read() -> None:
    model = load()
    try:
        for question in QUESTIONS:
            done = prefill(model, PREFIX)
            assert done.reason == "stop" and done.usage.completion_tokens == 0
            _, finished = run(model, CompletionRequest(PREFIX + question, GREEDY))
            assert finished.usage.cached_tokens >= model.count_tokens(PREFIX) - 1
            while model.engine._cache.evict_idle():  # the next question starts cold
                pass
    finally:
        model.close()


@pytest.mark.real
def test_in_batch_invariant_mode_a_prefetch_changes_no_answer() -> None:
    """Reusing cached cells rounds differently from computing them (llama.cpp's CPU
    kernels depend on a row's place in its batch), so any prefix reuse, a prefetch's or a
    conversation's, may change a greedy token. Batch-invariant mode reuses only what a
    cold run computes identically: there a prefetch leaves every answer as it was."""
    cold, warm = load(batch_invariant=True), load(batch_invariant=True)
    try:
        for question in QUESTIONS:
            expected, _ = run(cold, CompletionRequest(PREFIX + question, GREEDY))
            prefill(warm, PREFIX)
            text, finished = run(warm, CompletionRequest(PREFIX + question, GREEDY))
            assert text == expected
            assert finished.usage.cached_tokens >= 512  # the aligned part came from the cache
            for model in (cold, warm):
                while model.engine._cache.evict_idle():
                    pass
    finally:
        cold.close()
        warm.close()


@pytest.mark.real
def test_a_real_request_takes_precedence_over_a_prefetch() -> None:
    model = load(parallel=2, context_tokens=8192)
    try:
        long = "\n".join([PASSAGES] * 8)  # dozens of background chunks
        background = model.submit(
            CompletionRequest(long, SamplingParams(max_tokens=1), prefill_only=True)
        )
        assert not model.serving  # a prefetch is no real request: a new draft's may replace it
        real = model.submit(CompletionRequest("Once upon a time", GREEDY))
        order: list[str] = []

        def drain(name: str, completion: Any) -> None:
            events = list(completion)
            order.append(f"{name}:{events[-1].reason}")

        threads = [
            threading.Thread(target=drain, args=("prefetch", background)),
            threading.Thread(target=drain, args=("real", real)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        # The prefetch yields to the real request (cancelled between two of its chunks; on
        # a machine fast enough to finish it first, done): either way it ends first.
        assert order[0] in ("prefetch:cancelled", "prefetch:stop")
        assert order[1] in ("real:stop", "real:length")
        # And while a real request runs, a new prefetch is refused at once.
        running = model.submit(CompletionRequest("Once upon a time", GREEDY))
        with pytest.raises(Overloaded):
            model.submit(CompletionRequest(PREFIX, SamplingParams(max_tokens=1), prefill_only=True))
        list(running)
    finally:
        model.close()


class HeldChunks:
    """Holds the next prefetch chunk inside ``llama_decode`` (armed for interrupts) until
    the test has submitted what arrives while it is read."""

    def __init__(self, model: LocalModel):
        self.engine, self.decode = model.engine, model.native.decode
        self.reading, self.go = threading.Event(), threading.Event()
        model.native.decode = self  # type: ignore[method-assign]

    def __call__(self) -> int:
        if self.engine._reading is not None and not self.go.is_set():
            self.reading.set()
            self.go.wait(60)
        return self.decode()

    def hold(self) -> None:
        self.go.clear()
        self.reading.clear()

    def wait(self) -> None:
        assert self.reading.wait(60)


def background(model: LocalModel, prompt: str) -> Completion:
    return model.submit(CompletionRequest(prompt, SamplingParams(max_tokens=1), prefill_only=True))


@pytest.mark.real
def test_a_request_stops_a_prefetch_chunk_mid_decode_unless_its_prompt_holds_it() -> None:
    """On 2 cores a 128-token chunk of the 1.5B model reads for 1-4 s. A real request that
    arrives meanwhile stops it mid-decode when its prompt does not hold the chunk (the cells
    are removed, the prefetch ends), and lets it finish, then starts from it, when it does.
    A new prefetch interrupts only a cancelled one: its asker's last draft."""
    model = load(parallel=3, context_tokens=8192)
    held = HeldChunks(model)
    assert model.native.interruptible  # the guard builds wherever the suite does
    try:
        held.hold()
        unrelated = background(model, "\n".join([PASSAGES] * 4))
        held.wait()
        real = model.submit(CompletionRequest("Once upon a time", GREEDY))
        held.go.set()
        assert collect_completion(unrelated)[1].reason == "cancelled"
        assert collect_completion(real)[1].reason in ("stop", "length")
        assert model.stats().prefetch_interrupts == 1

        held.hold()
        prefetch = background(model, PREFIX)
        held.wait()  # its first chunk, up to token 128 (only the BOS token is cached)
        answer = model.submit(CompletionRequest(PREFIX + QUESTIONS[0], GREEDY))
        held.go.set()
        _, finished = collect_completion(answer)
        assert collect_completion(prefetch)[1].reason in ("cancelled", "stop")
        assert model.stats().prefetch_interrupts == 1  # left to finish: the answer holds it
        assert finished.usage.cached_tokens >= BACKGROUND_CHUNK

        held.hold()
        another = background(model, "Chapter one. " * 60)
        held.wait()
        askers = background(model, "Chapter two. " * 60)  # someone else's draft: takes turns
        held.go.set()
        assert [collect_completion(c)[1].reason for c in (another, askers)] == ["stop", "stop"]
        assert model.stats().prefetch_interrupts == 1

        held.hold()
        replaced = background(model, "Chapter three. " * 60)
        held.wait()
        replaced.cancel()  # its asker typed on: the next draft's prompt is another
        replacing = background(model, "Chapter four. " * 60)
        held.go.set()
        assert collect_completion(replaced)[1].reason == "cancelled"
        assert collect_completion(replacing)[1].reason == "stop"
        assert model.stats().prefetch_interrupts == 2
    finally:
        held.go.set()
        model.close()


def test_the_prefetched_prefix_is_the_start_of_the_answers_prompt(tmp_path: Path) -> None:
    generator = FakeBackend()
    chat = service(make_kit(tmp_path), generator)
    counted: list[tuple[str, int]] = []
    chat.prefetcher.count = lambda outcome, tokens: counted.append((outcome, tokens))
    status = asyncio.run(chat.prefetcher.draft("user:1", "How many days of leave", None))
    assert status == "started"
    [prefetched] = generator.prefetched
    assert prefetched.prefill_only and prefetched.prompt.rstrip().endswith("Question:")
    events = asyncio.run(collect(chat, "How many days of leave do staff get?"))
    assert isinstance(events[-1], DoneEvent)
    assert generator.history[-1].prompt.startswith(prefetched.prompt)
    assert [outcome for outcome, _ in counted] == ["started", "used"]
    assert len(generator.history) == 1  # the draft is no request of its own


def test_a_draft_typed_while_the_last_ones_prefetch_reads_replaces_it(tmp_path: Path) -> None:
    """On a CPU a prefetch reads for seconds, longer than a word takes to type. The next
    draft is not refused as if the model were busy (it is, with that prefetch only): the
    same prompt goes on, another replaces it. A real request still comes first."""
    generator = FakeBackend(prefetch_s=60.0)  # reads until cancelled
    chat = service(make_kit(tmp_path), generator)
    reading: list[Completion] = []
    submit = generator.submit

    def recorded(request: CompletionRequest) -> Completion:
        completion = submit(request)
        if request.prefill_only:
            reading.append(completion)
        return completion

    generator.submit = recorded  # type: ignore[method-assign]
    prefetcher = chat.prefetcher
    prepare = prefetcher.prepare

    def prepared(draft: str, *args: Any) -> Drafted | None:
        drafted = prepare(draft, *args)  # the kit has one passage: each draft its own prompt
        return drafted and replace(drafted, prefix=f"{drafted.prefix} {draft}")

    prefetcher.prepare = prepared  # type: ignore[method-assign]

    async def typed(draft: str) -> str:
        return await prefetcher.draft("user:1", draft, None)

    async def typing() -> None:  # one event loop, as in the server: its end cancels reads
        same, other = "How many days of leave", "How many days of paid leave"
        assert [await typed(same), await typed(same)] == ["started", "started"]
        assert len(reading) == 1 and not reading[0].cancelled  # the same prompt: going on
        assert generator.serving is False and not generator.idle
        assert await typed(other) == "started"
        assert len(reading) == 2 and reading[0].cancelled and not reading[1].cancelled
        # a real request under way: a draft adds nothing
        generator.token_delay_s = 0.5
        answer = generator.submit(CompletionRequest("A real question", SamplingParams()))
        assert generator.serving
        assert await typed(same) == "skipped"
        assert len(reading) == 2 and reading[1].cancelled  # the question moved on
        answer.cancel()

    asyncio.run(typing())


def test_short_drafts_and_a_switched_off_prefetcher_do_nothing(tmp_path: Path) -> None:
    generator = FakeBackend()
    chat = service(make_kit(tmp_path), generator)
    assert asyncio.run(chat.prefetcher.draft("user:1", "How many", None)) == "short"
    chat.prefetcher.enabled = False
    assert asyncio.run(chat.prefetcher.draft("user:1", "How many days of leave", None)) == "off"
    assert generator.prefetched == []


def test_api_prefetch_starts_and_stores_nothing(client: TestClient[Any]) -> None:
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    document = upload(client, ("leave.md", b"# Leave\n\nStaff get 28 days of paid leave."))
    wait_indexed(client, document.json()["documents"][0]["id"])
    response = client.post("/api/prefetch", json={"draft": "How many days of leave do"})
    assert response.status_code == 202 and response.json() == {"status": "started"}
    assert client.post("/api/prefetch", json={"draft": "How"}).json() == {"status": "short"}
    assert client.get("/api/conversations").json()["conversations"] == []  # nothing stored
    assert fake_model(client).prefetched and fake_model(client).history == []
    web = client.post(
        "/ui/prefetch", data={"message": "How many days of leave", "conversation_id": ""}
    )
    assert web.status_code == 204
    bad = client.post("/api/prefetch", json={"draft": "x" * 5000})
    assert bad.status_code == 422  # as /api/chat answers an oversize question
    metrics = client.get("/metrics").text
    assert 'ragdesk_prefetches_total{outcome="started"} 2.0' in metrics


def test_a_draft_in_someone_elses_conversation_is_refused(client: TestClient[Any]) -> None:
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    fake_model(client).enqueue(["Hello."])
    client.post("/api/chat", json={"message": "A question of the admin's own"})
    add_user(client, "bob")
    login(client, "bob")
    refused = client.post(
        "/api/prefetch", json={"draft": "and what about it", "conversation_id": 1}
    )
    assert refused.status_code == 404


def _hit(chunk_id: int, start: int = 0) -> Hit:
    return Hit(chunk_id, 1, "Policy", 1, start, 10, f"passage {chunk_id}", 1.0 / chunk_id)


def _drafted(*chunk_ids: int) -> Drafted:
    return Drafted("prefix", FakeBackend(), None, listed=tuple(_hit(c) for c in chunk_ids))


def ordered(chat: Any, asker: str, conversation_id: int, first_turn: bool, hits: list[Hit]) -> Any:
    """The answer's ``hits`` laid out as its asker's last draft listed them."""
    prefetcher = chat.prefetcher
    return prefetcher.listed_like(prefetcher.last_draft(asker, conversation_id, first_turn), hits)


def test_an_answer_lists_its_own_passages_in_the_order_its_draft_listed_them() -> None:
    prefetcher = Prefetcher(Mock(), enabled=True)
    drafted = _drafted(5, 9, 3)
    answers = [_hit(3), _hit(7), _hit(5)]  # the answer's own search, best first
    listed = prefetcher.listed_like(drafted, answers)
    # the same passages (9, found by the draft only, is not added), those the draft listed
    # first in its order, then the answer's own others, best first
    assert [hit.chunk_id for hit in listed] == [5, 3, 7]
    prefetcher.keep_order = False  # RAGDESK_PREFETCH_KEEPS_ORDER=false: always best first
    assert prefetcher.listed_like(drafted, answers) == answers
    assert Prefetcher(Mock(), enabled=True).listed_like(None, answers) == answers


def test_an_answer_keeps_one_passage_its_draft_read_that_still_qualifies() -> None:
    prefetcher = Prefetcher(Mock(), enabled=True)
    drafted = _drafted(5, 9, 8, 3)
    answers = [_hit(3), _hit(7), _hit(5)]  # its own top k: 9 and 8 fell just below it
    still = [_hit(3), _hit(8), _hit(5), _hit(9), _hit(7)]  # its top 2k
    listed = prefetcher.listed_like(drafted, answers, still)
    # the draft's first passage the answer lacks keeps its place; one at most, so 8 goes
    assert [hit.chunk_id for hit in listed] == [5, 9, 3, 7]
    assert listed[1] is drafted.listed[1]  # as the draft read it
    # one that no longer qualifies, or is no longer the passage the draft read, goes
    assert [h.chunk_id for h in prefetcher.listed_like(drafted, answers, still[:3])] == [5, 8, 3, 7]
    moved = [_hit(9, start=40), _hit(8, start=40)]
    assert [h.chunk_id for h in prefetcher.listed_like(drafted, answers, moved)] == [5, 3, 7]
    assert prefetcher.listed_like(drafted, answers) == [answers[2], answers[0], answers[1]]


def test_qualifying_passages_are_looked_for_only_when_the_draft_was_read_in_full() -> None:
    prefetcher = Prefetcher(Mock(), enabled=True)
    answers = [_hit(3), _hit(5)]
    unread = _drafted(5, 9, 3)
    assert not prefetcher.may_keep(unread, answers)  # nothing of it is known to be cached
    reading = Completion()
    assert not prefetcher.may_keep(replace(unread, prefetch=reading), answers)
    reading.push(Finished("stop", Usage(40, 0, 0), "fake"))
    read = replace(unread, prefetch=reading)
    assert prefetcher.may_keep(read, answers)
    assert not prefetcher.may_keep(read, [*answers, _hit(9)])  # the answer has them all
    assert not prefetcher.may_keep(read, [])  # it found nothing: the documents do not cover it
    assert not prefetcher.may_keep(None, answers)
    cancelled = Completion()
    cancelled.push(Finished("cancelled", Usage(40, 0, 0), "fake"))
    assert not prefetcher.may_keep(replace(unread, prefetch=cancelled), answers)
    prefetcher.keep_passages = False  # RAGDESK_PREFETCH_KEEPS_PASSAGES=false
    assert not prefetcher.may_keep(read, answers)


LEAVE_NOTES = [
    "# Carrying leave over\n\nStaff may carry five days of leave into the next year.",
    "# Parental leave\n\nParents get sixteen weeks of leave, on full pay for the first ten.",
    "# Unpaid leave\n\nUnpaid leave of up to three months needs the manager's approval.",
]


@pytest.mark.parametrize("keep_passages", [True, False])
def test_an_answer_whose_question_drops_a_drafted_passage_reads_only_what_is_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_passages: bool
) -> None:
    generator = FakeBackend()
    kit = make_kit(tmp_path)
    chat = service(kit, generator)
    worker = kit.worker(chat.retriever.index)
    for n, text in enumerate(LEAVE_NOTES):
        document, _ = kit.library.submit(
            data=text.encode(), filename=f"leave-{n}.md", collection_id=kit.collection_id
        )
        worker.ingest(document.id)
    chat.prefetcher.keep_passages = keep_passages
    draft = "How many days of leave"
    assert asyncio.run(chat.prefetcher.draft(asker_key(), draft, None)) == "started"
    [prefetched] = generator.prefetched
    _, drafted = chat.search_turn(draft, [], None)
    assert len(drafted) >= 2
    own_search = chat.search_turn

    def search_turn(
        question: str, turns: Any, scope: Any, k: int | None = None
    ) -> tuple[str, list[Hit]]:
        query, found = own_search(question, turns, scope, k=k)
        # the finished question ranks the draft's first passage just below its top k
        return (query, found) if k else (query, drafted[1:])

    monkeypatch.setattr(chat, "search_turn", search_turn)
    events = asyncio.run(collect(chat, "How many days of leave do staff get?"))
    assert isinstance(events[-1], DoneEvent)
    prompt = generator.history[-1].prompt
    dropped = " ".join(drafted[0].text.split())  # as a prompt lists it, on one line
    assert dropped in prefetched.prompt
    # kept, the prompt is the prefetched one and the question; without, it is read anew
    assert prompt.startswith(prefetched.prompt) is keep_passages
    assert (dropped in prompt) is keep_passages


def test_a_drafts_order_is_kept_by_one_answer_in_its_own_conversation_only(
    tmp_path: Path,
) -> None:
    chat = service(make_kit(tmp_path), FakeBackend())
    asker = "user:1"
    _, drafted = chat.search_turn("How many days of leave", [], None)
    hits = [_hit(99), *drafted]  # the answer's own search: one more passage, found first

    def drafted_then(conversation_id: int, first_turn: bool) -> list[Hit]:
        draft = asyncio.run(chat.prefetcher.draft(asker, "How many days of leave", None))
        assert draft == "started"
        return ordered(chat, asker, conversation_id, first_turn, hits)

    # typed where a new conversation starts: the draft's passages first, as it listed them
    assert drafted_then(7, first_turn=True) == [*drafted, hits[0]]
    assert ordered(chat, asker, 7, True, hits[::-1]) == hits[::-1]  # used
    # a draft typed in a new conversation does not order an answer in an older one
    assert drafted_then(7, first_turn=False) == hits
    assert ordered(chat, "user:2", 7, True, hits[::-1]) == hits[::-1]


def test_the_listings_kept_for_answers_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.chat.prefetch.MAX_ASKERS", 2)
    chat = service(make_kit(tmp_path), FakeBackend())
    for asker in ("user:1", "user:2", "user:3"):
        assert asyncio.run(chat.prefetcher.draft(asker, "How many days of leave", None))
    _, found = chat.search_turn("How many days of leave", [], None)
    hits = [_hit(99), *found]
    # the oldest asker's listing went; the two newest still order their answers
    assert ordered(chat, "user:1", 7, True, hits) == hits
    assert ordered(chat, "user:3", 7, True, hits) == [*found, hits[0]]
