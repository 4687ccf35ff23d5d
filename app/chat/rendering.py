"""Turning stored text into safe HTML: answers are sanitised markdown, the rest is escaped."""

from __future__ import annotations

from html import escape

from markupsafe import Markup

from app.chat.conversations import Message
from app.chat.markdown import render_markdown
from app.chat.stopping import STOPPED


def render_answer(message: Message) -> Markup:
    """The answer's markdown as sanitised HTML, each valid ``[n]`` linked to its passage."""
    cite = {
        c.number: (c.url_in(message.id), f"{c.title}, page {c.page}") for c in message.citations
    }
    return render_markdown(message.content, cite, stopped_marker=STOPPED)


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
