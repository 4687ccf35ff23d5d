"""Run a blocking iterator in a worker thread and consume it from the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()


async def iterate_in_thread(
    make_iterator: Callable[[], Iterator[T]], cancel: threading.Event
) -> AsyncGenerator[T, None]:
    """Yield the iterator's items without blocking the loop.

    When the consumer stops early (a client disconnected), ``cancel`` is set so the
    producer can stop at its next item instead of running to completion.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()

    def put(item: object) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop has closed: nobody is listening any more
            cancel.set()

    def produce() -> None:
        try:
            for item in make_iterator():
                put(item)
                if cancel.is_set():
                    break
        except BaseException as exc:  # forwarded and re-raised in the consumer
            put(_Failure(exc))
        finally:
            put(_DONE)

    thread = threading.Thread(target=produce, name="ragdesk-stream", daemon=True)
    thread.start()
    try:
        while (item := await queue.get()) is not _DONE:
            if isinstance(item, _Failure):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        cancel.set()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error
