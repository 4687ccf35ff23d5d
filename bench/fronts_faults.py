"""Fronts on one PostgreSQL under faults (issue #29): ``kill -9`` of one front during bulk
ingestion and live answers, then a rolling restart of both fronts under load.

    python -m bench.fronts_faults [--uploads 200] [--streams 8] [--clients 8] [--json out.json]

Two real Ragdesk processes (tests/server.py) share one PostgreSQL 16 + pgvector database
(pgserver, tests/pg_kit.py) and one originals directory (``RAGDESK_BLOB_URL``), with the
fake embedder and the fake generator (a canned grounded answer, ``fake_token_delay_s`` a
token), ingestion leases of ``LEASE_S`` polled every ``POLL_S`` and ``RAGDESK_DRAIN_S`` =
``DRAIN_S``.

Kill. ``--uploads`` small text files go up from two client threads, each file first to
front A or B in turn (an upload that fails is sent once to the other front); half are
acknowledged, then ``--streams`` grounded answers stream from each front (A's slow enough
never to finish on their own); once each has its first token a large file goes to A, and
as soon as the database shows A embedding it under its lease (its passages stored) the
other uploads go on and A is killed (SIGKILL) with them flowing. A is not restarted: B
must take over A's work when A's leases run out. Acknowledged = its 201 arrived. Then the
database must hold every acknowledged upload, indexed once: as many passages as the
product's own chunker makes of the file, no two of them the same span, each with one
vector and one lexical row (and one "indexed document" line in the fronts' logs); A's
streams must end with an error in the client (the connection closes: no hang), B's must
end with ``done``, and B must answer searches throughout.

Rolling restart. ``--clients`` threads alternate ``POST /api/search`` and a grounded
``POST /api/chat`` (bench/fronts.py's requests) over both fronts, as a load balancer
would, while A gets SIGTERM (drain: new questions 503, running answers finish, then the
listener closes), exits, starts again on the same port and data directory, and then B the
same. The client models an LB with one retry: a request the first front *refused* - the
connection was refused, or a 503 (draining) - is sent once to the other front; anything
else (a reset after the request went out, another status, a stream ending in ``error``)
is not retried. Every request is a new connection (nginx's default towards upstreams: no
keep-alive). Counted: raw failures (first attempts refused or failed) and failures after
the retry; a chat already streaming on the drained front past ``DRAIN_S`` is excused (none
is, the answers being short).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from app.config.settings.ingest import IngestSettings
from bench.fronts import one_request  # one search or one grounded chat, checked
from retrieval.chunking import chunk_page
from retrieval.embedder import HashingEmbedder
from retrieval.parsers import detect_kind, parse_document
from tests.conftest import wait_for
from tests.pg_kit import PgServer
from tests.server import ServerProcess

LEASE_S = 3.0
POLL_S = 0.5
DRAIN_S = 10.0
_CHUNKING = IngestSettings.model_fields  # the fronts chunk with the defaults
CHUNK_TOKENS = int(_CHUNKING["chunk_tokens"].default)
OVERLAP_TOKENS = int(_CHUNKING["chunk_overlap_tokens"].default)
REFERENCE = (
    "travel.md",
    b"# Travel\n\nThe daily meal allowance abroad is 45 euros per day, paid with the salary "
    b"of the following month for every full day spent travelling on business outside the "
    b"country, including weekends and public holidays spent away from home.\n",
)
QUESTIONS = ["How much is the meal allowance abroad?", "When is the travel allowance paid?"]
STREAM_READ_S = 60.0  # a stream's read timeout: longer than any pause between two tokens


# --- fronts -----------------------------------------------------------------------------------


# Each embedding call of the kill scenario's fronts takes this long, so the front killed
# mid-way through the large file is still embedding it however fast the machine is.
KILL_EMBED_DELAY_S = 0.3
# Each token of A's and B's fake answers in the kill scenario takes this long: A's answers
# (~330 s) outlast every wait before the kill, which cuts them; B's (~66 s) are still
# streaming at the kill, which comes some seconds after A's first token (10 s), and end
# well within the scenario's wait for them.
KILL_TOKEN_DELAYS_S = (10.0, 2.0)
WAIT_S = 600.0  # the most any step of a scenario waits for the one before: a bound, not a speed


def front(
    root: Path, name: str, database_url: str, blobs: Path, delay_s: float, embed_delay_s: float
) -> ServerProcess:
    """A front (not started) on the shared database and originals, fake models: answers
    at ``delay_s`` a token, each embedding call ``embed_delay_s`` long."""
    return ServerProcess(
        root / name,
        root / f"{name}.log",
        database_url=database_url,
        blob_url=str(blobs),
        embedder_backend="fake",
        generator_backend="fake",
        fake_token_delay_s=delay_s,
        fake_embed_delay_s=embed_delay_s,
        min_score=0.05,  # the fake embedder's scores are low
        ingest_lease_s=LEASE_S,
        ingest_poll_s=POLL_S,
        drain_s=DRAIN_S,
    )


@contextmanager
def two_fronts(
    root: Path, database_url: str, delays_s: tuple[float, float], embed_delay_s: float = 0.0
) -> Iterator[list[ServerProcess]]:
    """Fronts A and B started on one database, the reference document indexed."""
    blobs = root / "originals"
    blobs.mkdir(parents=True)
    fronts = [
        front(root, n, database_url, blobs, d, embed_delay_s)
        for n, d in zip("ab", delays_s, strict=True)
    ]
    try:
        for started in fronts:
            started.start(ready_timeout=120)
        with httpx.Client(headers=fronts[-1].headers, timeout=60) as http:
            uploaded = http.post(f"{fronts[0].url}/api/documents", files=[("file", REFERENCE)])
            document_id = uploaded.json()["documents"][0]["id"]
            wait_for(
                lambda: (
                    http.get(f"{fronts[1].url}/api/documents/{document_id}").json()["status"]
                    == "indexed"
                ),
                timeout=120,
            )
        yield fronts
    finally:
        for stopped in fronts:
            stopped.stop()


# --- a load balancer with one retry ----------------------------------------------------------


def refused(error: str) -> bool:
    """The front did not take the request: connection refused, or 503 while draining."""
    return error.startswith(("ConnectError", "503 "))


@dataclass
class Sent:
    """One request as the LB client saw it: its first attempt and, if retried, the second."""

    kind: str
    first_front: int
    started: float
    ended: float
    raw_error: str | None  # the first attempt's
    error: str | None  # the final one (after the retry, if any)
    retried: bool
    accepted: float | None = None  # when the first front took a chat (its 200 arrived)


def balanced(
    first: int,
    count: int,
    attempt: Callable[[int], str | None],
    retry_if: Callable[[str], bool] = refused,
) -> tuple[str | None, str | None, bool]:
    """``attempt`` on front ``first`` and, when that failed in a way ``retry_if`` accepts,
    once on the next front: (first error, final error, retried)."""
    raw = attempt(first % count)
    if raw is None or not retry_if(raw):
        return raw, raw, False
    return raw, attempt((first + 1) % count), True


def lb_client(headers: dict[str, str], timeout: float = 120) -> httpx.Client:
    # A new connection per request, as nginx talks to upstreams by default.
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.Client(headers=headers, timeout=timeout, limits=limits)


# --- kill -9 during bulk ingestion and live answers ------------------------------------------


def memo(i: int) -> tuple[str, bytes]:
    """A small upload (four passages), unique by its numbers."""
    words = " ".join(f"clause{i}x{j} applies to room {i * 100 + j}." for j in range(60))
    return f"memo-{i:04d}.txt", f"Memo {i}.\n\n{words}\n\n{words.upper()}\n".encode()


def ledger(paragraphs: int) -> tuple[str, bytes]:
    """A large upload: thousands of passages, seconds of ingestion."""
    text = "\n\n".join(
        f"Entry {i}. The ledger line {i} was approved by the board in meeting {i}."
        for i in range(paragraphs)
    )
    return "ledger.txt", text.encode()


def expected_passages(filename: str, data: bytes) -> int:
    """How many passages the fronts cut ``data`` into (their parser and chunker)."""
    parsed = parse_document(data, detect_kind(data, filename), filename)
    count = HashingEmbedder().count_tokens
    return sum(
        len(
            chunk_page(
                p, max_tokens=CHUNK_TOKENS, overlap_tokens=OVERLAP_TOKENS, count_tokens=count
            )
        )
        for p in parsed.pages
    )


class LiveAnswer:
    """``POST /api/chat`` read as it streams, on a thread: its events, when its first token
    came, when and how it ended."""

    def __init__(self, target: ServerProcess, question: str) -> None:
        self.events: list[str] = []
        self.first_token_at: float | None = None
        self.ended_at: float | None = None
        self.error: str | None = None
        self._thread = threading.Thread(
            target=self._read, args=(f"{target.url}/api/chat", target.headers, question)
        )
        self._thread.start()

    def _read(self, url: str, headers: dict[str, str], question: str) -> None:
        timeout = httpx.Timeout(30, read=STREAM_READ_S)
        body = {"message": question}
        try:
            with httpx.stream("POST", url, headers=headers, json=body, timeout=timeout) as got:
                if got.status_code != 200:
                    self.error = f"{got.status_code} {got.read()[:200]!r}"
                for line in got.iter_lines():
                    if line.startswith("event:"):
                        self.events.append(line.removeprefix("event:").strip())
                    if line == "event: token" and self.first_token_at is None:
                        self.first_token_at = time.monotonic()
        except httpx.HTTPError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ended_at = time.monotonic()

    def live_at(self, moment: float) -> bool:
        """It had its first token before ``moment`` and ended after it."""
        first, ended = self.first_token_at, self.ended_at
        return first is not None and first < moment and (ended is None or ended > moment)

    @property
    def completed(self) -> bool:
        return self.error is None and self.events[-1:] == ["done"]

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"a stream still open after {timeout} s: {self.events[-3:]}")


@dataclass
class Passages:
    """One document's row as the database holds it after the faults."""

    status: str
    chunk_count: int  # documents.chunk_count
    rows: int  # chunks rows
    spans: int  # distinct (page, start, end) among them
    vectors: int
    lexical: int


