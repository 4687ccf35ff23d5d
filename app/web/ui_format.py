"""Small Jinja filters for the UI: sizes and times as people read them, whether an
answer is grounded at all, and an answer's citations as numbered on the page."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.chat.records import Message
from app.chat.rendering import UNGROUNDED_NOTE, shown_citations, ungrounded
from retrieval.display import shown_line, shown_text


def filesize(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def isotime(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="seconds")


def shorttime(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


def shortdate(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%d %b %Y")


def register_filters(filters: dict[str, Any]) -> None:
    filters.update(filesize=filesize, isotime=isotime, shorttime=shorttime, shortdate=shortdate)
    filters.update(ungrounded_note=ungrounded_note, shown_citations=shown_citations)
    filters.update(copy_text=copy_text, plain_error=plain_error, plural=plural)
    # Text from outside (file paths, sync errors, comments) with controls made visible.
    filters.update(visible=shown_line, visible_text=shown_text)


def plural(count: int, word: str) -> str:
    """``1 passage``, ``2 passages``: a count with its noun."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# Messages of the parsing libraries as they reach a document's error, and what they mean.
_PLAIN_ERRORS = (
    ("stream has ended unexpectedly", "The PDF file is damaged or incomplete."),
    ("eof marker not found", "The PDF file is damaged or incomplete."),
    ("startxref", "The PDF file is damaged or incomplete."),
    ("not a readable pdf", "The file could not be read as a PDF: it may be damaged."),
    # Every Office, OpenDocument and EPUB file is a ZIP archive.
    ("file is not a zip file", "The file is damaged: its ZIP container cannot be read."),
    ("badzipfile", "The file is damaged: its ZIP container cannot be read."),
    ("malformed csv", "The CSV file is malformed: check its quotes and separators."),
    ("codec can't decode", "The file's text encoding could not be read."),
)


def plain_error(error: str | None) -> str:
    """A document's ingest error in plain words (the original is shown beside it when it
    differs); errors already written for people pass unchanged."""
    if not error:
        return ""
    lowered = error.casefold()
    return next((plain for known, plain in _PLAIN_ERRORS if known in lowered), error)


def copy_text(message: Message) -> str:
    """What an answer's Copy button copies: its text as written (Markdown), citation
    markers included, numbered as everywhere else."""
    return message.content.strip()


def ungrounded_note(message: Message) -> str:
    """The note under an answer that cites no source at all ("" for any other message)."""
    return UNGROUNDED_NOTE if ungrounded(message) else ""
