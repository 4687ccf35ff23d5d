"""The graceful drain on SIGTERM (app/ops/drain.py, app/ops/server.py): in-process for the
refusals, then over real HTTP against a real server process with answers in flight."""

from __future__ import annotations

import re
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from app.config.settings import Settings
from app.migrations import open_database
from retrieval.index_files import read_manifest
from tests.pg_kit import store_under_test
from tests.server import ServerProcess, http, slow_fake_server

LEAVE = b"# Leave\n\nStaff receive twenty eight days of paid leave every single calendar year."


def test_draining_turns_readiness_and_new_questions_to_503(client: TestClient[Any]) -> None:
    assert client.get("/health/ready").status_code == 200
    client.app.state.drain.begin()

    ready = client.get("/health/ready")
    assert ready.status_code == 503 and ready.headers["retry-after"]
    assert ready.json()["status"] == "draining"
    for path, body in [
        ("/api/chat", {"message": "How much leave?"}),
        ("/api/completions", {"prompt": "Once", "model": "fake"}),
        ("/v1/completions", {"prompt": "Once", "model": "fake"}),
        (
            "/v1/chat/completions",
            {"model": "fake", "messages": [{"role": "user", "content": "Hi"}]},
        ),
    ]:
        refused = client.post(path, json=body)
        assert refused.status_code == 503, (path, refused.text)
        assert int(refused.headers["retry-after"]) > 0, path
        assert "shutting down" in refused.text, path
    assert client.post("/v1/completions", json={"prompt": "x"}).json()["error"]["type"] == (
        "server_error"  # /v1 keeps OpenAI's shape
    )
    asked = client.post(
        "/ui/ask", data={"message": "How much leave?"}, headers={"HX-Request": "true"}
    )
    assert asked.status_code == 503 and "shutting down" in asked.text
    # Everything else is served as before: documents, search, the live probe.
    assert client.get("/api/documents").status_code == 200
    assert client.post("/api/search", json={"query": "leave"}).status_code == 200
    assert client.get("/health/live").status_code == 200


# --- a real server process -------------------------------------------------------------------


class Stream:
    """A streamed POST read on a thread: its lines, and when the first token came."""

    def __init__(self, url: str, json: dict[str, Any] | None = None) -> None:
        self.lines: list[str] = []
        self.status = 0
        self.first_token = threading.Event()
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._read, args=(url, json), daemon=True)
        self._thread.start()

    def _read(self, url: str, json: dict[str, Any] | None) -> None:
        method = "GET" if json is None else "POST"
        try:
            with http.stream(method, url, json=json, timeout=60) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    self.lines.append(line)
                    if line.startswith(("event: token", 'data: {"id"')):
                        self.first_token.set()
        except Exception as exc:  # reported by the test
            self.error = exc
        finally:
            self.first_token.set()

    def result(self, timeout: float = 60) -> list[str]:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the stream never ended"
        assert self.error is None, self.error
        return self.lines


def _indexed_server(root: Path, token_delay_s: float, **settings: Any) -> ServerProcess:
    server = slow_fake_server(root, token_delay_s, min_score=0.05, **settings)
    response = http.post(f"{server.url}/api/documents", files=[("file", ("leave.md", LEAVE))])
    document_id = response.json()["documents"][0]["id"]
    deadline = time.monotonic() + 30
    while http.get(f"{server.url}/api/documents/{document_id}").json()["status"] != "indexed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return server


def test_sigterm_lets_running_answers_finish_then_exits_0(tmp_path: Path) -> None:
    # Checkpoints only when stopping: the drain's shutdown must write the last one.
    server = _indexed_server(tmp_path, 0.25, drain_s=30, index_checkpoint_seconds=3600)
    url = server.url
    upload = http.post(
        f"{url}/api/documents", files=[("file", ("late.md", b"# Late\n\nA late memo."))]
    )
    assert upload.status_code == 201
    answer = Stream(f"{url}/api/chat", {"message": "How many days of leave do staff get?"})
    assert answer.first_token.wait(30)
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.2)  # the handler runs between two bytecodes of the main thread

    ready = httpx.get(f"{url}/health/ready", timeout=5)
    assert ready.status_code == 503 and ready.json()["status"] == "draining"
    refused = http.post(f"{url}/api/chat", json={"message": "And sick leave?"}, timeout=5)
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) > 0
    refused = http.post(
        f"{url}/v1/chat/completions",
        json={"model": "fake", "messages": [{"role": "user", "content": "Hi"}]},
        timeout=5,
    )
    assert refused.status_code == 503 and refused.headers["retry-after"]

    lines = answer.result()
    assert answer.status == 200
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[-1] == "done" and events.count("token") >= 10, events
    assert server.exit_code(30) == 0
    log = server.log_path.read_text()
    assert "drained: 1 answers finished, 0 cut" in log, log[-3000:]
    if store_under_test() == "postgresql":  # vectors in pgvector: no checkpoint on disk
        return
    # The worker checkpointed on the way out: the index on disk has every passage.
    settings = Settings(data_dir=server.data_dir)
    with sqlite3.connect(settings.db_path) as db:
        chunks = db.execute("select count(*) from chunks").fetchone()[0]
    assert read_manifest(settings.index_dir).count == chunks >= 2


