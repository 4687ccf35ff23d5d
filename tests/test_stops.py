"""StopMatcher: streamed text is emitted unless it could still become a stop string."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from llm.engine.stops import StopMatcher


def stream(stops: Sequence[str], pieces: Sequence[str]) -> tuple[list[str], str, bool]:
    """Feed ``pieces`` one by one: (what each feed emitted, the flush, stopped)."""
    matcher = StopMatcher(stops)
    emitted = [matcher.feed(piece) for piece in pieces]
    return emitted, matcher.flush(), matcher.stopped


def test_text_without_stops_passes_straight_through() -> None:
    matcher = StopMatcher([])
    assert matcher.feed("hello ") == "hello "
    assert matcher.feed("world") == "world"
    assert matcher.flush() == ""
    assert not matcher.stopped


def test_text_that_cannot_start_a_stop_is_emitted_at_once() -> None:
    matcher = StopMatcher(["</s>"])
    assert matcher.feed("plain text") == "plain text"
    assert not matcher.stopped


def test_stop_split_across_single_character_feeds() -> None:
    emitted, tail, stopped = stream(["<|end|>"], list("answer<|end|>ignored"))
    assert "".join(emitted) == "answer"
    assert tail == ""
    assert stopped


def test_partial_stop_is_held_back_until_it_completes() -> None:
    matcher = StopMatcher(["<|end|>"])
    assert matcher.feed("answer<|e") == "answer"
    assert matcher.feed("nd") == ""
    assert not matcher.stopped
    assert matcher.feed("|>") == ""
    assert matcher.stopped


def test_stop_at_the_very_start_emits_nothing() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("STOP and more") == ""
    assert matcher.stopped
    assert matcher.flush() == ""


def test_stop_at_the_very_start_fed_character_by_character() -> None:
    emitted, tail, stopped = stream(["STOP"], list("STOPxyz"))
    assert emitted == ["", "", "", "", "", "", ""]
    assert tail == ""
    assert stopped


def test_earliest_of_several_stops_wins() -> None:
    matcher = StopMatcher(["zzz", "b", "\n\n"])
    assert matcher.feed("a\n\nb zzz") == "a"
    assert matcher.stopped


def test_earliest_stop_wins_regardless_of_stop_order() -> None:
    for stops in (["END", "\n"], ["\n", "END"]):
        matcher = StopMatcher(stops)
        assert matcher.feed("one\ntwo END") == "one"


def test_partial_stop_that_diverges_is_released() -> None:
    matcher = StopMatcher(["<|end|>"])
    assert matcher.feed("a <|e") == "a "
    assert matcher.feed("x") == "<|ex"
    assert not matcher.stopped
    assert matcher.flush() == ""


def test_released_text_may_itself_start_a_new_partial_stop() -> None:
    matcher = StopMatcher(["abc"])
    assert matcher.feed("ab") == ""
    assert matcher.feed("ab") == "ab"  # "abab": the first "ab" cannot begin "abc" any more
    assert matcher.feed("c") == ""
    assert matcher.stopped


def test_longest_possible_partial_stop_is_held() -> None:
    matcher = StopMatcher(["aab"])
    assert matcher.feed("xaa") == "x"
    assert matcher.feed("a") == "a"  # "aaa": only the last "aa" can still begin "aab"
    assert matcher.feed("b") == ""
    assert matcher.stopped


def test_flush_returns_held_text_when_generation_ends_without_a_stop() -> None:
    matcher = StopMatcher(["<|end|>"])
    assert matcher.feed("done <|en") == "done "
    assert matcher.flush() == "<|en"
    assert matcher.flush() == ""  # held text is handed out once


def test_empty_stop_strings_are_ignored() -> None:
    matcher = StopMatcher(["", "END", ""])
    assert matcher.feed("some text") == "some text"
    assert not matcher.stopped
    assert matcher.feed(" then END") == " then "
    assert matcher.stopped


def test_only_empty_stop_strings_never_stop() -> None:
    emitted, tail, stopped = stream([""], list("abc"))
    assert "".join(emitted) + tail == "abc"
    assert not stopped


def test_nothing_is_emitted_after_stopping() -> None:
    matcher = StopMatcher(["."])
    assert matcher.feed("Hi. there") == "Hi"
    assert matcher.feed("more text") == ""
    assert matcher.feed(".") == ""
    assert matcher.stopped


def test_flush_after_stop_is_empty_even_with_held_text_before() -> None:
    matcher = StopMatcher(["<|end|>"])
    assert matcher.feed("x<|end") == "x"
    assert matcher.feed("|>") == ""
    assert matcher.flush() == ""


def test_stop_inside_a_longer_stop_ends_a_stream_as_soon_as_it_completes() -> None:
    # "Question" completes before "\nQuestion:" could: generation stops right there.
    emitted, tail, stopped = stream(["\nQuestion:", "Question"], list("A\nQuestion:"))
    assert "".join(emitted) + tail == "A\n"
    assert stopped


def test_unicode_text_and_stops() -> None:
    emitted, tail, stopped = stream(["。终"], ["答案是", "四十二", "。", "终", "了"])
    assert "".join(emitted) + tail == "答案是四十二"
    assert stopped


# --- property -------------------------------------------------------------------------------


def _inner_stop(stops: Sequence[str]) -> bool:
    """Whether a stop occurs strictly inside another (not at its start or end).

    Then the result depends on the split: streamed, the inner stop completes first and
    ends generation; fed at once, the earlier-starting outer stop wins.
    """
    for outer in stops:
        for inner in stops:
            if not inner or len(inner) >= len(outer):
                continue
            for i in range(1, len(outer) - len(inner)):
                if outer.startswith(inner, i):
                    return True
    return False


def _expected(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    cuts = [i for s in stops if s and (i := text.find(s)) >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


ALPHABET = "ab\n<>"
STOPS = st.lists(st.text(ALPHABET, max_size=4), max_size=4).filter(
    lambda stops: not _inner_stop(stops)
)


@settings(max_examples=500, deadline=None)
@given(text=st.text(ALPHABET, max_size=40), stops=STOPS, data=st.data())
def test_emitted_text_is_text_before_first_stop_whatever_the_split(
    text: str, stops: list[str], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=len(text) + 1)))
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in pairwise(bounds)]
    assert "".join(pieces) == text

    emitted, tail, stopped = stream(stops, pieces)

    expected, should_stop = _expected(text, stops)
    assert "".join(emitted) + tail == expected
    assert stopped == should_stop


@settings(max_examples=300, deadline=None)
@given(text=st.text(ALPHABET, max_size=40), stops=STOPS)
def test_character_by_character_matches_one_feed(text: str, stops: list[str]) -> None:
    by_char, by_char_tail, by_char_stopped = stream(stops, list(text))
    at_once, at_once_tail, at_once_stopped = stream(stops, [text])
    assert "".join(by_char) + by_char_tail == "".join(at_once) + at_once_tail
    assert by_char_stopped == at_once_stopped
