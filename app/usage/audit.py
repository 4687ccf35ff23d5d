"""Who read question texts, and when: the content gaps show staff's own words, so every
view (page, partial or API) is recorded, like the answer audit (``app.auth.audit``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.usage.events import current_asker
from app.usage.period import Period
from retrieval.db import Database


@dataclass(frozen=True)
class QuestionView:
    viewed_at: float
    user_id: int | None
    key_id: int | None
    what: str
    period_from: str
    period_to: str
    questions: int


class QuestionViews:
    def __init__(self, db: Database):
        self.db = db

    def record(self, what: str, period: Period, questions: int) -> None:
        """Record that this request's caller was shown ``questions`` question texts."""
        asker = current_asker()
        with self.db.write() as db:
            db.conn.execute(
                "INSERT INTO usage_question_views (viewed_at, user_id, key_id, what,"
                " period_from, period_to, questions) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [time.time(), asker.user_id, asker.key_id, what, period.first.isoformat(),
                 period.last.isoformat(), questions],
            )  # fmt: skip

    def recent(self, limit: int = 100) -> list[QuestionView]:
        rows = self.db.read().execute(
            "SELECT viewed_at, user_id, key_id, what, period_from, period_to, questions"
            " FROM usage_question_views ORDER BY id DESC LIMIT ?",
            [limit],
        )
        return [QuestionView(*row) for row in rows]
