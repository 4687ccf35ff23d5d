"""The parse stage's fair queue: owners take turns, none holds every slot."""

from __future__ import annotations

import threading
import time

from retrieval.parse_slots import FairQueue, ParseSlots

A, B, C = 1, 2, 3  # owners (collections)


def _take_all(queue: FairQueue) -> list[int]:
    taken = []
    while (item := queue.take(timeout=0.01)) is not None:
        taken.append(item)
    return taken


def test_owners_take_turns_whatever_order_they_queued_in() -> None:
    queue = FairQueue(share=10)
    for item in (11, 12, 13):
        queue.put(item, A)  # one user's bulk upload first
    queue.put(21, B)
    queue.put(31, C)
    assert _take_all(queue) == [11, 21, 31, 12, 13]


def test_an_owner_holds_at_most_its_share_and_others_go_first() -> None:
    queue = FairQueue(share=1)
    queue.put(11, A)
    queue.put(12, A)
    assert queue.take(timeout=0.01) == 11  # a slow parse, say
    assert queue.take(timeout=0.01) is None  # A's next waits for its share
    queue.put(21, B)
    assert queue.take(timeout=0.01) == 21  # another user's upload is not held up
    queue.parsed(11)
    assert queue.take(timeout=0.01) == 12


def test_a_waiting_taker_wakes_when_the_share_frees() -> None:
    queue = FairQueue(share=1)
    queue.put(11, A)
    queue.put(12, A)
    assert queue.take(timeout=0.01) == 11
    threading.Timer(0.1, queue.parsed, [11]).start()
    started = time.monotonic()
    assert queue.take(timeout=5) == 12
    assert time.monotonic() - started < 2


def test_an_id_queued_twice_is_parsed_once_and_again_only_after_it_finished() -> None:
    queue = FairQueue(share=2)
    queue.put(11, A)
    queue.put(11, A)
    assert len(queue) == 1
    assert queue.take(timeout=0.01) == 11
    queue.put(11, A)  # a retry while the first run is in flight
    assert queue.take(timeout=0.01) is None
    queue.parsed(11)
    assert queue.take(timeout=0.01) is None
    queue.finished(11)
    assert queue.take(timeout=0.01) == 11


def test_close_wakes_a_waiting_taker() -> None:
    queue = FairQueue(share=1)
    threading.Timer(0.1, queue.close).start()
    started = time.monotonic()
    assert queue.take(timeout=10) is None
    assert time.monotonic() - started < 2


def test_slots_parse_at_once_and_survive_a_parse_that_raises() -> None:
    release = threading.Event()

    def parse_one(document_id: int) -> int:
        if document_id == 1:
            release.wait(10)  # slow
        if document_id == 2:
            raise RuntimeError("a bug")
        return document_id

    owners = {1: A, 2: B, 3: B, 4: C}
    slots: ParseSlots[int] = ParseSlots(parse_one, owners.get, slots=2, backlog=4)
    slots.start()
    try:
        for document_id in (1, 2, 3, 4):
            slots.put(document_id)
        results = {slots.results.get(timeout=5) for _ in range(2)}
        assert results == {3, 4}  # while 1 is still parsing; 2's failure cost nothing
        assert slots.alive
        release.set()
        assert slots.results.get(timeout=5) == 1
    finally:
        release.set()
        slots.stop()
        assert slots.join(time.monotonic() + 5)