def passages(database_url: str) -> dict[int, Passages]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            """SELECT d.id, d.status, d.chunk_count, count(c.id),
                      count(DISTINCT (c.page, c.start, c."end")), count(e.chunk_id),
                      count(l.chunk_id)
               FROM documents d LEFT JOIN chunks c ON c.document_id = d.id
               LEFT JOIN embeddings e ON e.chunk_id = c.id
               LEFT JOIN chunk_lengths l ON l.chunk_id = c.id
               GROUP BY d.id, d.status, d.chunk_count"""
        ).fetchall()
    return {int(r[0]): Passages(str(r[1]), *(int(v) for v in r[2:])) for r in rows}


def held_by(database_url: str, pid: int) -> dict[int, str]:
    """Documents whose lease the process ``pid`` holds while parsing or embedding them, with
    their status (the replica id has the pid between colons: retrieval/leases.py)."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id, status FROM documents WHERE claimed_by LIKE %s"
            " AND status IN ('parsing', 'embedding') ORDER BY id",
            [f"%:{pid}:%"],
        ).fetchall()
    return {int(row[0]): str(row[1]) for row in rows}


@dataclass
class KillRun:
    uploads: int
    acknowledged: dict[int, str] = field(default_factory=dict)  # id -> filename
    expected: dict[int, int] = field(default_factory=dict)  # id -> passages
    acked_before_kill: int = 0
    upload_raw_failures: int = 0
    upload_failures: list[str] = field(default_factory=list)  # not acknowledged after a retry
    held_at_kill: dict[int, str] = field(default_factory=dict)  # id -> status
    large_at_kill: Passages | None = None  # the large file in the database, just killed
    killed_at: float = 0.0
    killed: list[LiveAnswer] = field(default_factory=list)  # streams on the killed front
    survivors: list[LiveAnswer] = field(default_factory=list)  # streams on the other front
    probes: list[tuple[float, str | None]] = field(default_factory=list)  # B's searches
    indexed_after_s: float = 0.0  # from the kill until every acknowledged upload was
    documents: dict[int, Passages] = field(default_factory=dict)
    indexing_runs: Counter[int] = field(default_factory=Counter)  # "indexed document N" logs

    @property
    def lost(self) -> list[int]:
        return sorted(set(self.acknowledged) - set(self.documents))

    def wrong(self) -> dict[int, Passages]:
        """Acknowledged documents not indexed exactly once, with what the database holds."""
        wrong = {}
        for document_id, want in self.expected.items():
            got = self.documents.get(document_id)
            if (
                got is None
                or got.status != "indexed"
                or not (
                    want == got.rows == got.spans == got.vectors == got.lexical == got.chunk_count
                )
            ):
                wrong[document_id] = got or Passages("missing", 0, 0, 0, 0, 0)
        return wrong

    @property
    def duplicate_passages(self) -> int:
        return sum(p.rows - p.spans for p in self.documents.values())


def upload_all(
    run: KillRun, fronts: list[ServerProcess], files: list[tuple[str, bytes]], gate: threading.Event
) -> None:
    """Upload ``files`` from two threads, each file first to A or B in turn; an upload that
    failed in any way is sent once to the other front (the same bytes again are a no-op).
    The second half waits for ``gate``."""
    lock = threading.Lock()

    def one(i: int, http: httpx.Client) -> None:
        name, data = files[i]
        ids: list[int] = []
        raw, error, _ = balanced(
            i,
            len(fronts),
            lambda at: upload_once(http, fronts[at], name, data, ids),
            retry_if=lambda _: True,
        )
        with lock:
            run.upload_raw_failures += raw is not None
            if error is not None:
                run.upload_failures.append(f"{name}: {error}")
            for document_id in ids:
                run.acknowledged[document_id] = name
                run.expected[document_id] = expected_passages(name, data)

    def worker(start: int) -> None:
        with lb_client(fronts[0].headers, timeout=60) as http:
            for i in range(start, len(files), 2):
                if i >= len(files) // 2:
                    gate.wait()
                one(i, http)

    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
        if thread.is_alive():
            raise TimeoutError("an upload hangs")


def upload_once(
    http: httpx.Client, target: ServerProcess, name: str, data: bytes, ids: list[int]
) -> str | None:
    try:
        got = http.post(f"{target.url}/api/documents", files=[("file", (name, data))])
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if got.status_code != 201:
        return f"{got.status_code} {got.text[:200]}"
    ids.extend(int(d["id"]) for d in got.json()["documents"])
    return None


def kill_during_work(
    fronts: list[ServerProcess], database_url: str, uploads: int, streams: int, big: int
) -> KillRun:
    """The kill scenario of the module's docstring, on started ``fronts`` (A is killed), in
    this order: half the uploads acknowledged (the rest wait); every stream's first token;
    the large file on A, and A embedding it under its lease; the other uploads let go, one
    more acknowledged; the kill."""
    a, b = fronts
    assert a.process is not None
    pid = a.process.pid
    run, gate, half = KillRun(uploads), threading.Event(), uploads // 2
    uploader = threading.Thread(
        target=upload_all, args=(run, fronts, [memo(i) for i in range(uploads)], gate)
    )
    uploader.start()
    stop_probing = threading.Event()
    prober = threading.Thread(target=probe, args=(b, run, stop_probing))
    prober.start()
    try:
        wait_for(lambda: len(run.acknowledged) >= half, timeout=300)
        run.killed = [LiveAnswer(a, QUESTIONS[0]) for _ in range(streams)]
        run.survivors = [LiveAnswer(b, QUESTIONS[0]) for _ in range(streams)]
        everyone = run.killed + run.survivors
        wait_for(lambda: all(s.first_token_at or s.ended_at for s in everyone), timeout=WAIT_S)
        name, data = ledger(big)
        ids: list[int] = []
        with httpx.Client(headers=a.headers, timeout=120) as http:
            assert upload_once(http, a, name, data, ids) is None
        run.acknowledged[ids[0]], run.expected[ids[0]] = name, expected_passages(name, data)
        # Its passages stored, their vectors being computed: the kill leaves a partial set.
        wait_for(lambda: embedding_on(database_url, pid, ids[0]), timeout=WAIT_S, interval=0.01)
        gate.set()
        wait_for(lambda: len(run.acknowledged) >= half + 2, timeout=WAIT_S, interval=0.01)
        run.acked_before_kill = len(run.acknowledged) - 1  # the large file not counted
        run.killed_at = time.monotonic()
        a.kill()
        run.held_at_kill = held_by(database_url, pid)  # as A left them
        run.large_at_kill = passages(database_url)[ids[0]]
        for stream in run.killed:
            stream.join(STREAM_READ_S + 30)
        uploader.join(300)
        if uploader.is_alive():
            raise TimeoutError("the uploads hang")
        wait_for(lambda: all_indexed(database_url, run), timeout=300, interval=0.2)
        run.indexed_after_s = time.monotonic() - run.killed_at
        for stream in run.survivors:
            stream.join(STREAM_READ_S + 30)
    finally:
        gate.set()
        stop_probing.set()
        prober.join(60)
        uploader.join(300)
    run.documents = passages(database_url)
    run.indexing_runs = indexing_runs(fronts)
    return run


def embedding_on(database_url: str, pid: int, document_id: int) -> bool:
    """Whether the process ``pid`` is embedding the document under its lease; an error
    once it cannot be any more (another front took it, or it is done), rather than a wait
    until the bound."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT status, claimed_by FROM documents WHERE id = %s", [document_id]
        ).fetchone()
    status, holder = row if row is not None else ("deleted", None)
    ours = holder is not None and f":{pid}:" in holder  # the replica id: retrieval/leases.py
    if status not in ("queued", "parsing", "embedding") or (holder is not None and not ours):
        raise AssertionError(f"document {document_id} is {status}, held by {holder}, not {pid}")
    return ours and status == "embedding"


