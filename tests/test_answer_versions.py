"""Answer versions (issue #14): regenerating keeps the earlier answer; ‹ 1/2 › switches
between them; the newest is shown by default; the version chosen last is the current one,
shown on reload and repeated in the follow-up turn's prompt. And the Copy button's text."""

from __future__ import annotations

import re
from typing import Any

from litestar.testing import TestClient

from app.chat.records import Citation, Message
from app.web.ui_format import copy_text
from tests.conftest import fake_model, sse_events
from tests.test_ui_routes import ask, indexed_document

HX = {"HX-Request": "true"}


def regenerate(client: TestClient[Any], answer: int, *tokens: str) -> str:
    """Regenerate ``answer`` with ``tokens``; the new answer's HTML as streamed."""
    fake_model(client).enqueue(list(tokens))
    again = client.post(f"/ui/messages/{answer}/regenerate", headers=HX)
    assert again.status_code == 200, again.text
    stream = re.search(r'sse-connect="(/ui/answers/\d+/stream)"', again.text)
    assert stream is not None
    return sse_events(client.get(stream.group(1)).text)[-1][1]


def versions_shown(html: str) -> list[str]:
    return re.findall(r'class="version-count"[^>]*>([0-9]+/[0-9]+)<', html)


def test_regenerate_keeps_the_earlier_answer_and_versions_switch(client: TestClient[Any]) -> None:
    indexed_document(client)
    model = fake_model(client)
    model.enqueue(["Noon", " daily [1]."])
    conversation = ask(client, "When does the canteen open?")
    page = client.get(f"/c/{conversation}").text
    assert versions_shown(page) == []  # one answer: no ‹ › at all
    first = int(re.findall(r'id="message-(\d+)"', page)[-1])
    question = first - 1

    done = regenerate(client, first, "Twelve", " o'clock [1].")
    assert "Twelve o" in done and versions_shown(done) == ["2/2"]
    page = client.get(f"/c/{conversation}").text
    assert "Twelve o" in page and "Noon daily" not in page  # the newest, by default
    assert versions_shown(page) == ["2/2"]

    back = client.post(f"/ui/questions/{question}/versions/1", headers=HX)
    assert back.status_code == 200, back.text
    assert "Noon daily" in back.text and versions_shown(back.text) == ["1/2"]
    assert 'id="sources-pane" hx-swap-oob="true"' in back.text  # its sources, too
    assert f'hx-post="/ui/questions/{question}/versions/2"' in back.text  # › goes forward
    page = client.get(f"/c/{conversation}").text
    assert "Noon daily" in page and "Twelve o" not in page  # the choice stays

    # The follow-up turn's prompt repeats the version shown: the chosen one.
    model.enqueue(["Also on Sundays [1]."])
    asked = len(model.history)
    ask(client, "Does the canteen open at noon daily on Sundays?", conversation)
    assert len(model.history) == asked + 1
    prompt = model.history[-1].prompt
    assert "Sundays" in prompt
    assert "Noon daily" in prompt and "Twelve o" not in prompt

    assert client.post(f"/ui/questions/{question}/versions/3", headers=HX).status_code == 404
    assert client.post(f"/ui/questions/{question}/versions/0", headers=HX).status_code == 422


def test_a_third_version_and_the_api_shows_the_current_one(client: TestClient[Any]) -> None:
    indexed_document(client)
    fake_model(client).enqueue(["One [1]."])
    conversation = ask(client, "When does the canteen open?")
    answer = int(re.findall(r'id="message-(\d+)"', client.get(f"/c/{conversation}").text)[-1])
    regenerate(client, answer, "Two [1].")
    second = int(re.findall(r'id="message-(\d+)"', client.get(f"/c/{conversation}").text)[-1])
    done = regenerate(client, second, "Three [1].")
    assert versions_shown(done) == ["3/3"]
    messages = client.get(f"/api/conversations/{conversation}").json()["messages"]
    assert [m["content"] for m in messages if m["role"] == "assistant"] == ["Three [1]."]
    exported = client.get(f"/ui/conversations/{conversation}/export").text
    assert "Three" in exported and "One" not in exported and "Two" not in exported


def test_choosing_a_version_while_an_answer_is_written_is_refused(
    client: TestClient[Any],
) -> None:
    indexed_document(client)
    fake_model(client).enqueue(["One [1]."])
    conversation = ask(client, "When does the canteen open?")
    answer = int(re.findall(r'id="message-(\d+)"', client.get(f"/c/{conversation}").text)[-1])
    regenerate(client, answer, "Two [1].")
    chat = client.app.state.services.require_chat()
    chat._answering.add(answer - 1)  # as while the next version streams
    try:
        refused = client.post(f"/ui/questions/{answer - 1}/versions/1", headers=HX)
        assert refused.status_code == 409
    finally:
        chat._answering.discard(answer - 1)


def test_copy_text_keeps_the_markers_as_numbered_on_the_page() -> None:
    def cited(number: int) -> Citation:
        return Citation(number, number, 1, "Doc", 1, 0, 1, "text")

    answer = Message(
        7,
        1,
        "assistant",
        "Noon [9], daily [5]; see [9]. Not a source: [42].",
        (cited(5), cited(9)),
        0.0,
    )
    assert copy_text(answer) == "Noon [9], daily [5]; see [9]. Not a source: [42]."  # as shown


def test_regenerate_samples_with_a_fresh_seed_and_keeps_no_duplicate(
    client: TestClient[Any],
) -> None:
    indexed_document(client)
    model = fake_model(client)
    model.enqueue(["Noon", " daily [1]."])
    conversation = ask(client, "When does the canteen open?")
    page = client.get(f"/c/{conversation}").text
    first = int(re.findall(r'id="message-(\d+)"', page)[-1])
    assert model.history[-1].params.temperature == 0 and model.history[-1].params.seed is None

    done = regenerate(client, first, "Noon", " daily [1].")  # the same words again
    again = model.history[-1].params
    assert again.temperature >= 0.8 and again.seed is not None  # sampled, not greedy
    assert "the model gave the same answer" in done and versions_shown(done) == []
    page = client.get(f"/c/{conversation}").text
    assert page.count('class="msg assistant') == 1 and versions_shown(page) == []  # one version

    current = int(re.findall(r'id="message-(\d+)"', page)[-1])
    done = regenerate(client, current, "At", " twelve [1].")
    assert "At twelve" in done and versions_shown(done) == ["2/2"]
    seeds = {request.params.seed for request in model.history[-2:]}
    assert len(seeds) == 2  # each regeneration draws its own seed
