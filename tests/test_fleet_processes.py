"""A real fleet on one machine: a front Ragdesk whose model lists two backend Ragdesk nodes'
/v1, each a process with its own data directory and port, over loopback. Routing under
load, a conversation kept on one node, failover when a node is killed mid-load, recovery
when it returns. The nodes run the fake model slowed to a pace where requests overlap."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from app.auth.keys import KEY_SHAPE
from app.auth.passwords import token_hash
from app.config.settings import Settings
from tests.conftest import sse_events
from tests.server import ServerProcess, http

TOKEN_DELAY_S = 0.03  # six tokens an answer: ~0.2 s each
LEAVE = b"# Leave\n\nStaff receive twenty eight days of paid leave every single calendar year."


def node_settings() -> dict[str, object]:
    return {
        "embedder_backend": "fake",
        "generator_backend": "fake",
        "fake_token_delay_s": TOKEN_DELAY_S,
    }


def accept_key(node: ServerProcess, key: str) -> None:
    """Let ``node`` (provisioned, not necessarily started) accept another node's API key, so
    that the front reaches every node with one key, as an operator would set them up."""
    match = KEY_SHAPE.fullmatch(key)
    assert match is not None
    with sqlite3.connect(
        Settings.model_validate({"data_dir": node.data_dir}).db_path, timeout=30
    ) as db:
        (user_id,) = db.execute("SELECT id FROM users WHERE name = ?", [node.username]).fetchone()
        db.execute(
            "INSERT INTO api_keys (user_id, name, prefix, key_hash, read_only, scoped,"
            " created_at) VALUES (?, 'front', ?, ?, 0, 0, ?)",
            [user_id, match.group(1), token_hash(key), time.time()],
        )


@dataclass
class Fleet:
    front: ServerProcess
    a: ServerProcess
    b: ServerProcess

    def endpoint_metric(self, name: str) -> dict[str, float]:
        """``ragdesk_fleet_endpoint_<name>`` by node: "a" or "b"."""
        text = http.get(f"{self.front.url}/metrics", timeout=10).text
        found: dict[str, float] = {}
        for node, server in (("a", self.a), ("b", self.b)):
            line = rf'^ragdesk_fleet_endpoint_{name}\{{endpoint="{re.escape(server.url)}",'
            match = re.search(line + r'model="fleet"\} (\S+)$', text, re.MULTILINE)
            found[node] = float(match.group(1)) if match else 0.0
        return found


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("fleet")
    a = ServerProcess(root / "a", root / "a.log", **node_settings()).start(ready_timeout=60)
    b = ServerProcess(root / "b", root / "b.log", **node_settings())
    b.provision()
    accept_key(b, a.api_key)
    b.start(ready_timeout=60)
    entry = {"url": [a.url, b.url], "remote_model": "default", "api_key": a.api_key}
    front = ServerProcess(
        root / "front",
        root / "front.log",
        embedder_backend="fake",
        generator_model=root / "unused.gguf",  # registered, never loaded: the fleet answers
        models=json.dumps({"fleet": entry}),
        chat_model="fleet",
        fleet_health_interval_s=0.5,
        fleet_backoff_max_s=2,
        request_timeout_s=30,
    ).start(ready_timeout=60)
    try:
        yield Fleet(front, a, b)
    finally:
        for server in (front, a, b):
            server.stop()


def complete(front: ServerProcess, timeout_s: float = 20.0) -> tuple[str, str]:
    """One /v1 completion through the front: ("answered" | "error" | "no answer", detail)."""
    body = {"model": "fleet", "prompt": "Hello", "max_tokens": 8, "temperature": 0}
    try:
        response = http.post(f"{front.url}/v1/completions", json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:  # a hang (timeout) or a dropped connection
        return "no answer", repr(exc)
    if response.status_code == 200 and response.json()["choices"][0]["text"]:
        return "answered", ""
    return "error", f"{response.status_code} {response.json()['error']['message']}"


def load(front: ServerProcess, clients: int, each: int) -> list[tuple[str, str]]:
    results: list[tuple[str, str]] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(each):
            outcome = complete(front)
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_both_nodes_serve_under_concurrent_load(fleet: Fleet) -> None:
    before = fleet.endpoint_metric("requests_total")
    results = load(fleet.front, clients=6, each=4)
    assert Counter(r[0] for r in results) == {"answered": 24}, results
    after = fleet.endpoint_metric("requests_total")
    sent = {node: after[node] - before[node] for node in after}
    assert sent["a"] >= 6 and sent["b"] >= 6 and sum(sent.values()) == 24, sent
    for node in (fleet.a, fleet.b):  # and the nodes themselves answered them
        text = http.get(f"{node.url}/metrics", timeout=10).text
        assert re.search(r'^ragdesk_requests_total\{model="fake",reason="\w+"\} [1-9]', text, re.M)
    assert fleet.endpoint_metric("up") == {"a": 1.0, "b": 1.0}
    assert fleet.endpoint_metric("outstanding") == {"a": 0.0, "b": 0.0}


def test_a_conversation_stays_on_one_node(fleet: Fleet) -> None:
    front = fleet.front
    uploaded = http.post(f"{front.url}/api/documents", files=[("file", ("leave.md", LEAVE))])
    document_id = uploaded.json()["documents"][0]["id"]
    deadline = time.monotonic() + 60
    while http.get(f"{front.url}/api/documents/{document_id}").json()["status"] != "indexed":
        assert time.monotonic() < deadline, "the document was never indexed"
        time.sleep(0.2)
    before = fleet.endpoint_metric("requests_total")
    conversation = None
    for question in ("How much leave?", "And paid leave?", "Every year?", "Staff leave?"):
        body: dict[str, object] = {"message": question}
        if conversation is not None:
            body["conversation_id"] = conversation
        response = http.post(f"{front.url}/api/chat", json=body, timeout=30)
        events = dict(sse_events(response.text))
        assert "error" not in events, response.text
        conversation = json.loads(events["done"])["conversation_id"]
    after = fleet.endpoint_metric("requests_total")
    sent = sorted(after[node] - before[node] for node in after)
    assert sent == [0, 4], (before, after)  # sequential and idle: without stickiness, 2 and 2


def test_failover_when_a_node_is_killed_and_recovery(fleet: Fleet) -> None:
    results: list[tuple[str, str]] = []
    loader = threading.Thread(target=lambda: results.extend(load(fleet.front, 4, 40)))
    loader.start()
    time.sleep(2.0)  # well into the load
    fleet.b.kill()  # SIGKILL, mid-load
    killed_at = time.monotonic()
    loader.join(180)
    assert not loader.is_alive()
    outcomes = Counter(r[0] for r in results)
    print(f"failover: {dict(outcomes)}")  # shown with -s
    assert outcomes["no answer"] == 0, results  # nothing hung, nothing dropped
    assert outcomes["answered"] >= 0.95 * len(results) == 0.95 * 160, outcomes
    errors = [detail for outcome, detail in results if outcome == "error"]
    assert all("mid-answer" in e or "cannot reach" in e for e in errors), errors
    assert fleet.endpoint_metric("up") == {"a": 1.0, "b": 0.0}
    assert time.monotonic() - killed_at < 120

    fleet.b.start(ready_timeout=60)  # the same port and data directory
    deadline = time.monotonic() + 15  # checked again within fleet_backoff_max_s (2 s)
    while fleet.endpoint_metric("up")["b"] != 1.0:
        assert time.monotonic() < deadline, "the node never came back into rotation"
        time.sleep(0.2)
    before = fleet.endpoint_metric("requests_total")
    results = load(fleet.front, clients=4, each=3)
    assert Counter(r[0] for r in results) == {"answered": 12}, results
    after = fleet.endpoint_metric("requests_total")
    assert after["b"] - before["b"] >= 3, (before, after)
