"""Citation markers: find the ``[n]`` a model wrote, and attribute sentences it left bare.

Small models often answer correctly from a source but forget the marker. A sentence
without one is attributed to the source sharing the most content words with it, if
that overlap is substantial, so every grounded claim ends up with a checkable link.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from llm.prompt import TABLE_ROW, Source

MARKER = re.compile(r"\[(\d{1,3})\]")
# A sentence ends at . ! ? before a space or the end, or at a line break: "22.5 hours" and
# "e.g. this" stay whole (a marker must never land inside a number), and markers right
# after the full stop ("... in 1994. [2]") belong to the sentence before them.
SENTENCE = re.compile(r"[^\n]+?(?:[.!?]+(?:\s*\[\d{1,3}\])*(?=\s|$)|(?=\n)|$)")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "them",
        "there",
        "these",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)
MIN_SHARED_WORDS = 2
MIN_SHARED_FRACTION = 0.5


def cited_numbers(text: str, valid: Collection[int]) -> list[int]:
    """The ``valid`` source numbers the text cites, in order of first appearance."""
    seen: list[int] = []
    for match in MARKER.finditer(text):
        number = int(match.group(1))
        if number in valid and number not in seen:
            seen.append(number)
    return seen


def attribute(text: str, sources: Sequence[Source]) -> str:
    """Append ``[n]`` to each sentence that has no marker but clearly comes from source n
    (a table row's inside its last cell; never to a table's header row or rule), after
    moving markers written past a row's last pipe into that row's last cell."""
    text = _ROW_THEN_MARKERS.sub(lambda m: f"{m[1]} {m[3].strip()} {m[2]}", text)
    if not sources:
        return text
    source_words = [content_words(s.text) | content_words(s.title) for s in sources]
    pieces: list[str] = []
    cursor = 0
    for match in SENTENCE.finditer(text):
        sentence = match.group(0)
        pieces.append(text[cursor : match.start()])
        cursor = match.end()
        if MARKER.search(sentence) or is_table_scaffold(text, match.start()):
            pieces.append(sentence)
            continue
        number = _best_source(content_words(sentence), source_words, sources)
        pieces.append(_with_marker(sentence, number) if number else sentence)
    pieces.append(text[cursor:])
    return "".join(pieces)


def content_words(text: str) -> set[str]:
    """The lower-cased words of ``text`` that carry content (stopwords left out)."""
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOPWORDS}


def _best_source(
    words: set[str], source_words: list[set[str]], sources: Sequence[Source]
) -> int | None:
    if not words:
        return None
    overlaps = [len(words & candidate) for candidate in source_words]
    best = max(range(len(sources)), key=lambda i: overlaps[i])
    shared = overlaps[best]
    if shared >= MIN_SHARED_WORDS and shared >= MIN_SHARED_FRACTION * len(words):
        return sources[best].number
    return None


def _with_marker(sentence: str, number: int) -> str:
    body = sentence.rstrip()
    trailing = sentence[len(body) :]
    if TABLE_ROW.fullmatch(body.strip()):  # inside the last cell: a cell more breaks the table
        cut = body.rstrip("| \t")
        return f"{cut} [{number}]{body[len(cut) :]}{trailing}"
    stripped = body.rstrip(".!?")
    return f"{stripped} [{number}]{body[len(stripped) :]}{trailing}"


# A table row with markers after its last pipe ("| Gold | £500 | [1]"): an extra cell that
# breaks the table; the markers belong in the last cell.
_ROW_THEN_MARKERS = re.compile(
    r"(?m)^([ \t]*\|.*?)[ \t]*(\|)[ \t]*((?:\[\d{1,3}\][ \t]*)+?)[ \t]*$"
)
# The rule under a Markdown table's header ("|---|:---:|").
_TABLE_RULE = re.compile(r"\|?\s*:?-{1,}:?\s*(?:\|\s*:?-{1,}:?\s*)*\|?")


def is_table_scaffold(text: str, at: int) -> bool:
    """Whether the line of ``text`` at offset ``at`` is a Markdown table's header row or the
    rule under it: labels, not claims. A marker added there would add a cell and break the
    table, and there is nothing in it to check against a source."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = text[start : len(text) if end == -1 else end].strip()
    if _TABLE_RULE.fullmatch(line) and "-" in line and "|" in line:
        return True
    if not TABLE_ROW.fullmatch(line) or end == -1:
        return False
    following = text.find("\n", end + 1)
    below = text[end + 1 : len(text) if following == -1 else following].strip()
    return bool(_TABLE_RULE.fullmatch(below)) and "-" in below
