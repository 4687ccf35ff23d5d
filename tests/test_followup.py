"""Follow-up questions search with their conversation's subject, at every door."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from app.chat.service import DoneEvent, ReadingEvent
from llm.backend import FakeBackend
from retrieval.followup import (
    MAX_FOLLOWED,
    asks_about_the_last_answer,
    conversation_query,
    followed,
    is_follow_up,
    prefer_cited,
    refers_back,
    search_query,
)
from retrieval.types import Hit
from tests.conftest import add_key, fake_model, sse_events, upload, wait_for, wait_indexed
from tests.retrieval_kit import make_kit
from tests.test_chat import collect, service


@pytest.mark.parametrize(
    "question",
    [
        "How long does it last?",
        "What is its warranty?",
        "And for contractors?",
        "What about visitors?",
        "Who do I tell about that?",
        "Where is it held?",
        "When?",
        "How much?",
    ],
)
def test_follow_ups_are_recognised(question: str) -> None:
    assert is_follow_up(question)


@pytest.mark.parametrize(
    "question",
    [
        "How long is the probation period?",
        "What is the capital of France?",
        "Which error code means the sensor needs calibrating?",
        "Who founded Larchmere Analytics together with Declan Fairbairn?",
    ],
)
def test_standalone_questions_are_searched_as_asked(question: str) -> None:
    assert not is_follow_up(question)
    assert search_query(question, ["How many days of annual leave do staff get?"]) == question


def test_a_follow_up_carries_the_subject_of_the_turn_before() -> None:
    query = search_query("How long does it last?", ["What is the probation period for new staff?"])
    assert query == "How long does it last? (probation period new staff)"


def test_a_chain_of_follow_ups_keeps_the_first_subject() -> None:
    questions = [
        "Which is Norway's only active volcano?",
        "When did it last erupt?",
        "And how tall?",
    ]
    assert "volcano" in conversation_query(questions) and "Norway" in conversation_query(questions)
    assert conversation_query(questions[:1]) == questions[0]  # a first question is as asked


def test_a_follow_up_is_shown_with_the_questions_it_leans_on() -> None:
    lunch, breakfast = "What time is lunch served at The Larder?", "And breakfast?"
    assert followed([lunch]) == ()  # a first question
    assert followed([lunch, "Where is the fire assembly point for Kestrel House?"]) == ()
    assert followed([lunch, breakfast]) == (lunch,)
    # A chain goes back to the last question of its own, and no further.
    assert followed(["Who is the CEO of Larchmere?", lunch, breakfast, "And on Sundays?"]) == (
        lunch,
        breakfast,
    )
    chain = [lunch] + [f"And {day}?" for day in ("Monday", "Tuesday", "Friday", "Sunday")]
    assert len(followed(chain)) == MAX_FOLLOWED
    assert followed(chain) == tuple(chain[-1 - MAX_FOLLOWED : -1])
    assert followed(["", "And breakfast?"]) == ()  # a /v1 answer sent with no question


def test_a_first_question_is_never_changed() -> None:
    assert search_query("And what about it?", []) == "And what about it?"


@pytest.mark.parametrize(
    ("question", "refers"),
    [
        ("How high is it?", True),
        ("And its national anthem?", True),
        ("Who pays for them?", True),
        ("What about Ireland?", False),  # leans on the turn before, names its own subject
        ("How long is parental leave?", False),
    ],
)
def test_a_question_refers_back_only_with_a_referring_word(question: str, refers: bool) -> None:
    assert refers_back(question) is refers


def _found(titles: dict[int, str], *chunks: tuple[int, int]) -> list[Hit]:
    """Hits for (chunk id, document id) pairs, best first, titled by ``titles``."""
    return [Hit(c, d, titles[d], 1, 0, 1, "text", 1.0 / c) for c, d in chunks]


def test_a_follow_up_reads_the_cited_documents_and_those_it_names_only() -> None:
    titles = {7: "Norway", 3: "Volcanoes of the north", 9: "Sweden"}
    hits = _found(titles, (1, 7), (2, 3), (3, 9), (4, 3), (5, 7))
    assert [h.chunk_id for h in prefer_cited(hits, {3}, "How high is it?")] == [2, 4]
    # a document the question names by a word of its title stays, in the search's order
    named = prefer_cited(hits, {3}, "How does it compare with Sweden's?")
    assert [h.chunk_id for h in named] == [2, 3, 4]
    # nothing of the cited documents found, or nothing cited: all of them, as found
    assert prefer_cited(hits, set(), "How high is it?") == hits
    assert prefer_cited(hits, {42}, "How high is it?") == hits
    assert prefer_cited(hits, {42}, "How does it compare with Sweden?") == hits


HANDBOOK = (
    b"# Probation\n\nNew staff serve a probation period of six months.\n\n"
    b"# Parking\n\nVisitors park in the north garage on level two.\n"
)


def test_chat_retrieves_a_follow_up_with_its_subject_and_stores_the_query(tmp_path: Path) -> None:
    generator = FakeBackend()
    chat = service(make_kit(tmp_path), generator)
    searched: list[str] = []
    retrieve = chat.retrieve

    def recording(query: str, scope: frozenset[int] | None = None, k: int | None = None) -> Any:
        searched.append(query)
        return retrieve(query, scope, k=k)

    chat.retrieve = recording  # type: ignore[method-assign]
    first = asyncio.run(collect(chat, "How many days of leave do staff get?"))
    conversation_id = first[-1].message.conversation_id
    events = asyncio.run(collect(chat, "Is it paid?", conversation_id))
    assert searched == ["How many days of leave do staff get?", "Is it paid? (days leave staff)"]
    reading = next(e for e in events if isinstance(e, ReadingEvent))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert reading.query == searched[1]
    assert done.message.context is not None and done.message.context.query == searched[1]
    stored = chat.conversations.messages(conversation_id)[-1]
    assert stored.context is not None and stored.context.query == searched[1]  # read back
    # The model reads the follow-up with the question it continues; the next turn's prompt
    # extends this one, the line included (the cached prefix holds).
    follow_up = generator.history[-1].prompt
    assert follow_up.endswith(
        "Previous question: How many days of leave do staff get?\nQuestion: Is it paid?\nAnswer:"
    )
    asyncio.run(collect(chat, "Who approves it?", conversation_id))
    assert generator.history[-1].prompt.startswith(follow_up)
    assert generator.history[-1].prompt.endswith(
        "Previous questions: How many days of leave do staff get? / Is it paid?\n"
        "Question: Who approves it?\nAnswer:"
    )


@pytest.fixture
def api(client: TestClient[Any]) -> TestClient[Any]:
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    document = upload(client, ("staff.md", HANDBOOK)).json()["documents"][0]
    assert wait_indexed(client, document["id"])["status"] == "indexed"
    return client


def test_api_chat_reports_what_it_searched_for(api: TestClient[Any]) -> None:
    fake_model(api).enqueue(["Six months [1]."])
    first = api.post("/api/chat", json={"message": "How long is the probation period?"})
    conversation_id = int(first.text.split('"conversation_id":')[1].split(",")[0])
    fake_model(api).enqueue(["Their manager [1]."])
    follow = api.post(
        "/api/chat", json={"message": "Who reviews it?", "conversation_id": conversation_id}
    )
    events = dict(sse_events(follow.text))
    expected = "Who reviews it? (probation period)"
    assert f'"query":"{expected}"' in events["sources"]
    assert f'"query":"{expected}"' in events["done"]
    detail = api.get(f"/api/conversations/{conversation_id}").json()
    assert [m.get("query") for m in detail["messages"]] == [
        None,
        "How long is the probation period?",
        None,
        expected,
    ]
    page = api.get(f"/c/{conversation_id}").text
    assert "Searched for" in page and expected in page.replace("&#39;", "'")


def test_grounded_v1_searches_a_follow_up_with_the_earlier_questions(api: TestClient[Any]) -> None:
    api.headers["Authorization"] = f"Bearer {add_key(api)}"
    model = fake_model(api)
    model.enqueue(["In the north garage [1]."])
    messages = [
        {"role": "user", "content": "Where do visitors park?"},
        {"role": "assistant", "content": "In the north garage [1]."},
        {"role": "user", "content": "On which level is it?"},
    ]
    response = api.post("/v1/chat/completions", json={"model": "rag", "messages": messages})
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert message["query"] == "On which level is it? (visitors park)"
    assert "level two" in model.history[-1].prompt
    # The model reads the question it continues right before it.
    assert model.history[-1].prompt.endswith(
        "Previous question: Where do visitors park?\nQuestion: On which level is it?\nAnswer:"
    )


CONVERSATIONS = (
    '{"id": "c1", "turns": [{"question": "How many days of leave do staff get?", '
    '"document": "p.md", "answer": "28 days"}, {"question": "Is it paid?", '
    '"standalone": "Is the leave paid?", "document": "p.md", "answer": "paid leave"}]}\n'
)


def test_golden_conversations_load_and_bad_ones_name_their_line(tmp_path: Path) -> None:
    from retrieval.evaluation import GoldenSetError
    from retrieval.followup_eval import is_conversation_set, load_conversations

    path = tmp_path / "followups.jsonl"
    path.write_text(CONVERSATIONS)
    assert is_conversation_set(path)
    [conversation] = load_conversations(path)
    assert [turn.question for _, turn, _ in conversation.follow_ups()] == ["Is it paid?"]
    path.write_text('{"turns": [{"question": "Only one?"}]}\n')
    with pytest.raises(GoldenSetError, match="line 1"):
        load_conversations(path)
    path.write_text('{"question": "A plain golden line"}\n')
    assert not is_conversation_set(path)


def test_follow_ups_are_scored_in_their_conversation_and_standalone(tmp_path: Path) -> None:
    from app.documents.answer_eval import ask_conversations
    from retrieval.followup_eval import follow_up_recall, load_conversations

    path = tmp_path / "followups.jsonl"
    path.write_text(CONVERSATIONS)
    conversations = load_conversations(path)
    generator = FakeBackend()
    chat = service(make_kit(tmp_path), generator)
    for text in ["Staff get 28 days [1].", "Yes, it is paid leave [1].", "I cannot tell."]:
        generator.enqueue([text])
    result = asyncio.run(ask_conversations(chat, conversations))
    assert result.in_conversation.correctness == 1.0  # the follow-up, in its conversation
    assert result.standalone.correctness == 0.0  # "I cannot tell." to the standalone form
    asked = [request.prompt for request in generator.history]
    assert "Is it paid?" in asked[1] and "How many days" in asked[1]  # one conversation
    assert "Is the leave paid?" in asked[2] and "How many days" not in asked[2]  # its own
    recall = follow_up_recall(chat.retriever, conversations, 5, {1: "p.md"})
    assert recall.follow_ups == 1 and recall.in_conversation == recall.standalone == 1.0


def test_a_follow_up_is_not_given_the_second_look(tmp_path: Path) -> None:
    from llm.prompt import ChatTemplateFormat

    template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    generator = FakeBackend()
    generator.prompt_format = ChatTemplateFormat(template, bos_token="", eos_token="</s>")
    chat = service(make_kit(tmp_path), generator)
    generator.enqueue(["Staff get 28 days [1]."])
    generator.enqueue(["yes"])
    first = asyncio.run(collect(chat, "How many days of leave do staff get?"))
    assert len(generator.history) == 2  # the answer, then the check
    generator.enqueue(["Yes, it is paid leave [1]."])
    events = asyncio.run(collect(chat, "Is it paid?", first[-1].message.conversation_id))
    assert len(generator.history) == 3  # the answer only: "Is it paid?" cannot be checked alone
    assert "paid leave" in events[-1].message.content


NORWAY = b"# Norway\n\nNorway's only active volcano is Beerenberg, on the island of Jan Mayen.\n"
VOLCANOES = b"# Volcanoes\n\nHekla is an active volcano of Iceland, 1,491 metres high.\n"


def test_a_follow_up_that_refers_back_reads_the_documents_cited_before_first(
    tmp_path: Path,
) -> None:
    kit = make_kit(tmp_path)
    generator = FakeBackend()
    chat = service(kit, generator)
    worker = kit.worker(chat.retriever.index)
    ids = {}
    for name, text in (("norway.md", NORWAY), ("volcanoes.md", VOLCANOES)):
        document, _ = kit.library.submit(data=text, filename=name, collection_id=kit.collection_id)
        worker.ingest(document.id)
        ids[name] = document.id
    asked = "Which is Norway's only active volcano?"
    assert [h.document_id for h in chat.retrieve(asked)][:2] == [
        ids["norway.md"],
        ids["volcanoes.md"],
    ]
    generator.enqueue(["Hekla", " is", " one", " [2]."])  # the answer comes from the second
    first = asyncio.run(collect(chat, asked))
    done = first[-1]
    assert isinstance(done, DoneEvent)
    assert {c.document_id for c in done.message.citations} == {ids["volcanoes.md"]}
    question = "How high is it?"
    # As searched, Norway's passage ranks first ...
    assert chat.retrieve(conversation_query([asked, question]))[0].document_id == ids["norway.md"]
    events = asyncio.run(collect(chat, question, done.message.conversation_id))
    reading = next(e for e in events if isinstance(e, ReadingEvent))
    # ... and the follow-up reads only the document the answer came from.
    shown = [source.document_id for source in reading.sources]
    assert shown == [ids["volcanoes.md"]]


@pytest.mark.parametrize(
    ("question", "about_it"),
    [
        ("How high is it?", True),
        ("And the lowest?", True),
        ("What about a debit?", True),
        ("What about Ireland?", True),
        ("Who is the CEO?", False),  # short, but may change the subject: not narrowed
        ("How long is parental leave?", False),
    ],
)
def test_a_question_about_the_last_answer_refers_back_or_continues_it(
    question: str, about_it: bool
) -> None:
    assert asks_about_the_last_answer(question) is about_it


def test_a_continued_question_naming_another_document_reads_that_document() -> None:
    titles = {7: "Norway", 3: "Volcanoes of the north", 9: "Ireland"}
    hits = _found(titles, (1, 7), (2, 3), (3, 9), (4, 9), (5, 7))
    # after an answer citing Norway, "What about Ireland?" is about Ireland
    assert [h.chunk_id for h in prefer_cited(hits, {7}, "What about Ireland?")] == [3, 4]
    # an elliptical one naming nothing else stays with what was cited
    assert [h.chunk_id for h in prefer_cited(hits, {7}, "And the lowest?")] == [1, 5]
    # referring back while naming another: both, to compare
    compared = prefer_cited(hits, {7}, "How does it compare with Ireland?")
    assert [h.chunk_id for h in compared] == [1, 3, 4, 5]


def test_a_continued_question_whose_subject_only_other_documents_hold_moves_on() -> None:
    hits = [
        Hit(1, 7, "Norway", 1, 0, 1, "Beerenberg is Norway's active volcano.", 0.5),
        Hit(2, 3, "Volcanoes", 1, 0, 1, "Hekla is 1,491 metres high.", 0.4),
    ]
    # after an answer citing Volcanoes (about Hekla), Beerenberg is only in Norway's
    assert prefer_cited(hits, {3}, "What about Beerenberg's height?") == hits
    # a word the cited document holds too keeps the question there
    assert prefer_cited(hits, {3}, "And how high is Hekla?") == [hits[1]]
