"""👍/👎 on answers, with an optional comment: one per user per answer (given again, it
replaces the earlier one); the admin's list of them, and that list as golden-set lines
(JSONL) that ``ragdesk eval --answers`` reads, so a bad answer becomes a test case."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Literal, get_args

from app.chat.records import Message
from app.chat.rendering import shown_citations
from llm.support import declines
from retrieval.db import Database

Rating = Literal["up", "down"]
RATINGS: tuple[str, ...] = get_args(Rating)
MAX_COMMENT_CHARS = 2000
_MARKER = re.compile(r"\s*\[\d{1,3}\]")  # a citation marker and the space before it


@dataclass(frozen=True)
class Feedback:
    message_id: int
    user_id: int
    rating: Rating
    comment: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class FeedbackEntry:
    """One feedback as the admin's list shows it: who gave it, on which answer, to what."""

    feedback: Feedback
    user_name: str
    question: str
    answer: Message


class AnswerFeedback:
    def __init__(self, db: Database):
        self.db = db

    def give(
        self, message_id: int, user_id: int, rating: Rating, comment: str | None = None
    ) -> Feedback:
        """Record (or change) ``user_id``'s feedback on an answer; ``comment`` None keeps
        the comment given before (none for a first feedback)."""
        if rating not in RATINGS:
            raise ValueError(f"rating must be one of {', '.join(RATINGS)}")
        text = None if comment is None else comment.strip()[:MAX_COMMENT_CHARS]
        now = time.time()
        # A comment left out keeps the one given before (a parameter only tested for NULL
        # has no type PostgreSQL can infer: the statement itself says which).
        new_comment = "" if text is None else " comment = excluded.comment,"
        with self.db.write() as db:
            db.execute(
                "INSERT INTO answer_feedback"  # noqa: S608 - fixed fragments
                " (message_id, user_id, rating, comment, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (message_id, user_id) DO UPDATE SET"
                f" rating = excluded.rating,{new_comment}"
                " updated_at = excluded.updated_at",
                [message_id, user_id, rating, text or "", now, now],
            )
        found = self.of(message_id, user_id)
        assert found is not None
        return found

    def withdraw(self, message_id: int, user_id: int) -> bool:
        """Take back ``user_id``'s feedback on an answer (a pressed thumb pressed again);
        whether there was any."""
        with self.db.write() as db:
            cursor = db.execute(
                "DELETE FROM answer_feedback WHERE message_id = ? AND user_id = ?",
                [message_id, user_id],
            )
        return cursor.rowcount > 0

    def of(self, message_id: int, user_id: int) -> Feedback | None:
        row = (
            self.db.read()
            .execute(
                "SELECT message_id, user_id, rating, comment, created_at, updated_at"
                " FROM answer_feedback WHERE message_id = ? AND user_id = ?",
                [message_id, user_id],
            )
            .fetchone()
        )
        return Feedback(*row) if row else None

    def listing(self, rating: Rating | None = None, limit: int = 500) -> list[FeedbackEntry]:
        """The newest feedback first (``rating``: only that kind), with its answer and the
        question the answer replied to."""
        where, params = ("", []) if rating is None else (" WHERE f.rating = ?", [rating])
        rows = self.db.read().query(
            "SELECT f.message_id AS f_message_id, f.user_id AS f_user_id,"  # noqa: S608
            " f.rating AS f_rating, f.comment AS f_comment, f.created_at AS f_created_at,"
            " f.updated_at AS f_updated_at, u.name AS f_user_name, q.content AS f_question,"
            " a.*,"
            " (SELECT COUNT(*) FROM messages v WHERE v.reply_to = a.reply_to AND v.id <= a.id)"
            " AS version,"
            " (SELECT COUNT(*) FROM messages v WHERE v.reply_to = a.reply_to) AS versions"
            " FROM answer_feedback f"
            " JOIN users u ON u.id = f.user_id"
            " JOIN messages a ON a.id = f.message_id"
            " LEFT JOIN messages q ON q.id = a.reply_to"
            f"{where} ORDER BY f.updated_at DESC LIMIT ?",
            [*params, limit],
        )
        return [_entry(row) for row in rows]


def _entry(row: dict[str, Any]) -> FeedbackEntry:
    feedback = Feedback(
        row["f_message_id"],
        row["f_user_id"],
        row["f_rating"],
        row["f_comment"],
        row["f_created_at"],
        row["f_updated_at"],
    )
    answer = Message.from_row({k: v for k, v in row.items() if not k.startswith("f_")})
    return FeedbackEntry(feedback, row["f_user_name"], row["f_question"] or "", answer)


def plain_answer(answer: Message) -> str:
    """The answer's text without its citation markers (a reference to compare with)."""
    return _MARKER.sub("", answer.content).strip()


def golden_line(entry: FeedbackEntry) -> dict[str, Any]:
    """One golden-set line (``retrieval.evaluation.load_golden``) from a feedback.

    👍: ``question``, ``answer`` (the answer, without markers: the reference a new answer
    must contain) and ``document`` (the first source it cites), unless the answer declined
    to answer, when the line is the question alone (the loader's off-topic question: a
    good answer declines). 👎: the question alone, with the comment and the rejected
    answer beside it: the loader reads it as off-topic (the answer should decline) until
    someone adds the right ``answer`` (and ``document``). ``rating``, ``comment``,
    ``rejected_answer`` and ``answer_id`` are for people: the loader ignores them."""
    line: dict[str, Any] = {"question": entry.question}
    text = plain_answer(entry.answer)
    if entry.feedback.rating == "up" and text and not declines(text):
        line["answer"] = text
        cited = shown_citations(entry.answer)
        if cited:
            line["document"] = cited[0].title
    line["rating"] = entry.feedback.rating
    if entry.feedback.comment:
        line["comment"] = entry.feedback.comment
    if entry.feedback.rating == "down":
        line["rejected_answer"] = text
    line["answer_id"] = entry.answer.id
    return line


def golden_jsonl(entries: list[FeedbackEntry]) -> str:
    """Golden-set lines, one per feedback on a question that is still there."""
    lines = [golden_line(e) for e in entries if e.question.strip()]
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