def all_indexed(database_url: str, run: KillRun) -> bool:
    documents = passages(database_url)
    return all(
        documents.get(i) is not None and documents[i].status in ("indexed", "failed")
        for i in run.acknowledged
    )


def probe(b: ServerProcess, run: KillRun, stop: threading.Event) -> None:
    """Search on B every 0.1 s until told to stop: the other front keeps answering."""
    with lb_client(b.headers, timeout=30) as http:
        while not stop.wait(0.1):
            run.probes.append((time.monotonic(), one_request(http, b, "search", QUESTIONS[1])))


def indexing_runs(fronts: list[ServerProcess]) -> Counter[int]:
    """How many times each document was indexed, by the fronts' logs."""
    runs: Counter[int] = Counter()
    for one in fronts:
        for line in one.log_path.read_text(errors="replace").splitlines():
            if " - indexed document " in line:
                runs[int(line.split(" - indexed document ")[1].split(":")[0])] += 1
    return runs


# --- rolling restart under load --------------------------------------------------------------


@dataclass
class Restart:
    front: int
    sigterm_at: float
    exit_code: int
    exited_at: float
    ready_at: float


@dataclass
class RollingRun:
    sent: list[Sent] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)

    def excused(self, request: Sent) -> bool:
        """A chat still streaming on a drained front past DRAIN_S (the bar excuses it)."""
        return request.kind == "chat" and any(
            r.front == request.first_front
            and request.started < r.sigterm_at
            and request.ended > r.sigterm_at + DRAIN_S
            for r in self.restarts
        )

    def drained(self) -> list[Sent]:
        """The chats a front had taken and was answering when it got SIGTERM (the drain
        waits for them); one sent as the signal came may be refused, and is retried."""
        return [
            s
            for s in self.sent
            for r in self.restarts
            if s.kind == "chat"
            and s.first_front == r.front
            and s.accepted is not None
            and s.accepted < r.sigterm_at < s.ended
        ]

    def failed(self) -> list[Sent]:
        return [s for s in self.sent if s.error is not None and not self.excused(s)]

    def served_after(self, index: int, moment: float) -> bool:
        """Some request first sent to front ``index`` after ``moment`` succeeded there."""
        return any(
            s.first_front == index and s.started > moment and s.raw_error is None
            for s in list(self.sent)
        )


