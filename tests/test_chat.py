"""The chat service with fakes: history, no-source answers, cancellation, oversize prompts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from app.chat.conversations import Conversations
from app.chat.records import Message
from app.chat.service import (
    NOTHING_FOUND,
    ChatConfig,
    ChatService,
    DoneEvent,
    ReadingEvent,
    TokenEvent,
)
from app.errors import NotFound, UnprocessableInput
from app.migrations import migrate_all
from llm.backend import FakeBackend
from llm.params import Finished
from llm.registry import Registry
from retrieval.search import Retriever
from tests.conftest import wait_for
from tests.retrieval_kit import Kit, make_kit

POLICY = b"# Leave\n\nStaff receive 28 days of paid leave every year."


def service(kit: Kit, generator: FakeBackend) -> ChatService:
    index, _ = kit.open_index()
    worker = kit.worker(index)
    document, _ = kit.library.submit(data=POLICY, filename="p.md", collection_id=kit.collection_id)
    worker.ingest(document.id)
    config = ChatConfig(
        model="default", top_k=3, min_score=0.1, max_answer_tokens=50, temperature=0.0
    )
    models = Registry.single(generator, "default")
    migrate_all(kit.db)  # a retrieval kit's database has retrieval's tables only
    return ChatService(
        Conversations(kit.db), Retriever(kit.embedder, index, kit.store), models, config
    )


async def collect(chat: ChatService, question: str, conversation_id: int | None = None):  # type: ignore[no-untyped-def]
    _, message = chat.ask(question, conversation_id)
    return [event async for event in chat.answer(message)]


def test_history_reaches_the_prompt_and_answers_are_stored(tmp_path: Path) -> None:
    generator = FakeBackend()
    chat = service(make_kit(tmp_path), generator)
    first = asyncio.run(collect(chat, "How many days of leave do staff get?"))
    done = first[-1]
    assert isinstance(done, DoneEvent)
    assert done.message.citations and done.message.citations[0].page == 1
    asyncio.run(collect(chat, "Is that paid leave?", done.message.conversation_id))
    assert "How many days of leave do staff get?" in generator.history[-1].prompt
    messages = chat.conversations.messages(done.message.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]


def test_the_passages_read_are_told_before_the_first_token(tmp_path: Path) -> None:
    """While the model prefills (seconds on a CPU), the reader is shown what it reads: the
    passages in its prompt, numbered as the answer will cite them."""
    generator = FakeBackend()
    generator.enqueue(["Staff get 28 days [1]."])
    chat = service(make_kit(tmp_path), generator)
    events = asyncio.run(collect(chat, "How many days of leave do staff get?"))
    reading, *rest = events
    assert isinstance(reading, ReadingEvent)
    assert [(c.number, c.title, c.page) for c in reading.sources] == [(1, "Leave", 1)]
    assert "[1] Leave (page 1)" in generator.history[-1].prompt
    assert isinstance(rest[0], TokenEvent) and isinstance(rest[-1], DoneEvent)
    assert rest[-1].message.citations == reading.sources


def test_nothing_to_read_tells_no_passages(tmp_path: Path) -> None:
    chat = service(make_kit(tmp_path), FakeBackend())
    events = asyncio.run(collect(chat, "zebra quantum marmalade"))
    assert not any(isinstance(e, ReadingEvent) for e in events)


def test_a_follow_up_prompt_repeats_the_first_turn_verbatim(tmp_path: Path) -> None:
    """The second prompt starts with the first prompt and the exact generated text (so the
    engine reuses their KV cells); a source listed before keeps its number and can be
    cited from the later turn even when this turn's answer only refers to it."""
    generator = FakeBackend()
    chat = service(make_kit(tmp_path), generator)
    generator.enqueue(["\nStaff get 28 days ", "of leave.", "\n"])  # no marker: attributed
    first = asyncio.run(collect(chat, "How many days of leave do staff get?"))[-1]
    assert isinstance(first, DoneEvent)
    assert [c.number for c in first.message.citations] == [1]
    context = first.message.context
    assert context is not None and context.answer == "\nStaff get 28 days of leave.\n"
    generator.enqueue(["Yes, it is paid [1]."])
    second = asyncio.run(collect(chat, "Is the leave paid?", first.message.conversation_id))[-1]
    first_prompt, second_prompt = (r.prompt for r in generator.history[-2:])
    assert second_prompt.startswith(first_prompt + "\nStaff get 28 days of leave.\n")
    assert second_prompt.count("28 days of paid leave") == 1  # listed once, then referred to
    assert "Also relevant, listed above: [1]" in second_prompt
    assert isinstance(second, DoneEvent)
    assert [(c.number, c.page) for c in second.message.citations] == [(1, 1)]
    assert second.message.context is not None and second.message.context.refers == (1,)


def test_unknown_conversation_and_empty_question(tmp_path: Path) -> None:
    chat = service(make_kit(tmp_path), FakeBackend())
    with pytest.raises(NotFound):
        chat.ask("hello", 12345)
    with pytest.raises(UnprocessableInput):
        chat.ask(" \t\n", None)


def test_irrelevant_question_is_answered_without_the_model(tmp_path: Path) -> None:
    generator = FakeBackend()
    chat = service(make_kit(tmp_path), generator)
    events = asyncio.run(collect(chat, "xylophone quasar"))
    assert isinstance(events[0], TokenEvent) and events[0].text == NOTHING_FOUND
    assert generator.history == []


class CountingGenerator(FakeBackend):
    produced = 0

    def _produce(self, request, tokens, prompt, out):  # type: ignore[no-untyped-def]
        original = out.push

        def counting_push(event):  # type: ignore[no-untyped-def]
            if not isinstance(event, Finished):
                self.produced += 1
            original(event)

        out.push = counting_push
        super()._produce(request, tokens, prompt, out)


