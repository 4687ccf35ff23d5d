"""PostgreSQL that stops answering without refusing anything: the server stopped with
SIGSTOP (a stalled primary), or a network that swallows every byte. Nothing errs, so
only the front's own bounds (retrieval/pg_bounds.py) end its waits.

A real front (a uvicorn process) on a real PostgreSQL (pgserver), frozen mid-answer:
every request ends within ``RAGDESK_DATABASE_TIMEOUT_S`` and a little; what needs the
database gets 503 with Retry-After; liveness, static files and ``/metrics`` answer as
usual; readiness says the database is away; the answer being streamed ends with an
honest 503 ``error`` event after the text already sent; and once the server runs again,
so does the front. The server is always continued, whatever the test meets.

Over TCP, a relay that goes silent stands in for the network dropping packets: a real
black hole needs netfilter or ``tc`` rules on the shared loopback, root-only and felt by
everything else running on the machine, so it is not made here. Past the kernel, the
front cannot tell the two apart (the relay's kernel still acknowledges what is sent, so
TCP's own timers never fire: the silence bound does the work either way).
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import httpx
import pytest
from litestar.testing import TestClient

from tests.conftest import logs_captured, sse_events, upload, wait_for, wait_indexed
from tests.server import ServerProcess

TIMEOUT_S = 2.0  # RAGDESK_DATABASE_TIMEOUT_S of the front under test
SLACK_S = 1.5  # a request needing the database ends within TIMEOUT_S + SLACK_S
BOUND_S = TIMEOUT_S + SLACK_S
DOC = b"# Travel\n\nThe daily meal allowance abroad is 45 euros per day.\n"


@contextlib.contextmanager
def frozen(server: Any) -> Iterator[None]:
    """Every process of the PostgreSQL ``server`` stopped (SIGSTOP) for the block; all
    continued (SIGCONT) afterwards, whatever happened inside."""
    import psutil  # type: ignore[import-untyped]  # pgserver's own dependency

    postmaster = psutil.Process(server.server.get_pid())
    stopped: list[Any] = []
    try:
        postmaster.send_signal(signal.SIGSTOP)  # first: no new backend is forked meanwhile
        stopped.append(postmaster)
        for child in postmaster.children(recursive=True):
            child.send_signal(signal.SIGSTOP)
            stopped.append(child)
        yield
    finally:
        for process in reversed(stopped):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGCONT)


def timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = call()
    return response, time.monotonic() - start


class AnswerReader(threading.Thread):
    """``POST /api/chat`` read on a thread of its own: the events, each with its time."""

    def __init__(self, front: ServerProcess, message: str):
        super().__init__(daemon=True)
        self.front, self.message = front, message
        self.events: list[tuple[str, dict[str, Any], float]] = []

    def run(self) -> None:
        with httpx.stream(
            "POST",
            f"{self.front.url}/api/chat",
            headers=self.front.headers,
            json={"message": self.message},
            timeout=60,
        ) as response:
            assert response.status_code == 200
            name = ""
            for line in response.iter_lines():
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    self.events.append((name, json.loads(line[5:]), time.monotonic()))

    def named(self, name: str) -> list[tuple[str, dict[str, Any], float]]:
        return [event for event in self.events if event[0] == name]


@pytest.fixture
def front(tmp_path: Path, pg_server: Any) -> Iterator[ServerProcess]:
    url = pg_server.fresh_database()
    server = ServerProcess(
        tmp_path / "data",
        tmp_path / "server.log",
        database_url=url,
        database_timeout_s=TIMEOUT_S,
        embedder_backend="fake",
        generator_backend="fake",
        fake_token_delay_s=0.25,  # long enough to freeze the database mid-answer
        ingest_poll_s=0.5,
    )
    try:
        yield server.start(ready_timeout=90)
    finally:
        server.stop()
        pg_server.drop(url)


def _indexed(front: ServerProcess) -> None:
    uploaded = httpx.post(
        f"{front.url}/api/documents", headers=front.headers, files=[("file", ("travel.md", DOC))]
    )
    assert uploaded.status_code in (200, 201, 202), uploaded.text
    document = f"{front.url}/api/documents/{uploaded.json()['documents'][0]['id']}"
    wait_for(
        lambda: httpx.get(document, headers=front.headers).json()["status"] == "indexed",
        timeout=60,
        interval=0.2,
    )


def test_a_frozen_database_bounds_every_request_and_the_front_recovers(
    front: ServerProcess, pg_server: Any
) -> None:
    url, key = front.url, front.headers
    _indexed(front)
    assert httpx.get(f"{url}/metrics", headers=key).status_code == 200  # the key verified
    answer = AnswerReader(front, "How much is the meal allowance abroad?")
    answer.start()
    wait_for(lambda: len(answer.named("token")) >= 2, timeout=30)

    with frozen(pg_server):
        # What needs the database: 503 and Retry-After within the bound, never a hang.
        collections, took = timed(lambda: httpx.get(f"{url}/api/collections", headers=key))
        assert took < BOUND_S, took
        assert collections.status_code == 503 and collections.headers["retry-after"] == "5"
        assert "database" in collections.json()["error"]["detail"]
        search, took = timed(
            lambda: httpx.post(f"{url}/api/search", headers=key, json={"query": "meal"})
        )
        assert took < BOUND_S, took
        assert search.status_code == 503 and search.headers["retry-after"] == "5"
        page, took = timed(lambda: httpx.get(f"{url}/login"))  # a page (public: no one asks)
        assert took < BOUND_S and page.status_code in (200, 503), (took, page.status_code)

        # What must never wait on the database answers within less than its bound.
        for path, headers in (
            ("/health/live", {}),
            ("/static/app.css", {}),
            ("/metrics", key),
        ):
            response, took = timed(partial(httpx.get, f"{url}{path}", headers=headers))
            assert response.status_code == 200, (path, response.text)
            assert took < TIMEOUT_S, (path, took)
        metrics = httpx.get(f"{url}/metrics", headers=key).text
        assert "ragdesk_database_up 0.0" in metrics

        # Readiness takes this front out of rotation, naming the database.
        ready, took = timed(lambda: httpx.get(f"{url}/health/ready"))
        assert took < TIMEOUT_S, took
        assert ready.status_code == 503 and ready.headers["retry-after"] == "5"
        assert ready.json()["detail"] == "the database cannot be reached"
        detail = httpx.get(f"{url}/health/ready", headers=key).json()["detail"]  # an admin
        assert detail.startswith("the database at postgresql://"), detail
        assert "not answering" in detail or "cannot reach" in detail, detail

        # The answer streaming when the database stopped: its text stays the client's,
        # then an honest 503 the client may retry, once the rest of it had nowhere to go.
        answer.join(timeout=30)
        assert not answer.is_alive()
        tokens, errors = answer.named("token"), answer.named("error")
        assert len(tokens) >= 2 and not answer.named("done")
        assert [e[1] for e in errors] == [
            {
                "status": 503,
                "detail": "the database cannot be reached just now; try again shortly",
                "retry_after": 5,
            }
        ]
        assert errors[0][2] - tokens[-1][2] < BOUND_S

    # Continued: readiness finds the database again by itself, and requests work.
    wait_for(lambda: httpx.get(f"{url}/health/ready").status_code == 200, timeout=30)
    assert httpx.get(f"{url}/api/collections", headers=key).status_code == 200
    again = httpx.post(f"{url}/api/search", headers=key, json={"query": "meal allowance"})
    assert again.status_code == 200 and again.json()["hits"], again.text
    assert "ragdesk_database_up 1.0" in httpx.get(f"{url}/metrics", headers=key).text

    log = front.log_path.read_text()
    assert log.count("an answer stream ended early, its answer not stored") == 1
    assert "answer stream failed" not in log
    for traceback in log.split("Traceback (most recent call last)")[1:]:
        # the database's absence is not a bug of the answer's code: no traceback there
        assert "app/web/" not in traceback and "app/chat/" not in traceback, traceback


class SilentRelay:
    """A loopback TCP port passing bytes to PostgreSQL's Unix socket, until ``silence()``:
    from then on nothing is read or sent, on open connections or new ones, until
    ``speak()``."""

    def __init__(self, socket_path: str):
        self._target = socket_path
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._quiet = threading.Event()
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def silence(self) -> None:
        self._quiet.set()
        time.sleep(0.2)  # each pump has looked at the flag since: nothing passes from now on

    def speak(self) -> None:
        self._quiet.clear()

    def close(self) -> None:
        self._closing.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self._target)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not self._closing.is_set():
                if self._quiet.is_set():
                    time.sleep(0.05)
                    continue
                readable, _, _ = select.select([source], [], [], 0.05)
                if readable and not self._quiet.is_set():
                    data = source.recv(65536)
                    if not data:
                        return
                    sink.sendall(data)


def _over_tcp(unix_url: str, port: int) -> tuple[str, str]:
    """``unix_url`` (pgserver's: a Unix socket) as a URL to 127.0.0.1:``port``, and the
    socket's path."""
    parts = urlsplit(unix_url)
    socket_dir = parse_qs(parts.query)["host"][0]
    tcp = urlunsplit(parts._replace(netloc=f"postgres@127.0.0.1:{port}", query=""))
    return tcp, f"{socket_dir}/.s.PGSQL.{parts.port or 5432}"


def test_over_tcp_a_network_gone_silent_bounds_every_call(pg_server: Any) -> None:
    from retrieval.pg import PostgresDatabase, StoreUnavailable

    url = pg_server.fresh_database()
    _, socket_path = _over_tcp(url, 0)
    relay = SilentRelay(socket_path)
    tcp_url, _ = _over_tcp(url, relay.port)
    db = PostgresDatabase(tcp_url, pool_size=3, timeout_s=TIMEOUT_S)  # keepalives and all
    try:
        assert db.read().execute("SELECT 1").fetchone()[0] == 1
        relay.silence()
        start = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"not answering|cannot reach"):
            db.read().execute("SELECT 2")
        assert time.monotonic() - start < BOUND_S
        start = time.monotonic()  # known silent now: the next calls do not wait again
        with pytest.raises(StoreUnavailable, match="not answering"), db.write() as session:
            session.execute("SELECT 3")
        assert time.monotonic() - start < TIMEOUT_S / 2
        start = time.monotonic()  # the readiness check asks anyway, within the bound
        with pytest.raises(StoreUnavailable):
            db.ping()
        assert time.monotonic() - start < BOUND_S
        relay.speak()
        wait_for(lambda: _answers(db), timeout=30, interval=0.2)
        assert db.silent() is None
        assert db.read().execute("SELECT 4").fetchone()[0] == 4
    finally:
        relay.speak()
        db.close()
        relay.close()
        pg_server.drop(url)