class Load:
    """``clients`` threads alternating searches and grounded chats over the fronts, as in
    bench/fronts.py (client ``i``'s request ``n`` is a search when ``i + n`` is even and
    goes first to front ``i + n // 2``), through the LB client, until stopped."""

    def __init__(self, fronts: list[ServerProcess], clients: int, run: RollingRun) -> None:
        self.fronts, self.run = fronts, run
        self.attempts: dict[int, tuple[str, int]] = {}  # client -> (kind, front) sent now
        # client -> (the front streaming its chat now, when it took it)
        self.answering: dict[int, tuple[int, float]] = {}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,)) for i in range(clients)]
        for thread in self._threads:
            thread.start()

    def _client(self, i: int) -> None:
        n = 0
        with lb_client(self.fronts[0].headers) as http:
            while not self._stop.is_set():
                kind = "search" if (i + n) % 2 == 0 else "chat"
                question = QUESTIONS[(i + n) % len(QUESTIONS)]

                accepted: list[float] = []

                def attempt(at: int) -> str | None:
                    def taken() -> None:
                        accepted.append(time.monotonic())  # noqa: B023
                        self.answering[i] = (at, accepted[-1])  # noqa: B023

                    self.attempts[i] = (kind, at)  # noqa: B023
                    try:
                        return one_request(http, self.fronts[at], kind, question, taken)  # noqa: B023
                    finally:
                        self.attempts.pop(i, None)
                        self.answering.pop(i, None)

                started, first = time.monotonic(), (i + n // 2) % len(self.fronts)
                raw, error, retried = balanced(first, len(self.fronts), attempt)
                ended = time.monotonic()
                took = accepted[0] if accepted and not retried else None
                self.run.sent.append(Sent(kind, first, started, ended, raw, error, retried, took))
                n += 1

    def chatting_on(self, front: int) -> bool:
        """Whether ``front`` took a chat moments ago (its 200 arrived) that still streams:
        an answer takes seconds, so it is still being written when a signal follows."""
        now = time.monotonic()
        return any(at == front and now - taken < 0.5 for at, taken in list(self.answering.values()))

    def stop(self, timeout: float = 180) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError("a load client hangs")


def rolling_restart(fronts: list[ServerProcess], clients: int) -> RollingRun:
    """Under load: each front in turn, once an answer is streaming from it, gets SIGTERM,
    exits, starts again, and serves a request again before the next one's turn."""
    run = RollingRun()
    load = Load(fronts, clients, run)
    try:
        begun = time.monotonic()
        for index in range(len(fronts)):
            wait_for(lambda: run.served_after(index, begun), timeout=120)  # noqa: B023
        for index, one in enumerate(fronts):
            assert one.process is not None
            wait_for(lambda: load.chatting_on(index), timeout=120, interval=0.01)  # noqa: B023
            sigterm_at = time.monotonic()
            one.process.terminate()
            code = one.exit_code(DRAIN_S + 60)
            exited_at = time.monotonic()
            one.start(ready_timeout=120)
            ready_at = time.monotonic()
            run.restarts.append(Restart(index, sigterm_at, code, exited_at, ready_at))
            wait_for(lambda: run.served_after(index, ready_at), timeout=120)  # noqa: B023
    finally:
        load.stop()
    return run


# --- the benchmark ---------------------------------------------------------------------------


def report(kill: KillRun, rolling: RollingRun) -> list[tuple[str, object]]:
    after_kill = [error for at, error in kill.probes if at > kill.killed_at]
    to_error = [s.ended_at - kill.killed_at for s in kill.killed if s.ended_at is not None]
    errored = [s for s in kill.killed if s.error is not None and "done" not in s.events]
    causes = Counter(cause(s.raw_error) for s in rolling.sent if s.raw_error is not None)
    acked, before = len(kill.acknowledged), kill.acked_before_kill
    large = kill.large_at_kill
    restarts = (
        f"{'AB'[r.front]}: exit {r.exit_code}, {r.exited_at - r.sigterm_at:.1f} s to exit, "
        f"{r.ready_at - r.exited_at:.1f} s to ready"
        for r in rolling.restarts
    )
    return [
        ("kill: small uploads sent, + 1 large file to the killed front", f"{kill.uploads} + 1"),
        (
            "acknowledged (201): all (before / after the kill)",
            f"{acked} ({before} / {acked - before - 1})",
        ),
        (
            "upload attempts failed / uploads unacknowledged after one retry",
            f"{kill.upload_raw_failures} / {len(kill.upload_failures)}",
        ),
        ("documents the killed front was parsing or embedding at the kill", kill.held_at_kill),
        (
            "the large file's passages / vectors in the database at the kill",
            f"{large.rows} / {large.vectors}" if large else "-",
        ),
        ("acknowledged uploads lost", len(kill.lost)),
        (
            "indexed exactly once (passages = chunker's, one vector each)",
            f"{len(kill.expected) - len(kill.wrong())} of {len(kill.expected)}",
        ),
        ("duplicate passages", kill.duplicate_passages),
        (
            "documents indexed more than once (fronts' logs)",
            sorted(i for i, n in kill.indexing_runs.items() if n > 1),
        ),
        ("every acknowledged upload indexed, after the kill", f"{kill.indexed_after_s:.1f} s"),
        (f"streams on the killed front ended with an error (of {len(kill.killed)})", len(errored)),
        ("max time from the kill to the client's error", f"{max(to_error, default=0):.3f} s"),
        ("client's error", errored[0].error if errored else "-"),
        (
            f"streams on the other front ended with done (of {len(kill.survivors)})",
            sum(s.completed for s in kill.survivors),
        ),
        (
            "other front's searches after the kill: ok / failed",
            f"{after_kill.count(None)} / {len(after_kill) - after_kill.count(None)}",
        ),
        (
            "rolling restart: requests (search + chat), over",
            f"{len(rolling.sent)}, {span(rolling):.1f} s",
        ),
        ("first attempts failed (raw), by cause", f"{sum(causes.values())} {dict(causes)}"),
        (
            "retried once on the other front / failed after it",
            f"{sum(s.retried for s in rolling.sent)} / {len(rolling.failed())}",
        ),
        (
            "answers streaming on a front at its SIGTERM, finished",
            f"{len(rolling.drained())} ({sum(s.raw_error is None for s in rolling.drained())})",
        ),
        ("chats cut at the drain deadline (excused)", sum(map(rolling.excused, rolling.sent))),
        ("restarts", "; ".join(restarts)),
    ]


def cause(error: str) -> str:
    if error.startswith("ConnectError"):
        return "connection refused"
    return "503 draining" if error.startswith("503 ") else error[:80]


def span(rolling: RollingRun) -> float:
    if not rolling.sent:
        return 0.0
    return max(s.ended for s in rolling.sent) - min(s.started for s in rolling.sent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--streams", type=int, default=8, help="live answers on each front")
    parser.add_argument("--big", type=int, default=30_000, help="paragraphs of the large file")
    parser.add_argument("--clients", type=int, default=8, help="load during the restart")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    print(
        f"{args.uploads} uploads + a large file of {args.big} paragraphs, {args.streams} "
        f"streams per front, {args.clients} load clients; lease {LEASE_S:.0f} s, poll "
        f"{POLL_S} s, RAGDESK_DRAIN_S {DRAIN_S:.0f} s; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    pg = PgServer()
    try:
        with tempfile.TemporaryDirectory(prefix="ragdesk-faults-") as tmp:
            url = pg.fresh_database()
            kill_root = Path(tmp) / "kill"
            with two_fronts(kill_root, url, KILL_TOKEN_DELAYS_S, KILL_EMBED_DELAY_S) as fronts:
                kill = kill_during_work(fronts, url, args.uploads, args.streams, args.big)
            url = pg.fresh_database()
            with two_fronts(Path(tmp) / "rolling", url, (0.05, 0.05)) as fronts:
                rolling = rolling_restart(fronts, args.clients)
    finally:
        pg.stop()
    rows = report(kill, rolling)
    print("| measure | value |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")
    failures = [s.error for s in rolling.failed()][:5]
    for error in failures + [f"upload: {e}" for e in kill.upload_failures[:5]]:
        print(f"  failure: {error}")
    ok = (
        not kill.lost
        and not kill.wrong()
        and not kill.upload_failures
        and all(s.completed for s in kill.survivors)
        and all(s.error is not None for s in kill.killed)
        and not rolling.failed()
    )
    print("PASS" if ok else "FAIL")
    if args.json:
        results: dict[str, Any] = {
            "rows": dict(rows),
            "rolling_failures": [asdict(s) for s in rolling.failed()],
        }
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
