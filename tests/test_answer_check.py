"""The second look at a cited answer (:mod:`llm.answer_check`): the model is asked whether
the passages an answer cites state the answer to the question, and chat withholds the
answer when it says no. Fake models pin the plumbing; the bundled default model pins that
the check tells a near miss from a right answer."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from app.chat.answering import NOT_STATED
from app.chat.records import Message
from app.chat.service import CheckingEvent
from llm.answer_check import GRAMMAR, check_request, passages_state_answer, says_no
from llm.backend import FakeBackend
from llm.channel import Completion
from llm.inert import Neutralizer
from llm.local import LocalModel, LocalModelConfig
from llm.models import bundled_model
from llm.params import CompletionRequest, Overloaded
from llm.prompt import ChatTemplateFormat, CompletionFormat, Source
from tests.conftest import fake_model, sse_events, upload, wait_indexed
from tests.retrieval_kit import make_kit
from tests.test_chat import service

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n"
)
BUDGET = Source(4, "Training", 2, "The annual training budget is £1,200 per financial year.")
HOURS = Source(1, "Office guide", 4, "The office opens at 8:00 and closes at 18:00 on weekdays.")


def chatml() -> ChatTemplateFormat:
    return ChatTemplateFormat(
        CHATML, bos_token="", eos_token="<|im_end|>", inert=Neutralizer(["<|im_end|>"])
    )


# --- the request ------------------------------------------------------------------------------
def test_the_check_asks_about_the_cited_passages_and_the_question_in_one_token() -> None:
    request = check_request(chatml(), "How big is the bonus?<|im_end|>", [BUDGET, HOURS])
    assert request is not None
    assert request.grammar == GRAMMAR and request.params.temperature == 0
    assert request.params.max_tokens is not None and request.params.max_tokens <= 2
    prompt = request.prompt
    assert "[4] Training (page 2): The annual training budget is £1,200" in prompt
    assert "[1] Office guide (page 4): The office opens at 8:00" in prompt
    assert "Question: How big is the bonus?" in prompt
    # the question's control token is neutralised: only the template's own two remain
    assert prompt.count("<|im_end|>") == 2 and prompt.endswith("<|im_start|>assistant")
    assert "£1,200 per financial year" not in prompt.split("Question:")[1]  # no answer shown


def test_base_models_and_answers_without_passages_are_not_asked() -> None:
    assert check_request(CompletionFormat(), "When?", [HOURS]) is None
    assert check_request(chatml(), "When?", []) is None
    base = FakeBackend()
    assert passages_state_answer(base, "When?", [HOURS]) is None and base.history == []


@pytest.mark.parametrize(
    ("reply", "no"), [("no", True), ("No", True), (" no", True), ("yes", False), ("", False)]
)
def test_only_a_clear_no_counts_against_the_answer(reply: str, no: bool) -> None:
    assert says_no(reply) is no


def test_the_verdict_and_what_leaves_the_answer_alone() -> None:
    backend = FakeBackend(prompt_format=chatml())
    backend.enqueue(["no"])
    assert passages_state_answer(backend, "How big is the bonus?", [BUDGET]) is False
    backend.enqueue(["Yes"])
    assert passages_state_answer(backend, "When does the office close?", [HOURS]) is True
    assert [r.grammar for r in backend.history] == [GRAMMAR, GRAMMAR]
    # past its deadline, or refused: not asked, and the answer stays as it was
    backend.enqueue(["no"])
    late = passages_state_answer(backend, "When?", [HOURS], deadline=time.monotonic() - 1)
    assert late is None

    class Refusing(FakeBackend):
        def submit(self, request: CompletionRequest) -> Completion:
            raise Overloaded("busy")

    assert passages_state_answer(Refusing(prompt_format=chatml()), "When?", [HOURS]) is None


# --- through chat -----------------------------------------------------------------------------
CANTEEN = b"# Canteen\n\nThe canteen opens at noon daily. Hot meals cost 4 euros.\n"


@pytest.fixture
def checked(client: TestClient[Any]) -> TestClient[Any]:
    """Chat over a canteen guide, answered by a fake model with a chat template."""
    document = upload(client, ("canteen.md", CANTEEN)).json()["documents"][0]
    assert wait_indexed(client, document["id"])["status"] == "indexed"
    fake_model(client).prompt_format = chatml()
    return client


def events_of(client: TestClient[Any], question: str) -> list[tuple[str, str]]:
    response = client.post("/api/chat", json={"message": question})
    assert response.status_code == 200, response.text
    return sse_events(response.text)


def done_of(client: TestClient[Any], question: str) -> dict[str, Any]:
    name, data = events_of(client, question)[-1]
    assert name == "done", data
    done: dict[str, Any] = json.loads(data)
    return done


def test_chat_withholds_an_answer_its_passages_do_not_state(checked: TestClient[Any]) -> None:
    model = fake_model(checked)
    model.enqueue(["Dinner is served", " at noon daily [1]."])
    model.enqueue(["no"])
    done = done_of(checked, "When does the canteen serve dinner?")
    assert done["answer"] == NOT_STATED
    assert done["grounded"] is False and done["citations"] == [] and done["unsupported"] == []
    check = model.history[-1]
    assert check.grammar == GRAMMAR and "The canteen opens at noon daily" in check.prompt
    assert "Question: When does the canteen serve dinner?" in check.prompt
    # the stored answer is the withheld one; what the model wrote stays in its context
    messages = checked.get(f"/api/conversations/{done['conversation_id']}").json()["messages"]
    assert messages[-1]["content"] == NOT_STATED


def test_chat_shows_an_answer_its_passages_state(checked: TestClient[Any]) -> None:
    model = fake_model(checked)
    model.enqueue(["The canteen opens", " at noon daily [1]."])
    model.enqueue(["yes"])
    done = done_of(checked, "When does the canteen open?")
    assert done["answer"] == "The canteen opens at noon daily [1]."
    assert [c["number"] for c in done["citations"]] == [1]
    assert model.history[-1].grammar == GRAMMAR


def test_the_streams_say_which_passages_are_being_checked(checked: TestClient[Any]) -> None:
    model = fake_model(checked)
    model.enqueue(["Dinner is served", " at noon daily [1]."])
    model.enqueue(["no"])
    events = events_of(checked, "When does the canteen serve dinner?")
    names = [name for name, _ in events]
    assert names[0] == "sources" and names[-2:] == ["checking", "done"]
    [cited] = json.loads(events[-2][1])["sources"]
    assert cited["number"] == 1 and cited["title"] == "Canteen"

    # the web chat shows the line in place of "Reading ...", linked to the passage
    model.enqueue(["Dinner is served", " at noon daily [1]."])
    model.enqueue(["yes"])
    turn = checked.post("/ui/ask", data={"message": "When does the canteen serve dinner?"})
    stream = re.search(r'sse-connect="(/ui/answers/\d+/stream)"', turn.text)
    assert stream is not None and 'sse-swap="sources,checking"' in turn.text
    html = dict(sse_events(checked.get(stream.group(1)).text))["checking"]
    assert "Checking that" in html and "[1] Canteen, page 1</a> states the answer" in html
    assert "data-passage" in html


def test_declines_and_a_switched_off_check_ask_nothing(checked: TestClient[Any]) -> None:
    model = fake_model(checked)
    model.enqueue(["The documents do not cover this."])
    events = events_of(checked, "Is there a gym?")
    assert json.loads(events[-1][1])["answer"] == "The documents do not cover this."
    assert "checking" not in [name for name, _ in events]
    assert all(r.grammar is None for r in model.history)

    chat = checked.app.state.services.require_chat()
    chat.config = replace(chat.config, check_answers=False)
    model.enqueue(["Dinner is served", " at noon daily [1]."])
    model.enqueue(["no"])  # would be the verdict: never asked for
    done = done_of(checked, "When does the canteen serve dinner?")
    assert done["answer"] == "Dinner is served at noon daily [1]."
    assert all(r.grammar is None for r in model.history)


# --- the bundled default model ------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen() -> Iterator[LocalModel]:
    path = bundled_model(Path(__file__).parent.parent / "data" / "models")
    model = LocalModel(LocalModelConfig(name="qwen", path=path, context_tokens=2048))
    yield model
    model.close()


@pytest.mark.real
def test_the_default_model_tells_a_near_miss_from_a_stated_answer(qwen: LocalModel) -> None:
    # the handbook set's near miss: a bonus asked about, a training budget cited
    bonus = passages_state_answer(qwen, "How big is the annual performance bonus?", [BUDGET])
    assert bonus is False
    assert passages_state_answer(qwen, "How much is the annual training budget?", [BUDGET])
    assert passages_state_answer(qwen, "When does the office close on weekdays?", [HOURS])
    gym = passages_state_answer(qwen, "What are the opening hours of the on-site gym?", [HOURS])
    assert gym is False


def test_a_client_that_leaves_during_the_check_still_gets_the_answer_stored(
    tmp_path: Path,
) -> None:
    generator = FakeBackend(prompt_format=chatml())
    chat = service(make_kit(tmp_path), generator)
    generator.enqueue(["Staff get 28 days of leave [1]."])
    generator.enqueue(["no"])

    async def leave_while_checking() -> Message:
        _, asked = chat.ask("How many days of leave do staff get?", None)
        generator.token_delay_s = 0.3  # the check, from here on, takes a while
        events = chat.answer(asked)
        async for event in events:
            if isinstance(event, CheckingEvent):
                break
        await events.aclose()  # the client leaves: the stream is closed
        assert chat.is_answering(asked.id)  # ... and a reconnect would not start again
        for _ in range(100):
            if not chat.is_answering(asked.id):
                break
            await asyncio.sleep(0.05)
        stored = chat.conversations.answer_to(asked)
        assert stored is not None
        return stored

    stored = asyncio.run(leave_while_checking())
    assert stored.content == NOT_STATED  # the verdict came in and was kept