def _answers(db: Any) -> bool:
    try:
        db.ping()
    except Exception:
        return False
    return True


def test_an_answer_that_cannot_be_stored_ends_with_a_503_after_its_text(
    client: TestClient[Any], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both streams (``/api/chat``'s JSON, the page's HTML), with the store failing as a
    frozen database makes it fail; in the log, one warning line each, no traceback."""
    from retrieval.pg import StoreUnavailable

    wait_indexed(client, upload(client, ("travel.md", DOC)).json()["documents"][0]["id"])
    chat = client.app.state.services.require_chat()

    def away(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the database at postgresql://db/x is not answering")

    monkeypatch.setattr(chat, "_store", away)
    question = "How much is the meal allowance abroad?"
    with logs_captured(caplog, "app"):
        events = sse_events(client.post("/api/chat", json={"message": question}).text)
        turn = client.post("/ui/ask", data={"message": question})
        asked = re.search(r"/ui/answers/(\d+)/stream", turn.text)
        assert asked is not None, turn.text
        page = sse_events(client.get(f"/ui/answers/{asked.group(1)}/stream").text)

    names = [name for name, _ in events]
    assert "token" in names and "done" not in names and names[-1] == "error", names
    assert json.loads(events[-1][1]) == {
        "status": 503,
        "detail": "the database cannot be reached just now; try again shortly",
        "retry_after": 5,
    }
    tokens = [data for name, data in page if name == "token"]
    assert tokens and page[-1][0] == "done", page
    assert tokens[-1] in page[-1][1]  # the answer so far stays on the page, the error under it
    assert "try again shortly" in page[-1][1]
    told = {id(r): r for r in caplog.records if r.name.startswith("app.")}.values()  # once each
    assert not [r for r in told if r.exc_info], [r.getMessage() for r in told if r.exc_info]
    ended = [r for r in told if "an answer stream ended early" in r.getMessage()]
    assert [r.levelname for r in ended] == ["WARNING", "WARNING"]  # one a stream
