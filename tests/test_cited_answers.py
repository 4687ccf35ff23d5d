"""What grounded ``/v1`` answers cited, kept per user under a digest of question and text:
found again only by the same user with the same text, expired, capped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.chat.cited_answers import DAY_S, CitedAnswers, CitedSource, answer_digest
from app.migrations import open_database
from retrieval.db import Database
from tests.conftest import fake_settings

QUESTION = "Which is Norway's only active volcano?"
ANSWER = "Hekla is one [2]."
CITED = [CitedSource(2, 11, 5)]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    """The app's database (PostgreSQL under ``RAGDESK_TEST_STORE=postgresql``), two users."""
    database = open_database(fake_settings(tmp_path))
    with database.write() as session:
        for name in ("ann", "bob"):
            session.execute(
                "INSERT INTO users (name, role, password_hash, created_at) VALUES (?, ?, ?, ?)",
                [name, "staff", "x", time.time()],
            )
    try:
        yield database
    finally:
        database.close()


def user_id(db: Database, name: str) -> int:
    return int(db.read().execute("SELECT id FROM users WHERE name = ?", [name]).fetchone()["id"])


def rows(db: Database) -> int:
    return int(db.read().execute("SELECT COUNT(*) AS n FROM v1_answer_citations").fetchone()["n"])


def test_an_answer_is_found_again_by_its_user_and_its_text_only(db: Database) -> None:
    answers = CitedAnswers(db, keep_days=7)
    ann, bob = user_id(db, "ann"), user_id(db, "bob")
    assert answers.remember(ann, QUESTION, ANSWER, CITED)
    assert answers.cited(ann, QUESTION, ANSWER) == CITED
    assert answers.cited(ann, f"  {QUESTION}\n", f"\n{ANSWER}  ") == CITED  # stripped only
    assert answers.cited(bob, QUESTION, ANSWER) == []  # another user's identical text
    assert answers.cited(ann, QUESTION, "Hekla is one [1].") == []  # edited
    assert answers.cited(ann, "Which volcano?", ANSWER) == []  # asked something else
    assert answer_digest(QUESTION, ANSWER) != answer_digest(QUESTION, ANSWER.lower())


def test_the_same_answer_again_replaces_what_it_cited(db: Database) -> None:
    answers = CitedAnswers(db, keep_days=7)
    ann = user_id(db, "ann")
    answers.remember(ann, QUESTION, ANSWER, CITED)
    answers.remember(ann, QUESTION, ANSWER, [CitedSource(2, 12, 6), CitedSource(1, 13, 6)])
    assert [s.document_id for s in answers.cited(ann, QUESTION, ANSWER)] == [6, 6]
    assert rows(db) == 1


def test_nothing_is_kept_for_an_uncited_answer_or_when_switched_off(db: Database) -> None:
    ann = user_id(db, "ann")
    assert not CitedAnswers(db, keep_days=7).remember(ann, QUESTION, "I cannot tell.", [])
    off = CitedAnswers(db, keep_days=0)
    assert not off.remember(ann, QUESTION, ANSWER, CITED)
    assert rows(db) == 0
    CitedAnswers(db, keep_days=7).remember(ann, QUESTION, ANSWER, CITED)
    assert off.cited(ann, QUESTION, ANSWER) == []  # switched off: kept rows are not read


def test_answers_expire_and_are_pruned_when_another_is_kept(db: Database) -> None:
    answers = CitedAnswers(db, keep_days=2)
    ann, bob = user_id(db, "ann"), user_id(db, "bob")
    answers.remember(ann, QUESTION, ANSWER, CITED, now=1000.0)
    assert answers.cited(ann, QUESTION, ANSWER, now=1000.0 + 2 * DAY_S - 1) == CITED
    assert answers.cited(ann, QUESTION, ANSWER, now=1000.0 + 2 * DAY_S + 1) == []  # expired
    assert rows(db) == 1  # not read any more, still there until a write
    answers.remember(bob, "Q?", "A [1].", CITED, now=1000.0 + 2 * DAY_S + 1)
    assert rows(db) == 1  # ann's expired row pruned by bob's write; bob's kept


def test_each_user_keeps_the_newest_answers_up_to_the_cap(db: Database) -> None:
    answers = CitedAnswers(db, keep_days=7, per_user=3)
    ann, bob = user_id(db, "ann"), user_id(db, "bob")
    now = time.time()
    answers.remember(bob, QUESTION, ANSWER, CITED, now=now)
    for n in range(5):
        answers.remember(ann, QUESTION, f"Answer {n} [1].", CITED, now=now + n)
    kept = [n for n in range(5) if answers.cited(ann, QUESTION, f"Answer {n} [1].")]
    assert kept == [2, 3, 4]
    assert answers.cited(bob, QUESTION, ANSWER) == CITED  # another user's are not counted
    assert rows(db) == 4
