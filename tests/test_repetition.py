"""The repetition guard cuts a looping answer at the first repeated sentence."""

from __future__ import annotations

from llm.repetition import RepetitionGuard


def feed_words(guard: RepetitionGuard, text: str) -> bool:
    stopped = False
    for word in text.split(" "):
        stopped = guard.feed(word + " ") or stopped
        if stopped:
            break
    return stopped


def test_loop_is_cut_before_the_repeat() -> None:
    guard = RepetitionGuard()
    text = "Select the file to upload [1]. Then press Upload. Select the file to upload [1]. Select"
    assert feed_words(guard, text)
    assert guard.text.strip() == "Select the file to upload [1]. Then press Upload."


def test_repeated_lines_count_as_sentences() -> None:
    guard = RepetitionGuard()
    assert feed_words(guard, "The answer is a PDF\nThe answer is a PDF\nmore")
    assert guard.text.strip() == "The answer is a PDF"


def test_normal_answers_pass_untouched() -> None:
    guard = RepetitionGuard()
    text = "Leave is 28 days [1]. Meals abroad are 45 euros [2]. Ok."
    assert not feed_words(guard, text)
    assert guard.text.strip() == text


def test_short_fragments_may_repeat() -> None:
    guard = RepetitionGuard()
    assert not feed_words(guard, "Yes. It is. Yes. It is.")
