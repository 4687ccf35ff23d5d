"""The Stop button: POST /ui/questions/{id}/stop cancels the running completion on the server."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import pytest
from litestar.testing import TestClient

from app.chat.stopping import RunningAnswers, StopRequested, stopped_text
from llm.backend import wait_idle
from llm.channel import Completion
from llm.params import Finished, TextDelta, Usage
from tests.conftest import fake_model, sse_events, upload, wait_for, wait_indexed

TOKENS = [f" word{n}" for n in range(40)]
DELAY_S = 0.1  # 40 tokens: 4 s if nothing stops them


def ask(client: TestClient[Any], question: str) -> tuple[str, int]:
    turn = client.post("/ui/ask", data={"message": question})
    assert turn.status_code == 200
    assert 'hx-post="/ui/questions/' in turn.text  # the streaming answer has a Stop button
    question_id = int(re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1))  # type: ignore[union-attr]
    return turn.headers["hx-push-url"], question_id


def read_stream(client: TestClient[Any], question_id: int) -> tuple[list[str], threading.Thread]:
    """The answer's stream read on a thread of its own; its body lands in the list."""
    body: list[str] = []
    reader = threading.Thread(
        target=lambda: body.append(client.get(f"/ui/answers/{question_id}/stream").text)
    )
    reader.start()
    return body, reader


@pytest.fixture
def slow_client(client: TestClient[Any]) -> TestClient[Any]:
    created = upload(client, ("leave.md", b"# Leave\n\nStaff get 28 days of paid leave.")).json()
    wait_indexed(client, created["documents"][0]["id"])
    fake_model(client).token_delay_s = DELAY_S
    return client


def test_stop_ends_generation_and_stores_the_partial_answer(
    slow_client: TestClient[Any],
) -> None:
    client = slow_client
    backend = fake_model(client)
    backend.enqueue(["**Leave**", *TOKENS])
    url, question_id = ask(client, "How much leave do staff get?")
    started = time.monotonic()
    body, reader = read_stream(client, question_id)
    chat = client.app.state.services.require_chat()
    wait_for(lambda: chat.running.is_running(question_id), timeout=5)
    time.sleep(3 * DELAY_S)  # a few tokens out

    stop = client.post(f"/ui/questions/{question_id}/stop")
    assert stop.status_code == 204
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert time.monotonic() - started < 2.0  # far short of the 4 s the answer would take
    assert wait_idle(backend, 1.0), "the generation ended on the server"

    events = sse_events(body[0])
    tokens = [data for name, data in events if name == "token"]
    assert 1 <= len(tokens) < 20
    name, done = events[-1]
    assert name == "done"
    assert '">(stopped) · not verified</span>' in done
    # The partial answer, rendered as markdown; it cites nothing, so it is marked so.
    assert re.search(r"<strong>(<span [^>]*>)?Leave(</span>)?</strong>", done)
    assert "no source</span>" in done
    assert "stop-button" not in done  # the finished answer has no Stop button

    page = client.get(url).text
    assert '">(stopped) · not verified</span>' in page
    # The stored answer ends the stream for good: a reconnect replays it.
    assert [n for n, _ in sse_events(client.get(f"/ui/answers/{question_id}/stream").text)] == [
        "done"
    ]
    # What the model said is kept as it said it, for the next turn's prompt (and KV cache).
    question = chat.conversations.message(question_id)
    stored = chat.conversations.answer_to(question)
    assert stored is not None and stored.context is not None
    assert stored.context.answer.startswith("**Leave** word0")
    # Stopping it again is a clear 404, and the conversation goes on.
    assert client.post(f"/ui/questions/{question_id}/stop").status_code == 404
    backend.token_delay_s = 0.0
    conversation_id = url.rsplit("/", 1)[1]
    follow = client.post(
        "/ui/ask", data={"message": "Is it paid?", "conversation_id": conversation_id}
    )
    assert follow.status_code == 200


def test_a_stopped_answer_is_checked_like_a_finished_one_and_marked_unverified(
    slow_client: TestClient[Any],
) -> None:
    """One rule for unsupported text: a wrong number the reader saw stream before Stop is
    marked, as it would be in a finished answer, and the answer says it is unverified."""
    client = slow_client
    backend = fake_model(client)
    backend.enqueue(["Staff get 35 days of paid leave [1].", *TOKENS])
    _, question_id = ask(client, "How much leave do staff get?")
    body, reader = read_stream(client, question_id)
    time.sleep(3 * DELAY_S)
    assert client.post(f"/ui/questions/{question_id}/stop").status_code == 204
    reader.join(timeout=5)
    _, done = sse_events(body[0])[-1]
    assert '<span class="unsupported"' in done and "not in source" in done
    assert "(stopped) · not verified" in done
    chat = client.app.state.services.require_chat()
    stored = chat.conversations.answer_to(chat.conversations.message(question_id))
    first = stored.unsupported[0]  # the cut-off words after it ("word0") count too
    assert (first.text, first.reason) == (
        "Staff get 35 days of paid leave [1].",
        "not in the cited source",
    )


@pytest.mark.parametrize("path", ["999999", "0", "-1", "abc", "99999999999999999999999"])
def test_stopping_what_is_not_running_is_a_clear_4xx(client: TestClient[Any], path: str) -> None:
    response = client.post(f"/ui/questions/{path}/stop", headers={"HX-Request": "true"})
    assert response.status_code in (404, 422), response.text
    assert 'role="alert"' in response.text


def test_stopping_a_question_not_yet_streamed_or_already_answered_is_404(
    client: TestClient[Any],
) -> None:
    _, question_id = ask(client, "Anything?")
    assert client.post(f"/ui/questions/{question_id}/stop").status_code == 404
    client.get(f"/ui/answers/{question_id}/stream")  # answered (nothing found)
    assert client.post(f"/ui/questions/{question_id}/stop").status_code == 404


def _delta_then_finish(completion: Completion, cancelled_first: bool) -> None:
    completion.push(TextDelta("a"))
    completion.wait_cancelled(2.0)
    reason = "cancelled" if completion.cancelled else "stop"
    completion.push(Finished(reason, Usage(1, 0, 1), "fake"))
    assert completion.cancelled == cancelled_first


def test_a_stop_before_the_completion_starts_applies_when_it_does() -> None:
    running = RunningAnswers()
    running.stop(7)
    completion = Completion()
    tracked = running.track(7, completion)
    assert completion.cancelled

    async def consume() -> list[object]:
        seen: list[object] = []
        with pytest.raises(StopRequested):
            async for event in tracked:
                seen.append(event)
        return seen

    completion.push(TextDelta("late"))
    assert asyncio.run(consume()) == []
    assert not running.is_running(7)
    running.forget(7)
    other = Completion()
    running.track(7, other)  # a later answer to the same id is not stopped by the old request
    assert not other.cancelled


def test_a_running_completion_stops_and_unregisters() -> None:
    running = RunningAnswers()
    completion = Completion()
    tracked = running.track(3, completion)
    thread = threading.Thread(target=_delta_then_finish, args=(completion, True))

    async def consume() -> list[str]:
        texts: list[str] = []
        with pytest.raises(StopRequested):
            async for event in tracked:
                assert isinstance(event, TextDelta)
                texts.append(event.text)
                running.stop(3)
        return texts

    thread.start()
    assert asyncio.run(consume()) == ["a"]
    thread.join(timeout=3)
    assert not running.is_running(3)


def test_stopped_text_marks_the_cut() -> None:
    assert stopped_text("Half an answer") == "Half an answer …(stopped)"
    assert stopped_text("") == "(stopped)"
