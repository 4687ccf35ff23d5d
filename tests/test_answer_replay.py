"""``bench.replay``: the checks after generation, run again on a recorded ``bench.answers``
transcript, score exactly what the live run scored, and see a change to those checks."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from app.chat.answering import WITHHELD
from app.documents.answer_eval import ask_all
from bench.replay import replay
from llm.answer_check import GRAMMAR
from llm.backend import FakeBackend
from retrieval.evaluation import GoldenQuestion
from tests.retrieval_kit import make_kit
from tests.test_answer_check import chatml
from tests.test_chat import service

QUESTIONS = [
    GoldenQuestion("How many days of leave do staff get?", answer="28 days"),
    GoldenQuestion("Is the leave paid?", answer="paid"),
    GoldenQuestion("How many days of unpaid leave can staff take?"),  # the policy does not say
    GoldenQuestion("zebra quantum marmalade"),  # nothing found: no model runs
]


def test_a_replayed_transcript_scores_as_the_live_run(tmp_path: Path) -> None:
    generator = FakeBackend()
    generator.enqueue(["Staff receive 28 days of paid leave every year [1]."])
    generator.enqueue(["Yes, the leave is paid [1]."])
    generator.enqueue(["Staff can take 10 days of unpaid leave [1]."])  # invented: withheld
    chat = service(make_kit(tmp_path), generator)
    transcript = io.StringIO()
    live = asyncio.run(ask_all(chat, QUESTIONS, transcript=transcript))
    lines = [json.loads(text) for text in transcript.getvalue().splitlines()]
    assert [line["question"] for line in lines] == [q.question for q in QUESTIONS]
    assert lines[2]["answer"] == WITHHELD
    assert lines[2]["context"]["answer"] == "Staff can take 10 days of unpaid leave [1]."
    assert lines[3]["context"]["sources"] == []  # nothing found: no model ran
    assert lines[3]["context"]["query"] == QUESTIONS[3].question  # what was searched for

    replayed = replay(lines, {q.question: q for q in QUESTIONS})
    assert replayed == live
    assert (live.correctness, live.abstention) == (1.0, 1.0)


def test_a_replay_sees_a_change_to_the_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generator = FakeBackend()
    generator.enqueue(["Staff can take 10 days of unpaid leave [1]."])
    chat = service(make_kit(tmp_path), generator)
    transcript = io.StringIO()
    asyncio.run(ask_all(chat, QUESTIONS[2:3], transcript=transcript))
    lines = [json.loads(text) for text in transcript.getvalue().splitlines()]
    golden = {QUESTIONS[2].question: QUESTIONS[2]}
    assert replay(lines, golden).abstention == 1.0
    monkeypatch.setattr("app.chat.answering.unsupported_sentences", lambda *_: [])
    assert replay(lines, golden).abstention == 0.0  # nothing flagged: the invention is shown


def test_a_replay_with_the_second_look_asks_the_checker_about_each_cited_answer(
    tmp_path: Path,
) -> None:
    generator = FakeBackend()  # no chat template: chat asks nothing after the answer
    generator.enqueue(["Staff receive 28 days of paid leave every year [1]."])
    generator.enqueue(["Unpaid leave is 28 days [1]."])  # a near miss the words support
    chat = service(make_kit(tmp_path), generator)
    transcript = io.StringIO()
    asked = [QUESTIONS[0], QUESTIONS[2]]
    asyncio.run(ask_all(chat, asked, transcript=transcript))
    lines = [json.loads(text) for text in transcript.getvalue().splitlines()]
    golden = {q.question: q for q in asked}
    assert replay(lines, golden).abstention == 0.0

    checker = FakeBackend(prompt_format=chatml())
    checker.enqueue(["yes"])
    checker.enqueue(["no"])
    second = replay(lines, golden, checker)
    assert (second.correctness, second.abstention) == (1.0, 1.0)
    assert [r.grammar for r in checker.history] == [GRAMMAR, GRAMMAR]
    assert "unpaid leave" in checker.history[1].prompt
