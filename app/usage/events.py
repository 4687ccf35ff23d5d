"""Recording one usage event per finished answer, cheaply and never at the answer's cost.

Who asked and through which door are read when the answer starts (in the request), the
rest when it ends; the row and its rollups are written in one short transaction, in a
worker thread. A failure is logged and forgotten: analytics never fail an answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from app.auth.scope import current_access
from app.chat.answering import NO_ANSWER, NOT_STATED, NOTHING_FOUND, WITHHELD
from app.chat.finished import FinishedAnswer, FinishedListener
from app.chat.stopping import STOPPED
from app.errors import is_store_unavailable
from app.usage.gaps import remember_unanswered
from app.usage.rollups import EventFacts, merge_into, tally_events
from llm.support import declines
from retrieval.db import Database
from retrieval.embedder import Embedder
from retrieval.sql import RawConnection

log = logging.getLogger(__name__)

Outcome = Literal["answered", "declined", "withheld", "failed", "stopped"]
Channel = Literal["web", "api", "v1", "mcp"]
CHANNELS: tuple[Channel, ...] = ("web", "api", "v1", "mcp")

_channel: ContextVar[Channel | None] = ContextVar("ragdesk_usage_channel", default=None)


def set_channel(channel: Channel) -> None:
    """Name the door of this request's answers (grounded ``/v1`` says "v1", the MCP
    server "mcp"); unnamed, a key's request is "api" and a session's "web"."""
    _channel.set(channel)


@contextmanager
def channel(name: Channel) -> Iterator[None]:
    token = _channel.set(name)
    try:
        yield
    finally:
        _channel.reset(token)


def outcome_of(
    answer: str | None, *, failed: bool = False, stopped: bool = False, cited: bool = False
) -> Outcome:
    """How an answer ended, read from what was stored or sent: ``withheld`` when the
    answer check or the support check kept it back, ``declined`` when nothing was found or
    it cites nothing and says the documents do not answer ("… cannot be restored … [1]"
    is an answer), ``failed`` when no usable answer."""
    if failed or answer is None or answer == NO_ANSWER:
        return "failed"
    if answer in (WITHHELD, NOT_STATED):
        return "withheld"
    if stopped or answer.endswith(STOPPED):
        return "stopped"
    if answer == NOTHING_FOUND or (not cited and declines(answer)):
        return "declined"
    return "answered"


@dataclass(frozen=True)
class Asker:
    user_id: int | None
    key_id: int | None
    channel: Channel


def current_asker() -> Asker:
    """Who is asking in this request, and by which door."""
    access = current_access()
    principal = access.principal if access is not None else None
    key_id = principal.key_id if principal is not None else None
    chosen = _channel.get() or ("web" if principal is not None and key_id is None else "api")
    return Asker(principal.user.id if principal else None, key_id, chosen)


def day_of(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


class UsageRecorder:
    """Writes usage events and their rollups; with an ``embedder``, also the vector of
    each unanswered question, for the content gaps (``app.usage.gaps``)."""

    def __init__(self, db: Database, embedder: Embedder | None = None):
        self.db = db
        self.embedder = embedder

    def listener(self) -> FinishedListener:
        """For the chat service: called in the request, it captures the asker."""
        asker = current_asker()
        return lambda finished: self.record(asker, finished)

    def record(self, asker: Asker, finished: FinishedAnswer, at: float | None = None) -> None:
        """Store the event; logs and returns on any failure (never raises)."""
        try:
            outcome = self._write(asker, finished, time.time() if at is None else at)
            if outcome in ("declined", "withheld") and self.embedder is not None:
                remember_unanswered(self.db, self.embedder, finished.question)
        except Exception as exc:
            if is_store_unavailable(exc):  # the database is away: said once, elsewhere
                log.warning("could not record a usage event: %s", exc)
            else:
                log.exception("could not record a usage event")

    def _write(self, asker: Asker, finished: FinishedAnswer, at: float) -> Outcome:
        outcome = outcome_of(
            finished.answer, failed=finished.failed, stopped=finished.stopped, cited=finished.cited
        )
        usage = finished.usage
        with self.db.write() as db:
            conn = db.conn
            groups = _groups_of(conn, asker.user_id)
            collections = _collections_of(conn, finished.document_ids)
            facts = EventFacts(
                day=day_of(at),
                user_id=asker.user_id,
                key_id=asker.key_id,
                groups=groups,
                collections=collections,
                model=finished.model,
                channel=asker.channel,
                outcome=outcome,
                ttft_ms=None if finished.ttft_s is None else round(finished.ttft_s * 1000),
                total_ms=round(finished.total_s * 1000),
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
            )
            conn.execute(
                "INSERT INTO usage_events (at, day, user_id, key_id, groups, collections,"
                " model, channel, outcome, ttft_ms, total_ms, prompt_tokens,"
                " completion_tokens, message_id, question)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [at, facts.day, facts.user_id, facts.key_id, _ids(groups), _ids(collections),
                 facts.model, facts.channel, outcome, facts.ttft_ms, facts.total_ms,
                 facts.prompt_tokens, facts.completion_tokens, finished.message_id,
                 finished.question],
            )  # fmt: skip
            merge_into(conn, tally_events([facts]))
        return outcome


def _groups_of(conn: RawConnection, user_id: int | None) -> tuple[int, ...]:
    if user_id is None:
        return ()
    rows = conn.execute(
        "SELECT group_id FROM group_members WHERE user_id = ? ORDER BY group_id", [user_id]
    )
    return tuple(int(row[0]) for row in rows)


def _collections_of(conn: RawConnection, document_ids: tuple[int, ...]) -> tuple[int, ...]:
    if not document_ids:
        return ()
    marks = ", ".join("?" for _ in document_ids)
    rows = conn.execute(
        f"SELECT DISTINCT collection_id FROM documents WHERE id IN ({marks})"  # noqa: S608
        " ORDER BY collection_id",
        list(document_ids),
    )
    return tuple(int(row[0]) for row in rows)


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)
