"""The Stop button: which question's completion is running, and cancelling it on request.

A stop cancels the completion (the engine frees the sequence at its next step) and makes
the stream raise ``StopRequested`` instead of delivering more, so the chat service can
store what was said, marked as stopped, exactly like an answer whose client left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from llm.channel import Completion
from llm.params import CompletionEvent

STOPPED = "(stopped)"  # the end of a cut-short answer, as stored and shown


class StopRequested(Exception):
    """The user stopped this answer."""


def stopped_text(partial: str) -> str:
    return f"{partial} …{STOPPED}" if partial else STOPPED


class StoppableCompletion:
    """A running completion as the chat service consumes it, plus a way to stop it."""

    def __init__(self, completion: Completion, on_end: Callable[[], None]) -> None:
        self.completion = completion
        self.stopped = False
        self._on_end = on_end

    def cancel(self) -> None:
        self.completion.cancel()

    def stop(self) -> None:
        self.stopped = True
        self.completion.cancel()

    async def __aiter__(self) -> AsyncIterator[CompletionEvent]:
        try:
            if self.stopped:
                raise StopRequested
            async for event in self.completion:
                if self.stopped:  # whatever arrives after a stop is not shown
                    raise StopRequested
                yield event
        finally:
            self._on_end()


class RunningAnswers:
    """Question id → its running completion. Only the event loop touches it."""

    def __init__(self) -> None:
        self._running: dict[int, StoppableCompletion] = {}
        self._requested: set[int] = set()  # stopped before its completion started

    def track(self, question_id: int, completion: Completion) -> StoppableCompletion:
        def ended() -> None:
            if self._running.get(question_id) is tracked:
                del self._running[question_id]

        tracked = StoppableCompletion(completion, ended)
        self._running[question_id] = tracked
        if question_id in self._requested:
            tracked.stop()
        return tracked

    def stop(self, question_id: int) -> None:
        """Stop the answer now, or as soon as its completion starts."""
        self._requested.add(question_id)
        if (running := self._running.get(question_id)) is not None:
            running.stop()

    def is_running(self, question_id: int) -> bool:
        return question_id in self._running

    def forget(self, question_id: int) -> None:
        """The answer is over (stored, failed or abandoned)."""
        self._requested.discard(question_id)
        self._running.pop(question_id, None)
