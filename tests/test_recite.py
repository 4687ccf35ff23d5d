"""Miscited sentences: a fact stated from one source with another's number is pointed at the
source that supports it, never at a passage about something else."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from app.chat.answering import WITHHELD, Grounding
from llm.backend import FakeBackend
from llm.prompt import Source
from llm.support import recite, unsupported_sentences
from retrieval.types import Hit
from tests.conftest import fake_model, upload, wait_indexed
from tests.test_openai import chunks
from tests.test_openai_grounded import api, ask  # noqa: F401 - the grounded /v1 fixture

SOURCES = {
    1: Source(1, "Indonesia", 1, "The national symbols of Indonesia are the Garuda and jasmine."),
    2: Source(2, "Egypt", 1, "Egypt's national symbols are the golden eagle and white lotus."),
    3: Source(3, "South Africa", 1, "The springbok and the king protea symbolise South Africa."),
}
LAKES = {
    1: Source(1, "Canada", 1, "Canada has over 2 million lakes, more than all others combined."),
    4: Source(4, "Ethiopia", 1, "Ethiopia's highlands are the source of the Blue Nile."),
}


def test_a_miscited_sentence_points_at_the_source_that_supports_it() -> None:
    answer = "The golden eagle and white lotus symbolise Egypt [3]."
    assert unsupported_sentences(answer, SOURCES)  # as the model cited it: not supported
    fixed = recite(answer, SOURCES, [1, 2, 3])
    assert fixed == "The golden eagle and white lotus symbolise Egypt [2]."
    assert unsupported_sentences(fixed, SOURCES) == []


def test_a_run_of_wrong_markers_becomes_the_one_right_marker() -> None:
    answer = "Egypt: golden eagle, white lotus [1][3]. The springbok symbolises South Africa [3]."
    assert recite(answer, SOURCES) == (
        "Egypt: golden eagle, white lotus [2]. The springbok symbolises South Africa [3]."
    )


def test_a_sentence_naming_what_no_source_names_keeps_its_marker() -> None:
    """Most words match the Canada passage, but it is not about Ethiopia: re-pointing
    would cite a passage for a claim it does not make."""
    answer = "Ethiopia has over 2 million lakes, more than all others combined [4]."
    assert recite(answer, LAKES, [1, 4]) == answer
    assert [u.reason for u in unsupported_sentences(answer, LAKES)] == ["not in the cited source"]


def test_supported_sentences_and_declines_are_left_alone() -> None:
    answers = [
        "The golden eagle and white lotus symbolise Egypt [2].",
        "The documents do not cover this [1].",
        "Indonesia chose the komodo dragon [1].",  # no source supports it: still flagged
        "No marker here.",
    ]
    for answer in answers:
        assert recite(answer, SOURCES, [1, 2, 3]) == answer


def test_the_order_given_decides_between_two_supporting_sources() -> None:
    both = {**SOURCES, 4: Source(4, "Egypt", 2, "Egypt's symbols: the golden eagle, white lotus.")}
    answer = "The golden eagle and white lotus symbolise Egypt [1]."
    assert recite(answer, both, [4, 2]).endswith("[4].")
    assert recite(answer, both, [2, 4]).endswith("[2].")


def test_a_right_answer_with_the_wrong_number_is_shown_not_withheld() -> None:
    hits = [Hit(n, n, s.title, 1, 0, len(s.text), s.text, 1.0 - n / 10) for n, s in SOURCES.items()]
    grounding = Grounding.build(
        FakeBackend("fake"), question="Which birds and flowers symbolise Egypt?", hits=hits,
        answer_tokens=64,
    )  # fmt: skip
    answer, cited, unsupported = grounding.checked(
        "The golden eagle and white lotus symbolise Egypt. [3]"
    )
    assert answer != WITHHELD
    assert answer == "The golden eagle and white lotus symbolise Egypt. [2]"
    assert [c.title for c in cited] == ["Egypt"] and unsupported == ()


FINANCE = b"# Finance\n\nReceipts for the meal allowance go to finance within a month.\n"


def test_grounded_v1_repoints_its_answer_but_a_stream_keeps_the_streamed_numbers(
    api: TestClient[Any],  # noqa: F811
) -> None:
    """A stream's client has the markers as they were streamed: its citations keep those
    numbers (the miscited sentence is flagged instead), so every [n] it shows is listed."""
    wait_indexed(api, upload(api, ("finance.md", FINANCE)).json()["documents"][0]["id"])
    miscited = [" The meal allowance abroad is 40 euros per day [2]."]
    fake_model(api).enqueue(miscited)
    message = ask(api, "What is the meal allowance abroad?").json()["choices"][0]["message"]
    assert message["content"] == "The meal allowance abroad is 40 euros per day [1]."
    assert [(c["number"], c["title"]) for c in message["citations"]] == [(1, "Travel")]
    assert message["unsupported"] == []

    fake_model(api).enqueue(miscited)
    received = chunks(ask(api, "What is the meal allowance abroad?", stream=True))
    last = received[-1]
    assert [(c["number"], c["title"]) for c in last["citations"]] == [(2, "Finance")]
    assert [u["reason"] for u in last["unsupported"]] == ["not in the cited source"]
