"""The pieces that judge and shape an answer: sentence support, answer scoring, passage
focus, maximal marginal relevance, withholding unsupported answers."""

from __future__ import annotations

import numpy as np
import pytest

from app.chat.answering import WITHHELD, _nothing_else, says_something
from app.chat.quality import contains, normalise, report, score_answer
from llm.prompt import Source
from llm.support import declines, unsupported_sentences
from retrieval.embedder import HashingEmbedder
from retrieval.evaluation import GoldenQuestion
from retrieval.focus import best_window, focus, sentences
from retrieval.fusion import mmr
from retrieval.types import Hit

SOURCES = {
    1: Source(1, "Office guide", 4, "The office opens at 8:00 and closes at 18:00 on weekdays."),
    2: Source(2, "Parking", 1, "Visitors park in the north car park, next to building C."),
}


def test_a_sentence_its_cited_source_backs_is_supported() -> None:
    assert unsupported_sentences("The office opens at 8:00 on weekdays [1].", SOURCES) == []
    # the marker after the full stop belongs to the sentence before it
    assert unsupported_sentences("Visitors park in the north car park. [2]", SOURCES) == []


def test_a_sentence_without_a_source_or_with_the_wrong_one_is_flagged() -> None:
    answer = "The office opens at 8:00 [1]. Lunch is served at noon in the canteen."
    (flagged,) = unsupported_sentences(answer, SOURCES)
    assert flagged.reason == "no source"
    assert answer[flagged.start : flagged.end] == "Lunch is served at noon in the canteen."
    wrong = unsupported_sentences("Visitors park in the north car park [1].", SOURCES)
    assert [u.reason for u in wrong] == ["not in the cited source"]


def test_a_number_the_cited_source_does_not_state_is_not_supported() -> None:
    flagged = unsupported_sentences("The office opens at 7:30 on weekdays [1].", SOURCES)
    assert [u.reason for u in flagged] == ["not in the cited source"]


def test_declining_and_very_short_sentences_are_never_flagged() -> None:
    assert unsupported_sentences("The documents do not cover this.", SOURCES) == []
    assert unsupported_sentences("Yes.", SOURCES) == []
    assert declines("I could not find anything about that in the documents.")
    assert not declines("The office opens at 8:00 [1].")


def test_an_answer_of_markers_only_says_nothing() -> None:
    assert not says_something(" [1] . [2]")
    assert not says_something("")
    assert says_something("In 1994 [1].")
    factual = GoldenQuestion("When?", document="a.md", answer="1994")
    assert score_answer(factual, "[1]", [], **_timing(1.0)).empty


def test_an_answer_nothing_supports_is_withheld_but_a_partly_supported_one_is_not() -> None:
    invented = "The capital of Argentina is Buenos Aires."
    assert _nothing_else(invented, tuple(unsupported_sentences(invented, SOURCES)))
    mixed = "The office opens at 8:00 [1]. Lunch is served at noon in the canteen."
    assert not _nothing_else(mixed, tuple(unsupported_sentences(mixed, SOURCES)))
    assert WITHHELD.startswith("The documents do not cover this.")


@pytest.mark.parametrize(
    ("answer", "reference", "expected"),
    [
        ("It was in 1972 and 1994 [1].", "1972 and 1994", True),
        ("King Olav TRYGGVASON [2]", "Tryggvason", True),
        ("The volcano is called Beerenberg.", "the Beerenberg", True),
        ("Eyjafjallajökull erupted.", "Eyjafjallajokull", True),
        ("It was 19721 people.", "1972", False),  # word boundaries
        ("", "1972", False),
    ],
)
def test_containment_is_normalised(answer: str, reference: str, expected: bool) -> None:
    assert contains(answer, [reference]) is expected


def test_normalise_drops_markers_articles_case_and_punctuation() -> None:
    assert normalise("The  Office, opens [3] at 8:00!") == "office opens at 8 00"


