"""Stop reaches the front writing the answer, wherever the click lands.

With several fronts on one PostgreSQL, the Stop button's request may reach a front other
than the one streaming the answer. That front stops the answer if it is its own; if not,
it asks every front over PostgreSQL's LISTEN/NOTIFY and waits (briefly) for the one
writing it to say it stopped it: the button then gets 204, or 404 when no front was
writing that answer, exactly as with one front. On SQLite there is one front and no relay.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Protocol

CHANNEL = "ragdesk_stop"  # payload "<question id>:<request token>"
ACK_CHANNEL = "ragdesk_stopped"  # payload "<request token>": the front writing it stopped it
ACK_WAIT_S = 2.0


class Notifier(Protocol):
    def notify(self, channel: str, payload: str) -> None: ...

    def listen(self, channel: str, deliver: Callable[[str], None]) -> Callable[[], None]: ...


class StopRelay:
    def __init__(
        self, notifier: Notifier, stop_here: Callable[[int], bool], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._notifier = notifier
        self._stop_here = stop_here  # the chat service's stop: event loop only
        self._loop = loop
        self._waiting: dict[str, threading.Event] = {}
        self._unlisten = [
            notifier.listen(CHANNEL, self._heard_stop),
            notifier.listen(ACK_CHANNEL, self._heard_ack),
        ]

    def stop_everywhere(self, question_id: int) -> bool:
        """Ask every front to stop this question's answer; True when one did. Blocking:
        call it off the event loop."""
        token = uuid.uuid4().hex
        stopped = self._waiting[token] = threading.Event()
        try:
            self._notifier.notify(CHANNEL, f"{question_id}:{token}")
            return stopped.wait(ACK_WAIT_S)
        finally:
            del self._waiting[token]

    def _heard_stop(self, payload: str) -> None:
        question, _, token = payload.partition(":")
        if question.isdigit() and token.isalnum():  # anything else is not ours to act on
            self._loop.call_soon_threadsafe(self._stop_and_tell, int(question), token)

    def _stop_and_tell(self, question_id: int, token: str) -> None:
        if self._stop_here(question_id):
            self._loop.run_in_executor(None, self._notifier.notify, ACK_CHANNEL, token)

    def _heard_ack(self, token: str) -> None:
        if (waiting := self._waiting.get(token)) is not None:
            waiting.set()

    def close(self) -> None:
        for unlisten in self._unlisten:
            unlisten()
