"""Two real Ragdesk fronts on one PostgreSQL under faults (issue #29): ``kill -9`` of one
front while it ingests and streams answers loses no acknowledged upload, indexes every
document once and leaves the other front answering; a rolling restart of both under load
fails no request a load balancer with one retry would not recover.

The scenarios, the load balancer's retry rule and the checks of the database are those of
bench/fronts_faults.py, at a smaller scale; every step waits for a state, not a time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bench.fronts_faults import (
    KILL_EMBED_DELAY_S,
    KILL_TOKEN_DELAYS_S,
    KillRun,
    RollingRun,
    kill_during_work,
    refused,
    rolling_restart,
    two_fronts,
)

UPLOADS = 24
STREAMS = 8
CLIENT_ERROR_BOUND_S = 15.0  # from the kill to the error in a killed stream's client


@contextmanager
def fresh_database(pg_server: Any) -> Iterator[str]:
    url: str = pg_server.fresh_database()
    try:
        yield url
    finally:
        pg_server.drop(url)


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory, pg_server: Any) -> KillRun:
    """One kill scenario for this module's three tests to judge."""
    root = tmp_path_factory.mktemp("kill")
    with (
        fresh_database(pg_server) as url,
        two_fronts(root, url, KILL_TOKEN_DELAYS_S, KILL_EMBED_DELAY_S) as fronts,
    ):
        return kill_during_work(fronts, url, UPLOADS, STREAMS, big=20_000)


def test_kill_9_came_mid_work(killed: KillRun) -> None:
    at = killed.killed_at
    assert all(s.live_at(at) for s in killed.killed + killed.survivors)
    # A was embedding the large file under its lease: its passages were in the database,
    # without their vectors, for B to take over.
    assert "embedding" in killed.held_at_kill.values(), killed.held_at_kill
    large = killed.large_at_kill
    assert large is not None and large.rows > 0 and large.vectors < large.rows
    assert UPLOADS // 2 < killed.acked_before_kill < UPLOADS  # uploads on both sides of it


def test_kill_9_loses_no_acknowledged_upload_and_indexes_each_once(killed: KillRun) -> None:
    assert killed.upload_failures == []  # those the killed front dropped were taken by B
    assert len(killed.acknowledged) == UPLOADS + 1
    assert killed.lost == []
    # Each: indexed, as many passages as the chunker makes of the file, no span twice, one
    # vector and one lexical row each; also the large file the killed front was embedding.
    assert killed.wrong() == {}
    assert killed.duplicate_passages == 0
    assert {i: killed.indexing_runs[i] for i in killed.acknowledged} == dict.fromkeys(
        killed.acknowledged, 1
    )


def test_kill_9_ends_its_streams_in_the_client_and_the_other_front_answers(
    killed: KillRun,
) -> None:
    at = killed.killed_at
    for stream in killed.killed:
        assert stream.error is not None and "done" not in stream.events, stream.events
        assert stream.ended_at is not None
        assert at < stream.ended_at < at + CLIENT_ERROR_BOUND_S
    for stream in killed.survivors:
        assert stream.completed, (stream.error, stream.events[-3:])
        assert stream.ended_at is not None and stream.ended_at > at
    after = [error for moment, error in killed.probes if moment > at]
    assert after, "no search on the other front after the kill"
    assert [e for e in after if e is not None] == []


@pytest.fixture
def rolled(tmp_path: Path, pg_server: Any) -> RollingRun:
    with fresh_database(pg_server) as url, two_fronts(tmp_path, url, (0.05, 0.05)) as fronts:
        return rolling_restart(fronts, clients=3)


def test_rolling_restart_under_load_fails_no_request(rolled: RollingRun) -> None:
    restarts = rolled.restarts
    assert [(r.front, r.exit_code) for r in restarts] == [(0, 0), (1, 0)]
    assert restarts[0].ready_at < restarts[1].sigterm_at  # one front down at a time
    # The load ran through the whole restart.
    assert min(s.started for s in rolled.sent) < restarts[0].sigterm_at
    assert max(s.ended for s in rolled.sent) > restarts[1].ready_at
    # Each front was answering when it got SIGTERM; the drain let the answer finish.
    drained = rolled.drained()
    assert {s.first_front for s in drained} == {0, 1}
    assert [s.raw_error for s in drained if s.raw_error is not None] == []
    # A front going or gone only refused (connection refused, 503 while draining); the
    # one retry on the other front served every such request; nothing else failed.
    assert [s.raw_error for s in rolled.sent if s.raw_error and not refused(s.raw_error)] == []
    assert [(s.kind, s.raw_error, s.error) for s in rolled.failed()] == []
    assert not any(rolled.excused(s) for s in rolled.sent)