def test_leaving_mid_stream_stops_generation_within_a_token(tmp_path: Path) -> None:
    generator = CountingGenerator(token_delay_s=0.05)
    generator.enqueue([f"word{i} " for i in range(200)])
    chat = service(make_kit(tmp_path), generator)

    told: list[Message] = []  # the audit hook hears of the stored answer all the same

    async def read_three_then_leave() -> None:
        _, message = chat.ask("How many days of leave?", None)
        stream = chat.answer(message, on_stored=told.append)
        for _ in range(3):
            await anext(stream)
        await stream.aclose()  # what a disconnecting client does to the SSE generator

    asyncio.run(read_three_then_leave())
    wait_for(lambda: bool(told))  # told once the answer is stored
    stored = chat.conversations.messages(1)[-1]
    assert stored.role == "assistant" and stored.content.endswith("(stopped)")
    assert generator.produced <= 5  # the producer thread stopped, it did not run to 200
    assert [m.id for m in told] == [stored.id]
    assert told[0].context is not None and told[0].context.sources  # what the model saw


def test_question_too_long_for_the_context_is_unprocessable(tmp_path: Path) -> None:
    generator = FakeBackend(context_tokens=120)
    chat = service(make_kit(tmp_path), generator)

    async def run() -> None:
        await collect(chat, "leave " * 200)

    with pytest.raises(UnprocessableInput, match="tokens"):
        asyncio.run(run())


def test_a_looping_answer_is_cut_at_the_repetition(tmp_path: Path) -> None:
    generator = FakeBackend()
    generator.enqueue(["Leave is 28 days.", " Paid leave is 28 days.", " Leave is 28 days.", " x"])
    chat = service(make_kit(tmp_path), generator)
    done = asyncio.run(collect(chat, "How many days of leave?"))[-1]
    assert isinstance(done, DoneEvent)
    assert done.message.content.count("Leave is 28 days") == 1
    assert "x" not in done.message.content


def test_answers_belong_to_their_question_whatever_the_order(tmp_path: Path) -> None:
    generator = FakeBackend()
    generator.enqueue(["First answer."])
    generator.enqueue(["Second answer."])
    chat = service(make_kit(tmp_path), generator)
    conversation, first = chat.ask("How many days of leave?", None)
    _, second = chat.ask("Is it paid leave?", conversation.id)  # sent before the first streamed

    async def stream(question):  # type: ignore[no-untyped-def]
        return [event async for event in chat.answer(question)][-1]

    second_done = asyncio.run(stream(second))
    first_done = asyncio.run(stream(first))
    assert second_done.message.reply_to == second.id
    assert first_done.message.reply_to == first.id
    replay = asyncio.run(stream(first))  # a reconnect gets the stored answer, no new one
    assert replay.message.id == first_done.message.id
    assert len(generator.history) == 2


def test_a_reconnect_right_after_leaving_does_not_generate_again(tmp_path: Path) -> None:
    generator = FakeBackend(token_delay_s=0.02)
    generator.enqueue([f"w{i} " for i in range(100)])
    chat = service(make_kit(tmp_path), generator)

    async def leave_then_reconnect() -> list[object]:
        _, message = chat.ask("How many days of leave?", None)
        stream = chat.answer(message)
        while not isinstance(await anext(stream), TokenEvent):
            pass
        await stream.aclose()  # the stopped answer is being stored in the background
        return [event async for event in chat.answer(message)]  # an immediate reconnect

    asyncio.run(leave_then_reconnect())
    time.sleep(0.2)
    assert len(generator.history) == 1
    answers = [m for m in chat.conversations.messages(1) if m.role == "assistant"]
    assert len(answers) == 1 and answers[0].content.endswith("(stopped)")


def test_n_the_prompts_worked_example_never_comes_out_as_a_cited_answer(tmp_path: Path) -> None:
    """#30: a document that asked for it got the worked example's answer ("The office
    opens at 8:00 on weekdays [1].") cited to its own passage [1]."""
    from llm.prompt import EXAMPLE

    generator = FakeBackend()
    chat = service(make_kit(tmp_path), generator)
    assert EXAMPLE.answer in chat_prompt(chat, generator, "How many days of leave?")
    generator.enqueue(["Staff get 28 days [1]. ", *(w + " " for w in EXAMPLE.answer.split())])
    done = asyncio.run(collect(chat, "How many days of leave?"))[-1]
    assert isinstance(done, DoneEvent)
    assert "office" not in done.message.content
    assert done.message.content.startswith("Staff get 28 days [1].")
    generator.enqueue([w + " " for w in EXAMPLE.answer.split()])  # the example alone
    alone = asyncio.run(collect(chat, "How many days of leave?"))[-1]
    assert isinstance(alone, DoneEvent) and "office" not in alone.message.content
    assert not alone.message.citations
    cut = EXAMPLE.answer.rstrip(".").split()  # without its full stop, or cut short
    for words in (cut, cut[: len(cut) * 2 // 3]):
        generator.enqueue(["Staff get 28 days [1]. ", *(w + " " for w in words)])
        done = asyncio.run(collect(chat, "How many days of leave?"))[-1]
        assert isinstance(done, DoneEvent)
        assert done.message.content == "Staff get 28 days [1].", words


def chat_prompt(chat: ChatService, generator: FakeBackend, question: str) -> str:
    """The prompt the fake model is given for ``question`` (asked once, aside)."""
    generator.enqueue(["ok"])
    asyncio.run(collect(chat, question))
    return generator.history[-1].prompt
