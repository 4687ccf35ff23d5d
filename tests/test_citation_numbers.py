"""One numbering per answer: a source's number is fixed when it enters the prompt, and
every surface shows that number for that passage (DESIGN.md, round three)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from app.chat.service import DoneEvent, ReadingEvent, TokenEvent
from llm.backend import FakeBackend
from tests.conftest import add_key, fake_model, sse_events, upload, wait_for, wait_indexed
from tests.retrieval_kit import make_kit
from tests.test_chat import service

HX = {"HX-Request": "true"}
HOTELS = b"# Hotels\n\nThe hotel cap is 180 pounds a night in London for staff travel."
MEALS = b"# Meals\n\nThe daily meal allowance abroad is 45 euros for staff travel."
QUESTION = "What are the hotel cap and the meal allowance for staff travel?"


def _library(client: TestClient[Any]) -> dict[str, int]:
    """The two documents, indexed: title -> document id."""
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    ids = {}
    for name, body in (("hotels.md", HOTELS), ("meals.md", MEALS)):
        document = upload(client, (name, body)).json()["documents"][0]
        assert wait_indexed(client, document["id"])["status"] == "indexed"
        ids[name.removesuffix(".md").title()] = document["id"]
    return ids


def test_one_answer_shows_the_same_numbers_on_every_surface(client: TestClient[Any]) -> None:
    _library(client)
    # The second source first, so order of appearance and prompt order differ.
    fake_model(client).enqueue(["The hotel cap is 180 pounds [2].", " Meals are 45 euros [1]."])
    # Which passage the prompt numbers 1 and 2 depends on ranking: read it from the stream.
    response = client.post("/api/chat", json={"message": QUESTION})
    events = sse_events(response.text)
    reading = json.loads(next(data for name, data in events if name == "sources"))
    numbered = {s["number"]: s["chunk_id"] for s in reading["sources"]}
    assert set(numbered) == {1, 2}
    streamed = "".join(json.loads(d)["text"] for n, d in events if n == "token")
    done = json.loads(next(data for name, data in events if name == "done"))
    answer_id, conversation_id = done["message_id"], done["conversation_id"]

    def as_numbered(citations: list[dict[str, Any]]) -> dict[int, int]:
        return {c["number"]: c["chunk_id"] for c in citations}

    # The final answer may re-point a sentence, but a number always means one passage.
    assert re.findall(r"\[(\d)\]", streamed) == ["2", "1"]
    final = as_numbered(done["citations"])
    assert final and all(numbered[n] == chunk for n, chunk in final.items())
    assert [int(n) for n in re.findall(r"\[(\d)\]", done["answer"])] == list(final)

    detail = client.get(f"/api/conversations/{conversation_id}").json()
    assert as_numbered(detail["messages"][-1]["citations"]) == final

    page = client.get(f"/c/{conversation_id}").text
    links = re.findall(r'<a class="cite" href="[^"]*chunk=(\d+)[^"]*"[^>]*>\[(\d+)\]</a>', page)
    assert links and all(numbered[int(n)] == int(chunk) for chunk, n in links)

    pane = client.get(f"/ui/messages/{answer_id}/sources", headers=HX).text
    badges = re.findall(r'<span class="badge">\[(\d+)\]</span>', pane)
    assert [int(b) for b in badges] == list(final)  # in order of appearance, as numbered

    export = client.get(f"/ui/conversations/{conversation_id}/export").text
    for citation in done["citations"]:
        assert f"- [{citation['number']}] {citation['title']}, page 1" in export

    client.headers["Authorization"] = f"Bearer {add_key(client)}"
    fake_model(client).enqueue(["The hotel cap is 180 pounds [2].", " Meals are 45 euros [1]."])
    v1 = client.post(
        "/v1/chat/completions",
        json={"model": "rag", "messages": [{"role": "user", "content": QUESTION}]},
    )
    message = v1.json()["choices"][0]["message"]
    assert as_numbered(message["citations"]) == final  # same prompt, same numbers


def test_a_stopped_answer_keeps_the_numbers_it_streamed(tmp_path: Path) -> None:
    generator = FakeBackend(token_delay_s=0.05)
    chat = service(make_kit(tmp_path), generator)
    generator.enqueue(["Staff get 28 days [1].", *[f" more{n}" for n in range(200)]])
    _, asked = chat.ask("How many days of leave do staff get?", None)

    async def stop_after_the_first_citation() -> list[object]:
        events: list[object] = []
        async for event in chat.answer(asked):
            events.append(event)
            if isinstance(event, TokenEvent) and "[1]" in event.text:
                chat.stop(asked.id)  # the Stop button, right after the marker streamed
        return events

    events = asyncio.run(stop_after_the_first_citation())
    reading = next(e for e in events if isinstance(e, ReadingEvent))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    answer = done.message
    assert answer.content.startswith("Staff get 28 days [1].")
    assert answer.content.endswith("(stopped)")
    assert [(c.number, c.chunk_id) for c in answer.citations] == [(1, reading.sources[0].chunk_id)]
    assert answer.citations == chat.conversations.answer_to(asked).citations  # as stored
