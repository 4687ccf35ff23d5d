"""Small Jinja filters for the UI: sizes and times as people read them, whether an
answer is grounded at all, and an answer's citations as numbered on the page."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.chat.conversations import Message
from app.chat.rendering import UNGROUNDED_NOTE, shown_citations, ungrounded


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


def ungrounded_note(message: Message) -> str:
    """The note under an answer that cites no source at all ("" for any other message)."""
    return UNGROUNDED_NOTE if ungrounded(message) else ""
