"""What grounded ``/v1`` answers cited, remembered for their follow-ups.

``/v1`` is stateless: an OpenAI SDK sends the whole conversation with each question, and
the answers it sends back are text with ``[n]`` markers, nothing else. So each grounded
answer's sources are kept here, per user, under a digest of the question it answered and
its text (surrounding whitespace stripped): when a later request carries that exact
answer as its last, the follow-up gets what chat gives a stored conversation, the
passages of the documents the answer cited (``retrieval.followup.prefer_cited``).
An answer edited by the client, another user's, or one expired matches nothing, and the
request is answered as if nothing were remembered.

Only numbers and ids are kept, never text; rows expire after ``keep_days`` (pruned
whenever one is written, and never read once expired) and each user keeps the newest
``per_user`` answers.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from retrieval.db import Database

DAY_S = 86400.0
MAX_PER_USER = 1000  # answers remembered per user; the oldest give way


@dataclass(frozen=True)
class CitedSource:
    """The passage an answer cites as ``[number]``, and its document."""

    number: int
    chunk_id: int
    document_id: int


def answer_digest(question: str, answer: str) -> str:
    """The key of an answer as the client will send it back: the question it answered and
    its text, each stripped (a client may trim either; it rarely does more)."""
    text = f"{question.strip()}\x00{answer.strip()}"
    return hashlib.sha256(text.encode()).hexdigest()


class CitedAnswers:
    def __init__(self, db: Database, keep_days: float, per_user: int = MAX_PER_USER) -> None:
        self.db = db
        self.keep_s = keep_days * DAY_S
        self.per_user = per_user

    @property
    def enabled(self) -> bool:
        return self.keep_s > 0

    def remember(
        self,
        user_id: int,
        question: str,
        answer: str,
        cited: Iterable[CitedSource],
        *,
        now: float | None = None,
    ) -> bool:
        """Keep what ``answer`` (to ``question``) cites, for ``user_id``; nothing for an
        answer that cites nothing. Whether it was kept."""
        sources = [[s.number, s.chunk_id, s.document_id] for s in cited]
        if not self.enabled or not sources or not answer.strip():
            return False
        now = time.time() if now is None else now
        with self.db.write() as db:
            db.execute(
                "INSERT INTO v1_answer_citations (user_id, digest, citations, created_at)"
                " VALUES (?, ?, ?, ?)"
                " ON CONFLICT (user_id, digest) DO UPDATE SET"
                " citations = excluded.citations, created_at = excluded.created_at",
                [user_id, answer_digest(question, answer), json.dumps(sources), now],
            )
            db.execute("DELETE FROM v1_answer_citations WHERE created_at < ?", [now - self.keep_s])
            db.execute(
                "DELETE FROM v1_answer_citations WHERE user_id = ? AND digest NOT IN"
                " (SELECT digest FROM v1_answer_citations WHERE user_id = ?"
                " ORDER BY created_at DESC, digest LIMIT ?)",
                [user_id, user_id, self.per_user],
            )
        return True

    def cited(
        self, user_id: int, question: str, answer: str, *, now: float | None = None
    ) -> list[CitedSource]:
        """What ``user_id``'s answer ``answer`` (to ``question``) cited, by number; empty
        when it is not remembered (another's, edited, expired, or off)."""
        if not self.enabled:
            return []
        now = time.time() if now is None else now
        row = (
            self.db.read()
            .execute(
                "SELECT citations FROM v1_answer_citations"
                " WHERE user_id = ? AND digest = ? AND created_at >= ?",
                [user_id, answer_digest(question, answer), now - self.keep_s],
            )
            .fetchone()
        )
        if row is None:
            return []
        return [CitedSource(*map(int, source)) for source in json.loads(row["citations"])]
