"""Remote embeddings against stand-in OpenAI-compatible /v1/embeddings servers on loopback:
split across endpoints, fewest outstanding, retry elsewhere, Retry-After, the start-up
probe (dimension, other model, unreachable, wrong key), the health check, the key kept out
of logs, and the settings that build it."""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from litestar.testing import TestClient

from app.config.retrieval import build_embedder
from app.config.search_stages import batched
from app.config.settings import Settings
from app.factory import create_app
from retrieval.embedder import HashingEmbedder
from retrieval.remote_embedder import PROBE_TEXTS, RemoteEmbedder, RemoteEmbedderError
from tests.conftest import add_key, add_user, fake_settings, upload, wait_for, wait_indexed

KEY = "sk-remote-secret-4242"


@dataclass(eq=False)
class StandIn:
    """An embeddings server: hashing vectors of ``dimension`` (``salt`` != "" embeds as
    another model would); ``status`` answers every POST with that code instead."""

    dimension: int = 64
    salt: str = ""
    delay_s: float = 0.0
    status: int = 200
    retry_after: str = "30"
    url: str = ""
    texts: list[list[str]] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)
    running: int = 0
    most_running: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def embed(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return HashingEmbedder(self.dimension).embed_batch([self.salt + t for t in texts])


def serve(stand_in: StandIn) -> tuple[ThreadingHTTPServer, threading.Thread]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with stand_in.lock:
                stand_in.auth.append(self.headers.get("Authorization", ""))
                stand_in.running += 1
                stand_in.most_running = max(stand_in.most_running, stand_in.running)
            try:
                time.sleep(stand_in.delay_s)
                self._answer(body)
            finally:
                with stand_in.lock:
                    stand_in.running -= 1

        def _answer(self, body: dict[str, Any]) -> None:
            if stand_in.status != 200:
                payload = json.dumps({"error": {"message": "not now"}}).encode()
                self.send_response(stand_in.status)
                self.send_header("Retry-After", stand_in.retry_after)
            else:
                texts = body["input"]
                with stand_in.lock:
                    stand_in.texts.append(texts)
                vectors = stand_in.embed(texts)
                rows = [
                    {"index": i, "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode()}
                    for i, v in reversed(list(enumerate(vectors)))  # any order: by "index"
                ]
                payload = json.dumps({"data": rows, "model": body["model"]}).encode()
                self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads, server.block_on_close = True, False
    stand_in.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    return server, thread


@pytest.fixture
def stand_ins() -> Iterator[list[StandIn]]:
    nodes = [StandIn(), StandIn()]
    servers = [serve(node) for node in nodes]
    yield nodes
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join()


def dead_url() -> str:
    with socket.socket() as probe:  # a port that was just free: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def words(count: int) -> list[str]:
    return [f"passage {i} about leave " + "word " * (i % 7) for i in range(count)]


def remote(urls: list[str], **options: Any) -> RemoteEmbedder:
    defaults: dict[str, Any] = {
        "remote_model": "mini",
        "api_key": KEY,
        "count_tokens": lambda texts: [len(t.split()) for t in texts],
        "texts_per_request": 8,
        "timeout_s": 5.0,
        "health_interval_s": 60.0,
    }
    return RemoteEmbedder(urls, **(defaults | options))


def test_a_bulk_call_is_split_across_every_endpoint_at_once(stand_ins: list[StandIn]) -> None:
    a, b = stand_ins
    a.delay_s = b.delay_s = 0.1
    embedder = remote([a.url, b.url], max_outstanding=2)
    try:
        texts = words(64)
        started = time.monotonic()
        vectors = embedder.embed_batch(texts)
        elapsed = time.monotonic() - started
        assert np.allclose(vectors, HashingEmbedder(64).embed_batch(texts), atol=1e-6)
        assert embedder.model_id == "remote:mini" and embedder.dimension == 64
        sent = [sum(map(len, node.texts)) - 1 for node in stand_ins]  # less the probe
        assert sent == [32, 32], sent
        assert max(len(t) for n in stand_ins for t in n.texts) <= 8
        assert a.most_running == b.most_running == 2  # both busy, never above the limit
        assert elapsed < 0.1 * 8 / 2 + 0.3  # 8 requests, 4 at a time (not one by one)
        assert {n.auth[-1] for n in stand_ins} == {f"Bearer {KEY}"}
    finally:
        embedder.close()


def test_a_small_call_is_spread_and_a_question_goes_to_the_least_busy(
    stand_ins: list[StandIn],
) -> None:
    a, b = stand_ins
    embedder = remote([a.url, b.url])
    try:
        embedder.embed_batch(words(6))  # 6 texts, 2 endpoints: 3 each, at once
        assert [len(t) for t in a.texts[1:]] == [3] and [len(t) for t in b.texts[1:]] == [3]
        a.delay_s = 1.0
        slow = threading.Thread(target=embedder.embed_batch, args=(["held up on a"],))
        slow.start()
        wait_for(lambda: a.running == 1, timeout=5)
        for _ in range(3):
            embedder.embed_batch(["a question"])
        slow.join()
        assert len(a.texts) == 3 and len(b.texts) == 5  # the three went to b, idle
    finally:
        embedder.close()


def test_a_failed_piece_is_sent_to_another_endpoint(stand_ins: list[StandIn]) -> None:
    a, b = stand_ins
    embedder = remote([a.url, b.url])
    try:
        a.status = 500
        texts = words(40)
        vectors = embedder.embed_batch(texts)
        assert np.allclose(vectors, HashingEmbedder(64).embed_batch(texts), atol=1e-6)
        assert sum(map(len, b.texts)) - 1 == 40  # every piece ended on b
        errors = embedder.nodes[0].errors
        assert errors["server"] >= 1 and embedder.nodes[0].up  # a 5xx: retried, not down
    finally:
        embedder.close()


def test_retry_after_sets_an_endpoint_aside(stand_ins: list[StandIn]) -> None:
    a, b = stand_ins
    embedder = remote([a.url, b.url])
    try:
        a.status, a.retry_after = 503, "30"
        for _ in range(6):
            embedder.embed_batch(["one question"])
        assert len(a.auth) == 2  # the probe, then one 503: set aside for 30 s
        assert len(b.texts) == 1 + 6
        assert embedder.nodes[0].busy_until > time.monotonic() + 20
    finally:
        embedder.close()


def test_an_endpoint_that_goes_away_is_taken_out_and_checked_back(
    stand_ins: list[StandIn],
) -> None:
    a, b = stand_ins
    embedder = remote([a.url, b.url], health_interval_s=0.1, backoff_max_s=0.2)
    try:
        a.salt = "another model: "  # as if restarted with another model
        wait_for(lambda: not embedder.nodes[0].up, timeout=5)
        before = len(a.texts)
        embedder.embed_batch(words(16))
        assert sum(len(t) for t in a.texts[before:] if t != list(PROBE_TEXTS)) == 0
        a.salt = ""
        wait_for(lambda: embedder.nodes[0].up, timeout=5)
    finally:
        embedder.close()


def test_an_unreachable_endpoint_mid_run_leaves_the_others_serving(
    stand_ins: list[StandIn],
) -> None:
    a, b = stand_ins
    gone = dead_url()
    embedder = remote([a.url, b.url])
    embedder.nodes[1].url = gone + "/v1/embeddings"  # b's address now leads nowhere
    try:
        texts = words(24)
        assert np.allclose(embedder.embed_batch(texts), HashingEmbedder(64).embed_batch(texts))
        assert not embedder.nodes[1].up and embedder.nodes[1].errors["unreachable"] == 1
    finally:
        embedder.close()


def test_start_refuses_endpoints_that_disagree_on_the_dimension(
    stand_ins: list[StandIn],
) -> None:
    a, b = stand_ins
    b.dimension = 32
    with pytest.raises(RemoteEmbedderError, match="32 dimensions, expected 64"):
        remote([a.url, b.url])


def test_start_refuses_an_endpoint_serving_another_model(stand_ins: list[StandIn]) -> None:
    a, b = stand_ins
    b.salt = "other: "
    with pytest.raises(RemoteEmbedderError, match=r"embeds differently from .*another model"):
        remote([a.url, b.url])


def test_start_refuses_an_unreachable_endpoint(stand_ins: list[StandIn]) -> None:
    started = time.monotonic()
    with pytest.raises(RemoteEmbedderError, match=r"did not answer the probe.*unreachable"):
        remote([stand_ins[0].url, dead_url()], timeout_s=1.0)
    assert time.monotonic() - started < 5


def test_start_refuses_a_wrong_key_at_once_and_never_shows_the_key(
    stand_ins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    a, _ = stand_ins
    a.status = 401
    started = time.monotonic()
    with pytest.raises(RemoteEmbedderError, match="refused: HTTP 401") as raised:
        remote([a.url], timeout_s=30.0)
    assert time.monotonic() - started < 5  # final: not retried for 30 s
    assert KEY not in str(raised.value) and KEY not in caplog.text


def test_the_key_is_never_logged(
    stand_ins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore included
    a, b = stand_ins
    embedder = remote([a.url, b.url], health_interval_s=0.05)
    try:
        a.status = 500
        embedder.embed_batch(words(20))
        a.status, b.status = 503, 503
        with pytest.raises(RemoteEmbedderError) as raised:
            embedder.embed_batch(["no one to answer"])
        time.sleep(0.2)  # health checks too
    finally:
        embedder.close()
    assert "embedding request to" in caplog.text  # the failures were logged
    assert KEY not in caplog.text and KEY not in str(raised.value)
    assert KEY not in repr(embedder.__dict__.get("nodes"))


def test_same_as_local_is_checked_against_the_local_vectors(stand_ins: list[StandIn]) -> None:
    a, b = stand_ins
    local = HashingEmbedder(64).embed_batch(list(PROBE_TEXTS))
    embedder = remote([a.url, b.url], expected=local, model_id="hashing-64", tolerance=1e-4)
    assert embedder.model_id == "hashing-64"
    embedder.close()
    other = HashingEmbedder(64).embed_batch(["something else"])
    with pytest.raises(RemoteEmbedderError, match="differently from the local model"):
        remote([a.url, b.url], expected=other, tolerance=1e-4)


def test_the_settings(stand_ins: list[StandIn]) -> None:
    a, b = stand_ins
    settings = Settings(
        embedder_url=json.dumps([a.url, b.url]),
        embedder_remote_model="mini",
        embedder_api_key=KEY,
        embed_batch_size=4,
    )
    assert settings.embedder.remote_urls() == (a.url, b.url)
    assert KEY not in repr(settings)
    embedder = build_embedder(settings)
    assert isinstance(embedder, RemoteEmbedder)
    try:
        assert batched(settings, embedder) is embedder  # it spreads its calls itself
        assert embedder.model_id == "remote:mini" and embedder.texts_per_request == 4
        # passages are cut with the local model's tokenizer, as when embedding locally
        assert embedder.count_tokens(["Staff receive twenty eight days."]) == [6]
        assert {n.auth[0] for n in stand_ins} == {f"Bearer {KEY}"}
    finally:
        embedder.close()
    assert Settings(embedder_url=a.url, embedder_remote_model="m").embedder.remote_urls() == (
        a.url,
    )
    assert Settings().embedder.remote_urls() == ()
    with pytest.raises(ValueError, match="needs RAGDESK_EMBEDDER_REMOTE_MODEL"):
        Settings(embedder_url=a.url)
    with pytest.raises(ValueError, match="distinct"):
        Settings(embedder_url=json.dumps([a.url, a.url]), embedder_remote_model="m")


def test_switching_to_remote_re_embeds_the_documents(
    tmp_path: Path, stand_ins: list[StandIn]
) -> None:
    """The index was built by another model: its tag differs, so the documents go back to
    the queue and come back with the remote's vectors, as after any model change."""
    data = tmp_path / "data"
    a, b = stand_ins
    with TestClient(create_app(fake_settings(data))) as client:
        client.app.state.services.wait_until_loaded(30)
        add_user(client, "keyholder", "admin")
        client.headers["Authorization"] = f"Bearer {add_key(client, 'keyholder')}"
        leave = ("leave.md", b"# Leave\n\nStaff get 28 days of leave every year.")
        document_id = upload(client, leave).json()["documents"][0]["id"]
        assert wait_indexed(client, document_id)["status"] == "indexed"
    remote_settings = fake_settings(
        data, embedder_url=json.dumps([a.url, b.url]), embedder_remote_model="mini"
    )
    with TestClient(create_app(remote_settings)) as client:
        services = client.app.state.services
        services.wait_until_loaded(60)
        assert services.load_errors == []
        client.headers["Authorization"] = f"Bearer {add_key(client, 'keyholder')}"
        assert wait_indexed(client, document_id)["status"] == "indexed"
        assert services.store.embedded_chunk_ids("remote:mini").size > 0
        hits = client.post("/api/search", json={"query": "days of leave"}).json()["hits"]
        assert hits and hits[0]["document_id"] == document_id
    assert sum(len(t) for n in stand_ins for t in n.texts) > 2  # the nodes did the work


def test_a_refused_probe_keeps_retrieval_from_loading(
    tmp_path: Path, stand_ins: list[StandIn]
) -> None:
    """Nothing is embedded with endpoints that failed the start-up check: retrieval stays
    unloaded, /health/ready says the embedder failed, the log and load_errors say why."""
    a, b = stand_ins
    b.dimension = 32
    settings = fake_settings(
        tmp_path / "data", embedder_url=json.dumps([a.url, b.url]), embedder_remote_model="m"
    )
    with TestClient(create_app(settings)) as client:
        services = client.app.state.services
        services.wait_until_loaded(60)
        assert services.retrieval is None
        (error,) = services.load_errors
        assert "RemoteEmbedderError" in error and "32 dimensions, expected 64" in error
        ready = client.get("/health/ready")
        assert ready.status_code == 503 and "the embedder failed to load" in ready.text
