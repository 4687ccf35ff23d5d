"""Turning stored text into safe HTML: answers are sanitised markdown, the rest is escaped."""

from __future__ import annotations

from dataclasses import replace
from html import escape

from markupsafe import Markup

from app.chat.answering import NO_ANSWER
from app.chat.conversations import Citation, Message
from app.chat.markdown import render_markdown
from app.chat.stopping import STOPPED
from llm.citations import cited_numbers
from llm.support import declines

UNGROUNDED_NOTE = "No source cited — this answer is not grounded in the documents."


def shown_citations(message: Message) -> tuple[Citation, ...]:
    """An answer's citations as its reader sees them: numbered 1..n in the order its text
    first cites them (those its text never cites follow, as stored).

    The stored numbers are the prompt's source numbers, which run on across the turns of a
    conversation ("[9]" and "[5]" in an answer with two sources); the text, the sources
    list and the viewer's "Citation k of N" all use these instead."""
    by_number = {c.number: c for c in message.citations}
    order = cited_numbers(message.content, by_number)
    ordered = [by_number[n] for n in order]
    ordered += [c for c in message.citations if c.number not in order]
    return tuple(replace(c, number=shown) for shown, c in enumerate(ordered, start=1))


def shown_numbers(message: Message) -> dict[int, int]:
    """The number each stored citation number is shown as (see :func:`shown_citations`)."""
    by_number = {c.number: c for c in message.citations}
    order = cited_numbers(message.content, by_number)
    order += [c.number for c in message.citations if c.number not in order]
    return {stored: shown for shown, stored in enumerate(order, start=1)}


def render_answer(message: Message) -> Markup:
    """The answer's markdown as sanitised HTML, each valid ``[n]`` linked to its passage
    (and shown with its number in :func:`shown_citations`) and each sentence no cited
    passage supports marked "no source"."""
    cite = {
        c.number: (c.url_in(message.id), f"{c.title}, page {c.page}") for c in message.citations
    }
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
        labels=shown_numbers(message),
    )


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
    """The page text, escaped, with ``[start, end)`` wrapped in ``<mark id="passage">``."""
    if start is None or end is None or not 0 <= start < end <= len(page_text):
        return Markup(escape(page_text))  # noqa: S704
    return Markup(  # noqa: S704 - every piece is escaped
        escape(page_text[:start])
        + '<mark id="passage">'
        + escape(page_text[start:end])
        + "</mark>"
        + escape(page_text[end:])
    )
