"""Which sentences of a grounded answer no source supports.

A sentence is supported when the sources it cites (its ``[n]`` markers) contain most of
its content words and every number it states. A sentence without a marker is supported
only when one of the answer's sources contains it that way: ``attribute`` has already
given such a sentence its marker, so a bare sentence left over is one no source backs.
Sentences that say the documents do not cover something are never flagged: declining is
what a grounded answer should do when the sources fall short.

Small models often state a fact from one source and put another's number after it (a fact
of passage [2] marked [3]). :func:`recite` points such a sentence at a source that does
support it, when one can be found, before the check.

This is lexical, like the attribution it checks: a faithful paraphrase in other words can
be flagged and an invented sentence built from a source's words can pass. It is a marker
for a reader's eye ("check this"), not a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from llm.citations import MARKER, SENTENCE, content_words, is_table_scaffold
from llm.prompt import Source

_FENCED = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?(?:^[ \t]*\1[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_LIST_MARK = re.compile(r"\s*(?:\d{1,3}[.)]|[-*•])\s*")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_NAME = re.compile(r"\b[A-Z][^\W\d_]*")  # a capitalised word: a name, or a sentence's first
_MARKERS = re.compile(r"\[\d{1,3}\](?:\s*\[\d{1,3}\])*")  # one marker or a run of them
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
        if is_table_scaffold(answer, match.start()):
            continue  # a table's header row and rule are its labels
        claim = _Claim.of(sentence)
        if _LIST_MARK.fullmatch(claim.body):
            continue  # "1." of a numbered list: the item after it is judged on its own
        if len(claim.words) < MIN_WORDS and not claim.numbers:
            continue
        cited = claim.sources(sources)
        reason: Reason | None = None
        if not cited:
            reason = "no source"
        elif not claim.covered_by(cited):
            reason = "not in the cited source"
        if reason is not None:
            start = match.start() + (len(match.group(0)) - len(match.group(0).lstrip()))
            found.append(Unsupported(start, start + len(sentence), sentence, reason))
    return found


def recite(answer: str, sources: Mapping[int, Source], order: Sequence[int] = ()) -> str:
    """``answer`` with each cited sentence that its sources do not support re-pointed to
    a source that does: the first in ``order`` (then the other numbers) containing
    its content words, every number and every name it states. A sentence no single source
    supports keeps its markers (and is flagged by :func:`unsupported_sentences`)."""
    candidates = [*order, *(n for n in sources if n not in order)]
    pieces, cursor = [], 0
    for match in SENTENCE.finditer(answer):
        sentence = match.group(0)
        pieces.append(answer[cursor : match.start()])
        cursor = match.end()
        claim = _Claim.of(sentence)
        cited = claim.sources(sources)
        if cited and not declines(sentence) and not claim.covered_by(cited):
            names = {w.lower() for w in _NAME.findall(claim.body)} & claim.words
            supporting = (
                n
                for n in candidates
                if claim.covered_by([sources[n]]) and _names_in(names, sources[n])
            )
            if (number := next(supporting, None)) is not None:
                sentence = _MARKERS.sub(f"[{number}]", sentence)
        pieces.append(sentence)
    pieces.append(answer[cursor:])
    return "".join(pieces)


def declines(text: str) -> bool:
    """Whether the text says the documents do not answer (rather than answering)."""
    return _DECLINES.search(text) is not None


@dataclass(frozen=True)
class _Claim:
    """What one sentence of an answer states, as both checks read it."""

    cited: tuple[int, ...]  # the source numbers its markers name
    body: str  # the sentence without its markers
    words: set[str]  # content words
    numbers: set[str]

    @classmethod
    def of(cls, sentence: str) -> _Claim:
        body = MARKER.sub(" ", sentence)
        cited = tuple(int(m.group(1)) for m in MARKER.finditer(sentence))
        return cls(cited, body, content_words(body), set(_NUMBER.findall(body)))

    def sources(self, sources: Mapping[int, Source]) -> list[Source]:
        return [sources[n] for n in self.cited if n in sources]

    def covered_by(self, cited: Sequence[Source]) -> bool:
        """Whether ``cited`` hold every number and most content words the claim states."""
        text = " ".join(f"{s.title} {s.text}" for s in cited)
        if not self.numbers <= set(_NUMBER.findall(text)):  # whole: "15" is not in "150"
            return False
        if not self.words:
            return True
        known = content_words(text)
        covered = sum(1 for word in self.words if word in known or _stem_in(word, known))
        return covered >= MIN_COVERED * len(self.words)


def _names_in(names: set[str], source: Source) -> bool:
    """Whether every name is a word of the source: a sentence about Ethiopia is never
    pointed at a passage about Canada, however many other words they share."""
    return names <= content_words(f"{source.title} {source.text}")


def _stem_in(word: str, known: set[str]) -> bool:
    """A crude inflection match: "opens" ~ "open", "parked" ~ "parking" (5-letter prefix)."""
    if len(word) < 5:
        return False
    prefix = word[:5]
    return any(candidate.startswith(prefix) for candidate in known)
