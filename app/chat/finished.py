"""What the chat service tells whoever listens once an answer has finished (usage
analytics, ``app.usage``): the service knows the timings, the model and the token counts,
which no door sees in full. Defined here so the chat service imports no listener."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from llm.params import Usage


@dataclass(frozen=True)
class FinishedAnswer:
    """One answer's end, however it ended. ``answer``: its text as stored or sent (None
    when it failed or is not known); ``document_ids``: of the passages it was given."""

    question: str
    answer: str | None
    model: str
    ttft_s: float | None  # question received → first text the reader saw
    total_s: float
    usage: Usage | None
    document_ids: tuple[int, ...] = ()
    message_id: int | None = None  # the stored answer, when one was stored
    failed: bool = False
    stopped: bool = False  # stopped by the user, or the client left before the end
    cited: bool = False  # it cites a passage: an answer, even if a sentence sounds like a "no"


# Made in the request (so it captures who asked and by which door), called once at the end.
FinishedListener = Callable[[FinishedAnswer], None]
ListenerFactory = Callable[[], FinishedListener | None]


def tell_later(listener: FinishedListener, finished: FinishedAnswer) -> None:
    """Hand ``finished`` to ``listener`` in a worker thread, without waiting for it (code
    that may not await: a closing stream); directly when no event loop runs (a stream
    closed by the garbage collector)."""
    try:
        asyncio.get_running_loop().run_in_executor(None, listener, finished)
    except RuntimeError:
        listener(finished)
