"""Stop degenerate loops: small models sometimes repeat one sentence, one heading or one
phrase until max_tokens."""

from __future__ import annotations

import re
from collections.abc import Iterable

_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")
_LETTERS = re.compile(r"[^\W\d_]")
LOOP_SPAN = 48  # characters of unbroken repetition that make a loop without sentence ends
MAX_PERIOD = 32  # the longest repeated unit looked for in such a run


class RepetitionGuard:
    """Fed tokens as they stream; says stop as soon as the answer loops:

    - a completed sentence or line repeats an earlier one (one of ``min_chars`` or more
      the first time; a shorter one, such as a heading, the second time), code blocks and
      table rows excepted;
    - or the text since the last sentence end ends in one short unit (a word, a phrase)
      repeated over ``LOOP_SPAN`` characters ("the the the the …").

    ``text`` is then the answer up to (not including) the repetition.
    """

    def __init__(self, min_chars: int = 12, *, said: Iterable[str] = ()):
        """``said``: sentences the answer must not repeat either (the prompt's worked
        example: a document that asks for it must not get it as a cited answer)."""
        self._min_chars = min_chars
        self._buffer = ""
        self._kept = 0  # characters of the buffer accepted as the answer
        self._seen: dict[str, int] = {}
        for text in said:
            start = 0
            for match in _SENTENCE_END.finditer(text):  # keyed as feed() keys a sentence
                if key := _key(text[start : match.end()]):
                    self._seen[key] = 1
                start = match.end()
        self._said = tuple(self._seen)
        self._in_code = False  # inside a fenced code block: lines there may repeat
        self._ended = False
        self.repeated = False

    @property
    def text(self) -> str:
        return self._buffer[: self._kept] if self.repeated else self._buffer

    @property
    def shown(self) -> str:
        """What may be streamed to a reader so far: ``text`` less an unfinished sentence
        that could still turn out to be a ``said`` one, so that one never goes out before
        it is recognised (a loop of the answer's own sentences is cut, not held back)."""
        if self.repeated or self._ended:
            return self.text
        tail = _key(self._buffer[self._kept :])
        if tail and not self._in_code and any(said.startswith(tail) for said in self._said):
            return self._buffer[: self._kept]
        return self._buffer

    def end(self) -> bool:
        """The answer is over (or cut by max_tokens): an unfinished last sentence that is
        the start of a ``said`` one, ``min_chars`` or more, counts as repeating it (the
        worked example must not get out by leaving off its full stop, nor half of it);
        nothing is held back any more. True when it did (``text`` then leaves it out)."""
        self._ended = True
        tail = _key(self._buffer[self._kept :])
        if self.repeated or self._in_code or len(tail) < self._min_chars:
            return False
        self.repeated = any(said.startswith(tail) for said in self._said)
        return self.repeated

    def feed(self, token: str) -> bool:
        """Add a token; True means the model has started repeating itself."""
        self._buffer += token
        while not self.repeated and (match := _SENTENCE_END.search(self._buffer, self._kept)):
            key = _key(self._buffer[self._kept : match.end()])
            if key.startswith(("```", "~~~")):
                self._in_code = not self._in_code
            if not self._in_code and not key.startswith("|") and self._repeats(key):
                self.repeated = True
            else:
                self._seen[key] = self._seen.get(key, 0) + 1
                self._kept = match.end()
        tail = self._buffer[self._kept :]
        if not self.repeated and not self._in_code and not tail.lstrip().startswith("|"):
            self.repeated = _ends_in_a_loop(tail)
        return self.repeated

    def _repeats(self, key: str) -> bool:
        seen = self._seen.get(key, 0)
        if len(key) >= self._min_chars:
            return seen >= 1
        # A short line (a heading, "Yes.") may come back once; code fences never count.
        return seen >= 2 and len(_LETTERS.findall(key)) >= 3 and not key.startswith("```")


def _key(sentence: str) -> str:
    """A sentence as compared: lower case, runs of whitespace as one space."""
    return " ".join(sentence.lower().split())


def _ends_in_a_loop(tail: str) -> bool:
    """Whether ``tail`` ends in a unit of at most ``MAX_PERIOD`` characters repeated over
    ``LOOP_SPAN`` characters (and at least three times)."""
    if len(tail) < LOOP_SPAN:
        return False
    for period in range(1, MAX_PERIOD + 1):
        span = max(LOOP_SPAN, 3 * period)
        if span > len(tail):
            break
        unit = tail[-period:]
        if not any(c.isalnum() for c in unit):
            continue  # spaces, rules, a table's "| --- |" row: layout, not a loop
        if tail[-span:] == (unit * (span // period + 1))[-span:]:
            return True
    return False
