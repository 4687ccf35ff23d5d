"""Turning stored text into safe HTML: answers are sanitised markdown, the rest is escaped."""

from __future__ import annotations

import itertools
import re
from html import escape

from markupsafe import Markup

from app.chat.answering import NO_ANSWER
from app.chat.markdown import render_markdown
from app.chat.records import Citation, Message
from app.chat.stopping import STOPPED
from llm.citations import cited_numbers
from llm.prompt import TABLE_ROW
from llm.support import declines

UNGROUNDED_NOTE = "No source cited — this answer is not grounded in the documents."


def shown_citations(message: Message) -> tuple[Citation, ...]:
    """An answer's citations in the order its text first cites them (those its text never
    cites follow, as stored), each with the number it had in the prompt.

    A source's number is fixed when it enters the prompt: the reading line, the streamed
    text, this page, the Sources pane, the export, ``/api`` and ``/v1`` all show it, so
    "[9]" in a later turn stays "[9]" (earlier turns' sources keep 1..8)."""
    by_number = {c.number: c for c in message.citations}
    order = cited_numbers(message.content, by_number)
    ordered = [by_number[n] for n in order]
    return tuple(ordered + [c for c in message.citations if c.number not in order])


def render_answer(message: Message) -> Markup:
    """The answer's markdown as sanitised HTML, each valid ``[n]`` linked to its passage
    and each sentence no cited passage supports marked "no source"."""
    cite = {c.number: (c.url_in(message.id), f"{c.title}, {c.where}") for c in message.citations}
    flagged = [
        (u.start, u.end, u.reason)
        for u in message.unsupported
        if message.content[u.start : u.end] == u.text  # offsets that still fit the text
    ]
    return render_markdown(
        message.content,
        cite,
        stopped_marker=STOPPED,
        flagged=flagged,
    )


def render_streaming(text: str) -> Markup:
    """An answer still being written, as sanitised HTML: its Markdown as far as it goes
    (an unclosed ``**`` shows as written until it closes); its ``[n]`` are linked once
    the answer is done and its citations are known."""
    return render_markdown(text)


def ungrounded(message: Message) -> bool:
    """Whether an answer cites nothing at all while answering: not a decline ("could not
    find anything", "the documents do not cover"), not a stopped or empty answer."""
    if message.role != "assistant" or message.citations:
        return False
    text = message.content.strip()
    if not text or text.endswith(STOPPED) or text in (NO_ANSWER, "(no answer)"):
        return False
    return not declines(text)


def highlight_passage(page_text: str, start: int | None, end: int | None) -> Markup:
    """The page text, escaped, with ``[start, end)`` marked (the first piece of the mark is
    ``<mark id="passage">``, scrolled to); a table becomes an HTML table: Markdown rows
    (``| a | b |``, one block each, blank lines between) as every parser writes tables
    now, and runs of two or more lines of the same number of " | "-separated cells (a
    table as documents ingested before were stored)."""
    if start is None or end is None or not 0 <= start < end <= len(page_text):
        start = end = -1
    marks = _Marks(start, end)
    out: list[str] = []
    lines = page_text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    i = prose = 0  # lines[prose:i] are text not yet written out

    def flush(upto: int) -> None:  # the text lines before a table, or the end, in one piece
        if upto > prose:
            out.append(marks.wrap(page_text[offsets[prose] : offsets[upto] - 1], offsets[prose]))
            if upto < len(lines):
                out.append("\n")

    while i < len(lines):
        run = _markdown_rows(lines, i)
        if run > i:  # a table: each cell escaped and marked on its own
            flush(i)
            rows = [
                _row(lines[n], offsets[n], marks)
                for n in range(i, run)
                if TABLE_ROW.fullmatch(lines[n])
            ]
            out.append(f'<table class="page-table">{"".join(rows)}</table>')
            i = prose = run
            continue
        width = _cells(lines[i])
        run = i
        while run < len(lines) and width > 1 and _cells(lines[run]) == width:
            run += 1
        if run - i >= 2:  # a table as stored before: " | " between cells
            flush(i)
            rows = []
            for n in range(i, run):
                cells, at = [], offsets[n]
                for cell in lines[n].split(TABLE_CELL):
                    cells.append(f"<td>{marks.wrap(cell, at)}</td>")
                    at += len(cell) + len(TABLE_CELL)
                rows.append(f"<tr>{''.join(cells)}</tr>")
            out.append(f'<table class="page-table">{"".join(rows)}</table>')
            i = prose = run
            continue
        i += 1
    flush(len(lines))
    return Markup("".join(out))  # noqa: S704 - every piece of text is escaped


TABLE_CELL = " | "
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def _markdown_rows(lines: list[str], i: int) -> int:
    """The end of the run of Markdown rows starting at line ``i`` (``i`` if none there):
    rows with single blank lines between them, as a table's blocks are joined."""
    run = i
    while run < len(lines) and TABLE_ROW.fullmatch(lines[run]):
        run += 1
        if run + 1 < len(lines) and not lines[run] and TABLE_ROW.fullmatch(lines[run + 1]):
            run += 1
    return run


def _row(line: str, at: int, marks: _Marks) -> str:
    """One Markdown row as ``<tr>``: the text between its pipes, each cell marked."""
    pipes = [m.start() for m in _UNESCAPED_PIPE.finditer(line)]
    cells = [
        f"<td>{marks.wrap(line[left + 1 : right], at + left + 1)}</td>"
        for left, right in itertools.pairwise(pipes)
    ]
    return f"<tr>{''.join(cells)}</tr>"


def _cells(line: str) -> int:
    return line.count(TABLE_CELL) + 1 if TABLE_CELL in line else 0


class _Marks:
    """Escapes pieces of the page and marks what falls inside ``[start, end)``."""

    def __init__(self, start: int, end: int):
        self.start, self.end, self.first = start, end, True

    def wrap(self, text: str, at: int) -> str:
        lo, hi = max(self.start, at), min(self.end, at + len(text))
        if lo >= hi:
            return str(escape(text))
        ident = ' id="passage"' if self.first else ""
        self.first = False
        return (
            str(escape(text[: lo - at]))
            + f"<mark{ident}>"
            + str(escape(text[lo - at : hi - at]))
            + "</mark>"
            + str(escape(text[hi - at :]))
        )
