"""One request's event stream from the engine thread to a sync or asyncio consumer."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator

from llm.params import CompletionEvent, Finished


class Completion:
    """A submitted request: iterate it (``for`` or ``async for``) and ``cancel`` it.

    The producer appends under a lock and wakes whoever waits; an asyncio consumer is
    woken with one ``call_soon_threadsafe`` per batch of events, not per event.
    """

    def __init__(self) -> None:
        self._events: deque[CompletionEvent] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._cancelled = threading.Event()
        self.finished: Finished | None = None

    # --- producer side (the engine) ---------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait_cancelled(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``, waking early (and returning True) when cancelled."""
        return self._cancelled.wait(timeout_s) if timeout_s > 0 else self._cancelled.is_set()

    def push(self, event: CompletionEvent) -> None:
        with self._ready:
            if self.finished is not None:
                return
            if isinstance(event, Finished):
                self.finished = event
            self._events.append(event)
            self._ready.notify_all()
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            loop, wake = waiter
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop is gone: nobody is listening any more
                self._cancelled.set()

    # --- consumer side ----------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop generating; the engine frees the sequence at its next step."""
        self._cancelled.set()

    def __iter__(self) -> Iterator[CompletionEvent]:
        try:
            while True:
                with self._ready:
                    while not self._events:
                        self._ready.wait()
                    batch = list(self._events)
                    self._events.clear()
                yield from batch
                if isinstance(batch[-1], Finished):
                    return
        finally:
            if self.finished is None:
                self.cancel()

    async def __aiter__(self) -> AsyncIterator[CompletionEvent]:
        loop = asyncio.get_running_loop()
        try:
            while True:
                wake = asyncio.Event()
                with self._ready:
                    batch = list(self._events)
                    self._events.clear()
                    if not batch:
                        self._waiter = (loop, wake)
                if not batch:
                    await wake.wait()
                    continue
                for event in batch:
                    yield event
                if isinstance(batch[-1], Finished):
                    return
        finally:
            if self.finished is None:
                self.cancel()  # the consumer left early (a client disconnected)

    async def first(self) -> CompletionEvent:
        """Wait for the first event without consuming it (errors surface before a stream
        is promised to the client)."""
        loop = asyncio.get_running_loop()
        while True:
            wake = asyncio.Event()
            with self._ready:
                if self._events:
                    return self._events[0]
                self._waiter = (loop, wake)
            await wake.wait()
