"""Stop degenerate loops: small models sometimes repeat one sentence until max_tokens."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")


class RepetitionGuard:
    """Fed tokens as they stream; says stop when a completed sentence repeats an earlier one.

    ``text`` is then the answer up to (not including) the repetition.
    """

    def __init__(self, min_chars: int = 12):
        self._min_chars = min_chars
        self._buffer = ""
        self._kept = 0  # characters of the buffer accepted as the answer
        self._seen: set[str] = set()
        self.repeated = False

    @property
    def text(self) -> str:
        return self._buffer[: self._kept] if self.repeated else self._buffer

    def feed(self, token: str) -> bool:
        """Add a token; True means the model has started repeating itself."""
        self._buffer += token
        while not self.repeated and (match := _SENTENCE_END.search(self._buffer, self._kept)):
            sentence = self._buffer[self._kept : match.end()]
            key = " ".join(sentence.lower().split())
            if len(key) >= self._min_chars and key in self._seen:
                self.repeated = True
            else:
                self._seen.add(key)
                self._kept = match.end()
        return self.repeated