def test_answers_still_running_at_the_deadline_end_with_an_error_event(tmp_path: Path) -> None:
    server = _indexed_server(tmp_path, 0.5, drain_s=1)
    url = server.url
    chat = Stream(f"{url}/api/chat", {"message": "How many days of leave do staff get?"})
    raw = Stream(f"{url}/v1/completions", {"model": "fake", "prompt": "Once", "stream": True})
    asked = http.post(f"{url}/ui/ask", data={"message": "How many days of leave?"})
    question_id = int(re.search(r"/ui/answers/(\d+)/stream", asked.text).group(1))  # type: ignore[union-attr]
    page = Stream(f"{url}/ui/answers/{question_id}/stream")
    assert all(s.first_token.wait(30) for s in (chat, raw, page))
    assert server.process is not None
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)

    chat_lines = [line for line in chat.result() if line]
    assert chat_lines[-2:] == [
        "event: error",
        'data: {"status": 503, "detail": "the server is shutting down; ask again in a moment"}',
    ], chat_lines
    assert time.monotonic() - started < 5
    raw_lines = [line for line in raw.result() if line]
    assert '"code": "server_shutting_down"' in raw_lines[-1], raw_lines
    page_lines = [line for line in page.result() if line]
    assert page_lines[-2] == "event: done" and "Shutting down" in page_lines[-1], page_lines
    assert server.exit_code(30) == 0
    assert "drained: 0 answers finished, 3 cut at the deadline" in server.log_path.read_text()
    # A cut answer is kept as a client that left would keep it: what was said, marked stopped.
    db = open_database(Settings(data_dir=server.data_dir))  # the server's store, either
    try:
        stored = db.read().execute("select content from messages where reply_to = ?", [question_id])
        assert stored.fetchone()[0].endswith("(stopped)")
    finally:
        db.close()


def test_a_second_sigterm_stops_at_once(tmp_path: Path) -> None:
    server = _indexed_server(tmp_path, 0.5, drain_s=60)
    chat = Stream(f"{server.url}/api/chat", {"message": "How many days of leave do staff get?"})
    assert chat.first_token.wait(30)
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert server.process.poll() is None  # draining: the answer has ~5 s to go
    server.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert server.exit_code(5) == -signal.SIGTERM
    assert time.monotonic() - started < 2
    with pytest.raises(AssertionError, match="peer closed connection"):
        chat.result(10)  # cut off with the process, mid-stream


@pytest.mark.real
def test_a_real_model_answer_in_flight_finishes_on_sigterm(tmp_path: Path) -> None:
    """The same drain with the bundled model generating (llama.cpp's engine thread)."""
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log", drain_s=60).start()
    models = http.get(f"{server.url}/v1/models").json()["data"]
    body = {"model": models[0]["id"], "prompt": "Once upon a time", "max_tokens": 96}
    stream = Stream(f"{server.url}/v1/completions", {**body, "stream": True, "temperature": 0})
    assert stream.first_token.wait(60)
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    assert httpx.get(f"{server.url}/health/ready", timeout=5).status_code == 503
    refused = http.post(f"{server.url}/v1/completions", json=body, timeout=5)
    assert refused.status_code == 503 and refused.headers["retry-after"]
    lines = [line for line in stream.result() if line]
    assert lines[-1] == "data: [DONE]" and '"finish_reason":"length"' in lines[-2], lines[-3:]
    assert server.exit_code(60) == 0


@pytest.mark.real
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_n3_stop_while_ingestion_embeds_a_large_document_exits_0_and_resumes(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """The real embedder (torch) busy on thousands of passages when the signal comes: the
    worker stops between two slices, the process exits 0 (it used to abort: SIGABRT, 134),
    and the document finishes on the next start."""
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log", generator_backend="fake")
    server.start()
    # ~400 passages: about 20 s of embedding on 2 cores, so the signal finds the worker in
    # its slices (the status is polled every 0.2 s), and the resumed run is short too. 15,000
    # sections took 2.5-3 minutes a signal, a quarter of the whole SQLite pass.
    text = "\n\n".join(
        f"Section {i}. The policy on item {i} was reviewed by the board in meeting {i}."
        for i in range(4_000)
    )
    response = http.post(f"{server.url}/api/documents", files=[("file", ("big.txt", text))])
    document_id = response.json()["documents"][0]["id"]

    def status() -> str:
        return str(http.get(f"{server.url}/api/documents/{document_id}").json()["status"])

    deadline = time.monotonic() + 300
    while status() not in ("embedding", "indexed", "failed"):  # both endings must hold
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert server.process is not None
    server.process.send_signal(sig)
    assert server.exit_code(90) == 0
    assert "terminate called" not in server.log_path.read_text()

    server.start()
    try:
        deadline = time.monotonic() + 600
        while status() != "indexed":
            assert status() != "failed" and time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        server.stop()
