"""Completion: events from the engine thread to a sync or asyncio consumer, in order."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from typing import cast

import pytest

from llm.channel import Completion
from llm.params import CompletionEvent, Finished, TextDelta, Usage

DONE = Finished("stop", Usage(3, 0, 2), "fake")


def words(n: int) -> list[CompletionEvent]:
    return [TextDelta(f"w{i} ") for i in range(n)]


def produce(
    completion: Completion, events: Sequence[CompletionEvent], delay_s: float = 0.0
) -> threading.Thread:
    def run() -> None:
        for event in events:
            if delay_s:
                time.sleep(delay_s)
            completion.push(event)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# --- sync consumer --------------------------------------------------------------------------


def test_sync_consumer_gets_events_from_another_thread_in_order() -> None:
    completion = Completion()
    events = [*words(500), DONE]
    producer = produce(completion, events)
    assert list(completion) == events
    producer.join(5)
    assert completion.finished == DONE
    assert not completion.cancelled


def test_sync_consumer_waits_for_slow_events() -> None:
    completion = Completion()
    events = [*words(5), DONE]
    producer = produce(completion, events, delay_s=0.005)
    assert list(completion) == events
    producer.join(5)


def test_sync_consumer_gets_events_pushed_before_it_started() -> None:
    completion = Completion()
    for event in [*words(3), DONE]:
        completion.push(event)
    assert list(completion) == [*words(3), DONE]


def test_sync_consumer_stopping_early_cancels() -> None:
    completion = Completion()
    produce(completion, words(10))
    for event in completion:
        assert event == TextDelta("w0 ")
        break
    assert completion.cancelled


def test_sync_consumer_reading_to_the_end_does_not_cancel() -> None:
    completion = Completion()
    produce(completion, [*words(2), DONE])
    for _ in completion:
        pass
    assert not completion.cancelled


# --- producer side --------------------------------------------------------------------------


def test_nothing_is_accepted_after_finished() -> None:
    completion = Completion()
    completion.push(TextDelta("a"))
    completion.push(DONE)
    completion.push(TextDelta("late"))
    completion.push(Finished("error", Usage(0, 0, 0), "fake", "second finish"))
    assert list(completion) == [TextDelta("a"), DONE]
    assert completion.finished == DONE


def test_finished_is_none_until_the_finish_event() -> None:
    completion = Completion()
    completion.push(TextDelta("a"))
    assert completion.finished is None
    completion.push(DONE)
    assert completion.finished is DONE


def test_cancel_sets_cancelled() -> None:
    completion = Completion()
    assert not completion.cancelled
    completion.cancel()
    assert completion.cancelled


def test_wait_cancelled_returns_early_on_cancel() -> None:
    completion = Completion()
    threading.Timer(0.02, completion.cancel).start()
    started = time.monotonic()
    assert completion.wait_cancelled(10.0) is True
    assert time.monotonic() - started < 5


def test_wait_cancelled_times_out_false_when_not_cancelled() -> None:
    completion = Completion()
    started = time.monotonic()
    assert completion.wait_cancelled(0.02) is False
    assert time.monotonic() - started >= 0.015


def test_wait_cancelled_with_zero_timeout_does_not_wait() -> None:
    completion = Completion()
    assert completion.wait_cancelled(0) is False
    completion.cancel()
    assert completion.wait_cancelled(0) is True
    assert completion.wait_cancelled(-1) is True


# --- asyncio consumer -----------------------------------------------------------------------


def test_async_consumer_gets_events_from_another_thread_in_order() -> None:
    completion = Completion()
    events = [*words(500), DONE]

    async def consume() -> list[CompletionEvent]:
        produce(completion, events)
        return [event async for event in completion]

    assert asyncio.run(consume()) == events
    assert not completion.cancelled


def test_async_consumer_waits_for_slow_events() -> None:
    completion = Completion()
    events = [*words(5), DONE]

    async def consume() -> list[CompletionEvent]:
        produce(completion, events, delay_s=0.005)
        return [event async for event in completion]

    assert asyncio.run(consume()) == events


def test_async_consumer_does_not_block_the_event_loop_while_waiting() -> None:
    completion = Completion()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    async def consume() -> list[CompletionEvent]:
        ticker = asyncio.create_task(tick())
        produce(completion, [*words(3), DONE], delay_s=0.01)
        try:
            return [event async for event in completion]
        finally:
            ticker.cancel()

    assert asyncio.run(consume()) == [*words(3), DONE]
    assert ticks > 3


def test_async_consumer_stopping_early_cancels() -> None:
    completion = Completion()

    async def consume() -> CompletionEvent:
        produce(completion, words(10))
        stream = cast(AsyncGenerator[CompletionEvent, None], aiter(completion))
        try:
            return await anext(stream)
        finally:
            await stream.aclose()

    assert asyncio.run(consume()) == TextDelta("w0 ")
    assert completion.cancelled


def test_async_consumer_breaking_out_cancels_by_the_end_of_the_loop() -> None:
    completion = Completion()

    async def consume() -> None:
        produce(completion, words(10))
        async for _ in completion:
            break

    asyncio.run(consume())  # asyncio.run finalises the abandoned async generator
    assert completion.cancelled


def test_async_consumer_task_cancelled_while_waiting_cancels_the_completion() -> None:
    completion = Completion()

    async def consume() -> None:
        async for _ in completion:
            pass

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(consume(), 0.02)

    asyncio.run(main())
    assert completion.cancelled


def test_first_peeks_without_consuming() -> None:
    completion = Completion()
    events = [*words(3), DONE]

    async def consume() -> tuple[CompletionEvent, CompletionEvent, list[CompletionEvent]]:
        produce(completion, events, delay_s=0.005)
        first = await completion.first()
        again = await completion.first()
        return first, again, [event async for event in completion]

    first, again, rest = asyncio.run(consume())
    assert first == again == TextDelta("w0 ")
    assert rest == events


def test_first_returns_at_once_when_an_event_is_waiting() -> None:
    completion = Completion()
    completion.push(DONE)
    assert asyncio.run(completion.first()) == DONE
    assert list(completion) == [DONE]


def test_first_can_surface_an_immediate_error_finish() -> None:
    completion = Completion()
    failed = Finished("error", Usage(0, 0, 0), "fake", "boom")

    async def consume() -> CompletionEvent:
        produce(completion, [failed], delay_s=0.005)
        return await completion.first()

    assert asyncio.run(consume()) == failed


def test_push_to_a_consumer_whose_event_loop_is_gone_cancels() -> None:
    completion = Completion()

    async def give_up_waiting() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(completion.first(), 0.01)

    asyncio.run(give_up_waiting())  # leaves a waiter on a loop that is now closed
    assert not completion.cancelled
    completion.push(TextDelta("too late"))
    assert completion.cancelled
