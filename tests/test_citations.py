"""Citation markers: valid numbers only, and attribution of sentences left bare."""

from __future__ import annotations

from llm.citations import attribute, cited_numbers
from llm.prompt import Source

SOURCES = [
    Source(1, "Travel", 2, "Meals abroad are refunded up to 45 euros a day with receipts."),
    Source(2, "Leave", 1, "Staff receive 28 days of paid annual leave plus public holidays."),
]


def test_cited_numbers_in_order_without_duplicates_or_out_of_range() -> None:
    assert cited_numbers("A [2]. B [1] and [2]. C [7] [0] [3].", {1, 2, 3}) == [2, 1, 3]


def test_bare_sentences_get_the_source_they_come_from() -> None:
    text = "Meals abroad are refunded up to 45 euros. Staff receive 28 days of annual leave."
    assert attribute(text, SOURCES) == (
        "Meals abroad are refunded up to 45 euros [1]. Staff receive 28 days of annual leave [2]."
    )


def test_existing_markers_are_kept_and_unrelated_text_left_alone() -> None:
    text = "Leave is 28 days [2]. I hope this helps!"
    assert attribute(text, SOURCES) == text


def test_no_sources_means_no_change() -> None:
    assert attribute("Anything at all.", []) == "Anything at all."


def test_a_marker_never_lands_inside_a_number() -> None:
    sources = [Source(1, "Flexitime", 1, "You may hold at most 22.5 hours of TOIL at any time.")]
    answered = attribute("You may hold at most 22.5 hours of TOIL.", sources)
    assert answered == "You may hold at most 22.5 hours of TOIL [1]."


def test_a_marker_after_the_full_stop_counts_for_its_sentence() -> None:
    sources = [Source(1, "Office", 1, "The office opens at 8:00 on weekdays.")]
    text = "The office opens at 8:00 on weekdays. [2] Parking is free."
    assert attribute(text, sources) == text


TABLE_SOURCE = Source(
    3,
    "Health plans",
    1,
    "| Plan name | Yearly deductible |\n| --- | --- |\n| Silver | £1,250 |\n| Gold | £500 |",
)


def test_a_table_keeps_its_shape_when_its_rows_are_attributed() -> None:
    """A marker after a row's last pipe is one cell more, and the table falls apart into a
    paragraph of pipes: markers go inside the last cell, never on the header or its rule."""
    text = "| Plan name | Yearly deductible |\n|---|---|\n| Silver | £1,250 |\n| Gold | £500 |"
    assert attribute(text, [TABLE_SOURCE]) == (
        "| Plan name | Yearly deductible |\n|---|---|\n| Silver | £1,250 [3] |\n| Gold | £500 [3] |"
    )


def test_markers_the_model_wrote_past_a_rows_last_pipe_move_into_its_last_cell() -> None:
    text = "| Plan | Cost |\n| :--- | ---: |\n| Gold | £500 | [3]\n| Silver | £1,250 |[3][4]"
    assert attribute(text, []) == (
        "| Plan | Cost |\n| :--- | ---: |\n| Gold | £500 [3] |\n| Silver | £1,250 [3][4] |"
    )
