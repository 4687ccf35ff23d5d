"""Turning stored text into safe HTML: everything is escaped, citations become links."""

from __future__ import annotations

import re
from html import escape

from markupsafe import Markup

from app.conversations import Message
from llm.citations import MARKER


def render_answer(message: Message) -> Markup:
    """Escape the answer, then link each valid ``[n]`` to the cited passage."""
    by_number = {c.number: c for c in message.citations}
    escaped = escape(message.content)

    def link(match: re.Match[str]) -> str:
        citation = by_number.get(int(match.group(1)))
        if citation is None:
            return match.group(0)
        return (
            f'<a class="cite" href="{escape(citation.url)}" target="_blank" rel="noopener" '
            f'title="{escape(citation.title)}, page {citation.page}">[{citation.number}]</a>'
        )

    return Markup(MARKER.sub(link, escaped))  # noqa: S704 - built from escaped text only


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
