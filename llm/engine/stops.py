"""Stop strings over streamed text: text that might still become a stop is held back."""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str]):
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Add generated text; return what is safe to emit now (never part of a stop)."""
        if self.stopped:
            return ""
        buffer = self._held + text
        cut = min((i for s in self._stops if (i := buffer.find(s)) >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return buffer[:cut]
        keep = self._longest_partial_stop(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """The held-back text, once generation ended without completing a stop."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _longest_partial_stop(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that a stop string starts with."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:n]):
                    best = n
                    break
        return best
