"""A ``/v1`` streaming client that leaves frees the model: real HTTP, a slow fake model."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.server import ServerProcess, http, slow_fake_server

TOKEN_DELAY_S = 0.5  # the fake answers 6 tokens here: 3 s if left running
RUNNING = 'ragdesk_requests_running{model="fake"}'


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("slow-openai-server")
    server = slow_fake_server(root, TOKEN_DELAY_S)
    try:
        yield server
    finally:
        server.stop()


def running(url: str) -> float:
    for line in http.get(f"{url}/metrics").text.splitlines():
        if line.startswith(RUNNING):
            return float(line.split()[-1])
    raise AssertionError("no running gauge")


def test_leaving_a_stream_cancels_generation(slow_server: ServerProcess) -> None:
    url = slow_server.url
    payload = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    with http.stream("POST", f"{url}/v1/chat/completions", json=payload, timeout=30) as response:
        contents = 0
        for line in response.iter_lines():
            contents += '"content":"' in line and '"content":""' not in line
            if contents == 1:
                assert running(url) == 1
                break  # the client goes away after the first word
    left_at = time.monotonic()
    while running(url) != 0:  # left running, it would take 2.5 s more
        assert time.monotonic() - left_at < 1.0, "the generation kept running"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("path", "payload"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 6}),
        ("/api/completions", {"prompt": "hi", "max_tokens": 6}),
    ],
)
def test_leaving_before_a_whole_answer_cancels_generation(
    slow_server: ServerProcess, path: str, payload: dict[str, object]
) -> None:
    """Non-streamed: nothing is written until the end, so the server watches for the
    client's disconnect instead."""
    url = slow_server.url
    with pytest.raises(httpx.TimeoutException):
        http.post(f"{url}{path}", json={**payload, "stream": False}, timeout=0.8)
    left_at = time.monotonic()
    while running(url) != 0:  # left running, it would take ~2 s more
        assert time.monotonic() - left_at < 1.0, "the generation kept running"
        time.sleep(0.05)


def test_leaving_a_grounded_stream_is_recorded_as_stopped(slow_server: ServerProcess) -> None:
    """Review of #28: a grounded /v1 stream the client left wrote no usage event."""
    url = slow_server.url
    note = b"# Canteen\n\nThe canteen opens at noon and serves soup on Fridays."
    posted = http.post(f"{url}/api/documents", files=[("file", ("canteen.md", note))])
    document = posted.json()["documents"][0]["id"]
    deadline = time.monotonic() + 60
    while http.get(f"{url}/api/documents/{document}").json()["status"] != "indexed":
        assert time.monotonic() < deadline, "the note was not indexed"
        time.sleep(0.1)

    def stopped() -> int:
        return int(http.get(f"{url}/api/usage?period=7d").json()["totals"]["stopped"])

    before = stopped()
    question = {"role": "user", "content": "When does the canteen open?"}
    payload = {"model": "rag", "messages": [question], "stream": True}
    with http.stream("POST", f"{url}/v1/chat/completions", json=payload, timeout=30) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # the client goes away after the first word
    deadline = time.monotonic() + 10
    while stopped() != before + 1:
        assert time.monotonic() < deadline, "no usage event for the stream left mid-answer"
        time.sleep(0.1)
