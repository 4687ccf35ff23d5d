"""A client that leaves mid-answer frees the generator: over real HTTP, with a slow fake model."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.server import ServerProcess, http, slow_fake_server

TOKEN_DELAY_S = 0.5  # the fake's answer here is 13 tokens: 6.5 s if left running


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("slow-server")
    server = slow_fake_server(root, TOKEN_DELAY_S, min_score=0.05)
    response = http.post(
        f"{server.url}/api/documents",
        files=[("file", ("leave.md", b"# Leave\n\nStaff receive 28 days of paid leave a year."))],
    )
    document_id = response.json()["documents"][0]["id"]
    deadline = time.monotonic() + 30
    while http.get(f"{server.url}/api/documents/{document_id}").json()["status"] != "indexed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    try:
        yield server
    finally:
        server.stop()


def ask(url: str, question: str) -> tuple[int, int]:
    turn = http.post(f"{url}/ui/ask", data={"message": question})
    conversation_id = int(turn.headers["hx-push-url"].rsplit("/", 1)[1])
    question_id = int(re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1))  # type: ignore[union-attr]
    return conversation_id, question_id


def test_leaving_mid_stream_stops_the_answer_and_frees_the_model(
    slow_server: ServerProcess,
) -> None:
    url = slow_server.url
    conversation_id, question_id = ask(url, "How many days of leave do staff get?")
    with http.stream("GET", f"{url}/ui/answers/{question_id}/stream", timeout=30) as response:
        tokens = 0
        for line in response.iter_lines():
            tokens += line.startswith("event: token")
            if tokens == 2:
                break  # the user closed the tab
    left_at = time.monotonic()

    _, second_id = ask(url, "Is the leave paid?")
    with http.stream("GET", f"{url}/ui/answers/{second_id}/stream", timeout=30) as response:
        first_token_after = next(
            time.monotonic() - left_at
            for line in response.iter_lines()
            if line.startswith("event: token")
        )
    # Had the first answer kept the model, the second would wait ~5.5 s for it.
    assert first_token_after < 2.5, first_token_after
    page = http.get(f"{url}/c/{conversation_id}").text
    assert "(stopped)" in page


def test_sse_stream_carries_every_token_and_a_final_message(slow_server: ServerProcess) -> None:
    _, question_id = ask(slow_server.url, "How many days of leave?")
    body = http.get(f"{slow_server.url}/ui/answers/{question_id}/stream", timeout=30).text
    assert body.count("event: token") >= 10
    assert body.rstrip().split("event: ")[-1].startswith("done")
