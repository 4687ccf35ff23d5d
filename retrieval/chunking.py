"""Structure-aware, token-bounded chunking with overlap.

A chunk never crosses a page, a heading starts a new chunk, paragraphs are packed
whole while they fit, and a paragraph too long for one chunk is split at sentences
(then words). Every chunk is an exact slice of its page text, so citations can point
at character offsets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from retrieval.types import PAGE_BLOCK_SEPARATOR, ChunkSpan, ParsedPage

TokenCounter = Callable[[Sequence[str]], list[int]]
"""Token counts of several texts at once (batched: real tokenizers are faster that way)."""

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    tokens: int
    is_heading: bool


def chunk_page(
    page: ParsedPage,
    *,
    max_tokens: int,
    overlap_tokens: int,
    count_tokens: TokenCounter,
) -> list[ChunkSpan]:
    text = page.text
    units = _units(page, text, max_tokens, count_tokens)
    return _pack(units, text, page.number, max_tokens, min(overlap_tokens, max_tokens // 2))


def _units(page: ParsedPage, text: str, max_tokens: int, count_tokens: TokenCounter) -> list[_Unit]:
    spans: list[tuple[int, int, bool]] = []
    offset = 0
    for block in page.blocks:
        spans.append((offset, offset + len(block.text), block.is_heading))
        offset += len(block.text) + len(PAGE_BLOCK_SEPARATOR)
    counts = count_tokens([text[start:end] for start, end, _ in spans])
    units: list[_Unit] = []
    for (start, end, is_heading), tokens in zip(spans, counts, strict=True):
        unit = _Unit(start, end, tokens, is_heading)
        units.extend(
            [unit] if tokens <= max_tokens else _split(unit, text, max_tokens, count_tokens)
        )
    return units


def _split(unit: _Unit, text: str, max_tokens: int, count_tokens: TokenCounter) -> list[_Unit]:
    """Split an oversize block at sentence ends, and oversize sentences into word windows."""
    pieces = _pieces(_SENTENCE_END, text, unit.start, unit.end, as_separators=True)
    counts = count_tokens([text[start:end] for start, end in pieces])
    result: list[_Unit] = []
    for (start, end), tokens in zip(pieces, counts, strict=True):
        if tokens <= max_tokens:
            result.append(_Unit(start, end, tokens, unit.is_heading))
            continue
        words = _pieces(_WORD, text, start, end, as_separators=False)
        per_word = tokens / max(len(words), 1)
        window = max(1, int(max_tokens / per_word))
        for i in range(0, len(words), window):
            group = words[i : i + window]
            estimate = max(1, round(per_word * len(group)))
            result.append(_Unit(group[0][0], group[-1][1], estimate, unit.is_heading))
    return result


def _pieces(
    pattern: re.Pattern[str], text: str, start: int, end: int, *, as_separators: bool
) -> list[tuple[int, int]]:
    if not as_separators:
        return [(m.start(), m.end()) for m in pattern.finditer(text, start, end)]
    pieces, cursor = [], start
    for match in pattern.finditer(text, start, end):
        if match.start() > cursor:
            pieces.append((cursor, match.start()))
        cursor = match.end()
    if cursor < end:
        pieces.append((cursor, end))
    return pieces


def _pack(
    units: list[_Unit], text: str, page: int, max_tokens: int, overlap: int
) -> list[ChunkSpan]:
    chunks: list[ChunkSpan] = []
    current: list[_Unit] = []
    heading: str | None = None
    chunk_heading: str | None = None

    def emit() -> None:
        chunks.append(
            ChunkSpan(
                page=page,
                start=current[0].start,
                end=current[-1].end,
                text=text[current[0].start : current[-1].end],
                heading=chunk_heading,
            )
        )

    for unit in units:
        has_body = any(not u.is_heading for u in current)
        if unit.is_heading and has_body:
            emit()
            current = []
        elif current and sum(u.tokens for u in current) + unit.tokens > max_tokens:
            if has_body:
                emit()
            current = _overlap_tail(current, overlap, max_tokens - unit.tokens)
        if unit.is_heading:
            heading = text[unit.start : unit.end]
        if not current:
            chunk_heading = heading
        current.append(unit)
    if current:
        emit()
    return chunks


def _overlap_tail(units: list[_Unit], overlap: int, room: int) -> list[_Unit]:
    """The trailing units of the previous chunk that fit in the overlap budget."""
    tail: list[_Unit] = []
    total = 0
    for unit in reversed(units):
        if unit.is_heading or total + unit.tokens > min(overlap, room):
            break
        tail.insert(0, unit)
        total += unit.tokens
    return tail
