"""A conversation as a reader it was shared with sees it: the questions and answers as
written, but a citation of a document the reader may not open shows no title, passage or
link, only that it is "a document you cannot open". What the model was shown for each
answer (its sources' text, the query, the collections searched) is never shown to a reader.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace

from markupsafe import Markup

from app.chat.answering import POINTED
from app.chat.markdown import render_markdown
from app.chat.records import Citation, Message
from app.chat.stopping import STOPPED

HIDDEN_TITLE = "a document you cannot open"


def is_hidden(citation: Citation) -> bool:
    return citation.document_id == 0


def hidden(citation: Citation) -> Citation:
    """The citation with nothing left of its document but its number."""
    return Citation(citation.number, 0, 0, HIDDEN_TITLE, 0, 0, 0, "")


def redact(message: Message, openable: Collection[int]) -> Message:
    """``message`` with the citations of documents not in ``openable`` (ids) hidden and what
    the model was shown dropped. An answer that is only a quote of the passage it cites
    (``POINTED``: the model answered with a bare "[2]") is the passage itself: its quote
    is hidden with the citation."""
    citations = tuple(c if c.document_id in openable else hidden(c) for c in message.citations)
    content = message.content
    if (quoted := _POINTED.fullmatch(content)) is not None:
        number = int(quoted["number"])
        if any(is_hidden(c) and c.number == number for c in citations):
            content = POINTED_HIDDEN.format(number=number)
    return replace(message, content=content, citations=citations, context=None)


# The POINTED answer, its quote and number captured.
_POINTED = re.compile(
    re.escape(POINTED.split("{quote}")[0])
    + r"(?P<quote>.*)"
    + re.escape(POINTED.split("{quote}")[1].split("{number}")[0])
    + r"(?P<number>\d+)"
    + re.escape(POINTED.split("{number}")[1]),
    re.DOTALL,
)
POINTED_HIDDEN = (
    "The model answered only with a citation, of a passage in a document you cannot open. "
    "[{number}]"
)


def render_shared_answer(message: Message) -> Markup:
    """A redacted answer as sanitised HTML: a ``[n]`` of an openable document links to its
    passage (in the plain page viewer: the answer's own Previous/Next needs the
    conversation's owner), a hidden one stays plain text."""
    cite = {
        c.number: (c.url, f"{c.title}, page {c.page}")
        for c in message.citations
        if not is_hidden(c)
    }
    flagged = [
        (u.start, u.end, u.reason)
        for u in message.unsupported
        if message.content[u.start : u.end] == u.text
    ]
    return render_markdown(message.content, cite, stopped_marker=STOPPED, flagged=flagged)