def test_a_report_counts_each_kind_of_answer() -> None:
    factual = GoldenQuestion("When?", document="a.md", answer="1994")
    offtopic = GoldenQuestion("Capital of Mars?")
    scores = [
        score_answer(factual, "In 1994 [1].", ["... in 1994 ..."], **_timing(0.5)),
        score_answer(factual, "The documents do not cover this.", [], **_timing(0.4)),
        score_answer(factual, "", [], **_timing(None)),
        score_answer(offtopic, "The documents do not cover this.", [], **_timing(0.3)),
        score_answer(offtopic, "It is Olympus City.", [], **_timing(0.6, unsupported=1)),
    ]
    result = report(scores)
    assert (result.factual, result.offtopic) == (3, 2)
    assert result.correctness == pytest.approx(1 / 3)
    assert result.citation_precision == 1.0
    assert result.abstention == 0.5
    assert result.false_abstention == pytest.approx(1 / 3)
    assert result.empty == 1
    assert result.unsupported == pytest.approx(1 / 5)
    assert result.ttft_p50_s == pytest.approx(0.45)


def _timing(ttft: float | None, unsupported: int = 0) -> dict[str, object]:
    return {"unsupported_sentences": unsupported, "looped": False, "ttft_s": ttft, "total_s": 1.0}


def test_focus_keeps_the_sentences_nearest_the_question() -> None:
    text = (
        "Norway has long fjords. The coast is rugged. Beerenberg on Jan Mayen is the only "
        "active volcano. Oil was found in the 1960s. Fishing matters too."
    )
    hit = _hit(1, 1, text, 1.0)
    (focused,) = focus("Which is the only active volcano?", [hit], HashingEmbedder(), 90)
    assert "Beerenberg on Jan Mayen is the only active volcano." in focused.text
    assert len(focused.text) < len(text)
    assert focused.text.startswith("…")  # the reader sees that text was left out
    short = _hit(2, 1, "Short.", 1.0)
    assert focus("anything", [short], HashingEmbedder(), 90) == [short]


def test_best_window_grows_towards_the_better_neighbour_within_the_budget() -> None:
    parts = ["aaaa.", "bbbb.", "cccc.", "dddd."]
    assert best_window(parts, [0.1, 0.5, 0.9, 0.2], 11) == (1, 2)
    assert best_window(parts, [0.1, 0.5, 0.9, 0.2], 5) == (2, 2)
    assert sentences("One. Two has 3.5 kg.\nThree") == ["One.", "Two has 3.5 kg.", "Three"]


def test_mmr_lets_a_near_copy_give_way_but_keeps_distinct_passages_of_one_document() -> None:
    hits = [_hit(1, 7, "a", 1.0), _hit(2, 7, "a again", 0.95), _hit(3, 7, "b", 0.9)]
    base = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    vectors = {1: base, 2: base * 0.99 + np.array([0, 0.01, 0], np.float32), 3: np.eye(3)[1]}
    picked = mmr(hits, vectors, 2, 0.7)
    assert [h.chunk_id for h in picked] == [1, 3]  # both from document 7: no cap
    assert [h.chunk_id for h in mmr(hits, vectors, 2, 1.0)] == [1, 2]


def _hit(chunk_id: int, document_id: int, text: str, score: float) -> Hit:
    return Hit(chunk_id, document_id, "Doc", 1, 0, len(text), text, score)


def test_numbers_are_compared_whole_and_claims_with_not_are_no_declines() -> None:
    source = {1: Source(1, "Office", 1, "The office opens at 150 visitors a day.")}
    assert unsupported_sentences("The office takes 15 visitors a day [1].", source)
    assert not declines("The office is not in Berlin; it moved to Munich in 2019.")
    assert declines("This is not mentioned in the documents.")


def test_a_line_without_a_reference_is_left_out_of_correctness() -> None:
    located = GoldenQuestion("Where?", document="a.md")
    score = score_answer(located, "Somewhere [1].", ["Somewhere"], **_timing(0.5))
    assert score.correct is None
    assert report([score]).correctness is None
