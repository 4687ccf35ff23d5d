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


def test_a_short_heading_may_come_back_once_but_not_twice() -> None:
    guard = RepetitionGuard()
    assert not feed_words(guard, "## Upload\nChoose a file [1].\n## Upload\nThen wait.\n")
    assert feed_words(guard, "## Upload\nmore")
    assert guard.text.strip().endswith("Then wait.")


def test_a_phrase_looping_without_sentence_ends_is_cut() -> None:
    guard = RepetitionGuard()
    answer = "Supported formats are PDF [1]. The formats are " + "PDF, DOCX, " * 12
    assert feed_words(guard, answer)
    assert guard.text.strip() == "Supported formats are PDF [1]."


def test_code_fences_and_long_varied_lines_are_not_loops() -> None:
    guard = RepetitionGuard()
    text = "Run:\n```\nls\n```\nThen:\n```\npwd\n```\nAnd:\n```\ncd\n```\n" + (
        "A long sentence without any full stop that keeps going with new words each time "
        "so that nothing repeats at all in it"
    )
    assert not feed_words(guard, text)


def test_a_wide_table_rule_is_layout_not_a_loop() -> None:
    guard = RepetitionGuard()
    assert not feed_words(guard, "| a | b |\n" + "|---" * 20 + "|\n| 1 | 2 |")


def test_code_and_table_rows_may_repeat() -> None:
    guard = RepetitionGuard()
    code = (
        "```\nif a:\n    x()\nelse:\n    y()\nif b:\n    x()\nelse:\n    y()\nif c:\nelse:\n```\n"
    )
    table = "| Open | yes | yes | yes | yes | yes | yes | yes | yes | yes | yes |\n"
    assert not feed_words(guard, code + table + table.replace("Open", "Shut") + "Done.")


def test_a_said_sentence_is_held_back_while_it_could_still_come_and_cut_when_it_does() -> None:
    """#30: streamed answers (grounded /v1) show ``shown``, never a word of the example."""
    said = "The office opens at 8:00 on weekdays [1]."
    guard = RepetitionGuard(said=[said])
    guard.feed("Staff get 28 days [1]. The office")
    assert guard.shown == "Staff get 28 days [1]. "  # could still be the example
    guard.feed(" opens at 9:00")
    assert guard.shown == guard.text == "Staff get 28 days [1]. The office opens at 9:00"
    held = RepetitionGuard(said=[said])
    assert not held.feed("The office opens at 8:00 on weekdays [1]")
    assert held.shown == "" and held.end()  # its full stop left off: still the example
    assert held.text == "" and held.repeated
    cut = RepetitionGuard(said=[said])
    assert cut.feed("Yes [1]. The office opens at 8:00 on weekdays [1].")
    assert cut.text == cut.shown == "Yes [1]. "
    short = RepetitionGuard(said=[said])
    short.feed("The office")  # the answer ends there: too short to be the example
    assert not short.end() and short.shown == "The office"
