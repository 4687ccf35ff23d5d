"""Which sentences of a grounded answer no source supports.

A sentence is supported when the sources it cites (its ``[n]`` markers) contain most of
its content words and every number it states. A sentence without a marker is supported
only when one of the answer's sources contains it that way: ``attribute`` has already
given such a sentence its marker, so a bare sentence left over is one no source backs.
Sentences that say the documents do not cover something are never flagged: declining is
what a grounded answer should do when the sources fall short.

This is lexical, like the attribution it checks: a faithful paraphrase in other words can
be flagged and an invented sentence built from a source's words can pass. It is a marker
for a reader's eye ("check this"), not a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from llm.citations import MARKER, SENTENCE, content_words
from llm.prompt import Source

_FENCED = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?(?:^[ \t]*\1[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_LIST_MARK = re.compile(r"\s*(?:\d{1,3}[.)]|[-*•])\s*")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_DECLINES = re.compile(
    r"\b(?:(?:documents?|sources?|passages?|context)\b[^.\n]{0,40}?\b(?:do(?:es)? not|don't|"
    r"doesn't|cannot|can't)\b|not (?:in|covered|mentioned|stated|found|given|provided) (?:in|by) "
    r"the (?:documents?|sources?|passages?)|could not find anything|couldn't find anything)",
    re.IGNORECASE,
)
MIN_WORDS = 3  # shorter sentences ("Yes.", "In 1972 [2].") carry too little to judge
MIN_COVERED = 0.6  # share of a sentence's content words its cited sources must contain

Reason = Literal["no source", "not in the cited source"]


@dataclass(frozen=True)
class Unsupported:
    start: int  # character offsets of the sentence in the answer
    end: int
    text: str
    reason: Reason


def unsupported_sentences(answer: str, sources: Mapping[int, Source]) -> list[Unsupported]:
    """The sentences of ``answer`` that the ``sources`` (by number) do not support."""
    found = []
    code = [m.span() for m in _FENCED.finditer(answer)]
    for match in SENTENCE.finditer(answer):
        sentence = match.group(0).strip()
        if not sentence or declines(sentence):
            continue
        if any(start <= match.start() < end for start, end in code):
            continue  # code is shown, not claimed
        body = MARKER.sub(" ", sentence)
        if _LIST_MARK.fullmatch(body):
            continue  # "1." of a numbered list: the item after it is judged on its own
        words = content_words(body)
        numbers = set(_NUMBER.findall(body))
        if len(words) < MIN_WORDS and not numbers:
            continue
        cited = [sources[n] for n in _cited(sentence) if n in sources]
        reason: Reason | None = None
        if not cited:
            reason = "no source"
        elif not _covered(words, numbers, cited):
            reason = "not in the cited source"
        if reason is not None:
            start = match.start() + (len(match.group(0)) - len(match.group(0).lstrip()))
            found.append(Unsupported(start, start + len(sentence), sentence, reason))
    return found


def declines(text: str) -> bool:
    """Whether the text says the documents do not answer (rather than answering)."""
    return _DECLINES.search(text) is not None


def _cited(sentence: str) -> list[int]:
    return [int(m.group(1)) for m in MARKER.finditer(sentence)]


def _covered(words: set[str], numbers: set[str], cited: list[Source]) -> bool:
    text = " ".join(f"{s.title} {s.text}" for s in cited)
    if not numbers <= set(_NUMBER.findall(text)):  # whole numbers: "15" is not in "150"
        return False
    if not words:
        return True
    known = content_words(text)
    covered = sum(1 for word in words if word in known or _stem_in(word, known))
    return covered >= MIN_COVERED * len(words)


def _stem_in(word: str, known: set[str]) -> bool:
    """A crude inflection match: "opens" ~ "open", "parked" ~ "parking" (5-letter prefix)."""
    if len(word) < 5:
        return False
    prefix = word[:5]
    return any(candidate.startswith(prefix) for candidate in known)
