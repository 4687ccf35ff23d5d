"""The one header finder (retrieval/parsers/tables.py): title rows, header rows, merged
cells, and a sheet's layout, from cells' text and what a format knows of them."""

from __future__ import annotations

import time

from retrieval.parsers.sheets import SheetRow, sheet_blocks
from retrieval.parsers.table_headers import (
    HeaderSplit,
    Hint,
    grid_blocks,
    split_header,
    spread_merges,
)
from retrieval.parsers.tables import MAX_COLUMNS
from retrieval.types import Block

A, B, N, T = Hint.ACROSS, Hint.BELOW, Hint.NUMBER, Hint.TEXT
_ = Hint.NONE


def texts(blocks: list[Block]) -> list[str]:
    return [block.text for block in blocks]


# --- split_header: text only (CSV, Markdown, RTF) -------------------------------------------


def test_a_first_row_of_labels_is_the_header_and_numbers_are_data() -> None:
    assert split_header([["Plan", "Price"], ["Silver", "£500"]]) == HeaderSplit(0, 1)
    assert split_header([["2024", "10"], ["2025", "12"]]) == HeaderSplit(0, 0)
    assert split_header([["Plan", "Price"]]) == HeaderSplit(0, 0)  # no body under it
    assert split_header([]) == HeaderSplit(0, 0)


def test_one_column_may_be_unlabelled_but_not_two() -> None:
    assert split_header([["", "Q1", "Q2"], ["North", "1", "2"]]).header == 1
    assert split_header([["", "", "Q2"], ["North", "1", "2"]]).header == 0


def test_a_one_column_list_has_a_header_only_over_numbers() -> None:
    assert split_header([["Name"], ["Ada"], ["Grace"]]).header == 0
    assert split_header([["Amount"], ["12"], ["30"]]).header == 1


def test_title_rows_over_a_wider_table() -> None:
    rows = [["Price list 2027", "", ""], ["Plan", "Price", "Seats"], ["Silver", "500", "30"]]
    assert split_header(rows) == HeaderSplit(1, 1)
    # one value right of the table's left edge, or a list of one-value rows: no title
    assert (
        split_header([["", "Note", ""], ["Plan", "Price", "Seats"], ["Silver", "5", "3"]])[0] == 0
    )
    assert split_header([["Ada"], ["Grace"], ["Linus"]]) == HeaderSplit(0, 0)


def test_a_csv_export_of_merged_header_cells_is_two_header_rows() -> None:
    """Excel writes a merged cell's text in its first column and leaves the others empty."""
    rows = [
        ["Region", "2025", "", "2026", ""],
        ["", "Q1", "Q2", "Q1", "Q2"],
        ["North", "£10", "£20", "£30", "£40"],
    ]
    assert split_header(rows) == HeaderSplit(0, 2)
    blocks = grid_blocks(rows, caption="Sales")
    assert blocks[0].text == "| Region | 2025 Q1 | 2025 Q2 | 2026 Q1 | 2026 Q2 |"
    assert texts(blocks[1:]) == ["| North | £10 | £20 | £30 | £40 |"]


def test_gaps_in_a_first_row_of_data_are_not_a_header() -> None:
    # the row under the gaps holds numbers: data
    assert (
        split_header([["Ada", "10", "", ""], ["Grace", "1", "2", "3"], ["Linus", "4", "5", "6"]])[1]
        == 0
    )
    # all text, with nothing merged down and no numbers under: one header row at most
    rows = [
        ["Name", "Office", "", ""],
        ["Ada", "London", "Paris", "Rome"],
        ["Grace", "Leeds", "York", "Hull"],
    ]
    assert split_header(rows).header != 2


# --- split_header: with hints (XLSX, ODS, PPTX, RTF) ----------------------------------------


def test_merged_across_rows_and_the_label_row_under_them() -> None:
    rows = [["Region", "2025", "", "Since"], ["", "Q1", "Q2", ""], ["North", "10", "20", "2019"]]
    hints = [[_, N, A, _], [B, T, T, B], [T, N, N, N]]
    assert split_header(rows, hints) == HeaderSplit(0, 2)
    assert spread_merges(rows, hints, 2)[:2] == [
        ["Region", "2025", "2025", "Since"],
        ["Region", "Q1", "Q2", "Since"],
    ]


def test_a_merged_header_over_numbers_is_one_row() -> None:
    rows = [["Region", "Sales", ""], ["North", "10", "20"], ["South", "5", "6"]]
    assert split_header(rows, [[_, _, A]]) == HeaderSplit(0, 1)


def test_a_marked_header_grows_over_cells_merged_down() -> None:
    """PowerPoint flags only the first row; "Region" merged over two rows says both are."""
    rows = [
        ["Region", "2025", "", "2026", ""],
        ["", "Q1", "Q2", "Q1", "Q2"],
        ["N", "1", "2", "3", "4"],
    ]
    hints = [[_, _, A, _, A], [B, _, _, _, _]]
    assert split_header(rows, hints, marked=1) == HeaderSplit(0, 2)
    assert split_header(rows, [[_, _, A, _, A]], marked=1) == HeaderSplit(0, 2)  # labels under
    assert split_header([["1", "2"], ["3", "4"]], marked=1) == HeaderSplit(0, 1)  # as marked


def test_typed_values_decide_over_their_text() -> None:
    rows = [["Region", "2025"], ["North", "10"]]
    assert split_header(rows).header == 0  # "2025" reads as a number
    assert split_header(rows, [[T, T], [T, N]]).header == 1  # typed as text: a label
    assert split_header([["Plan", "Fee"], ["A", "1"]], [[T, N]]).header == 0


def test_a_title_merged_across_the_table_and_marked_rows_under_it() -> None:
    rows = [["Price list", "", ""], ["Plan", "Price", "Seats"], ["Silver", "500", "30"]]
    assert split_header(rows, [[_, A, A]], marked=2) == HeaderSplit(1, 1)


def test_spread_merges_body_only_down_the_first_column() -> None:
    rows = [
        ["Group", "Item", "Qty"],
        ["Fruit", "Apple", "3"],
        ["", "Pear", "4"],
        ["Total", "", "7"],
    ]
    hints = [[], [], [B, _, _], [_, A, _]]
    assert spread_merges(rows, hints, 1)[1:] == [
        ["Fruit", "Apple", "3"],
        ["Fruit", "Pear", "4"],
        ["Total", "", "7"],
    ]
    # a block merged over two rows and two columns: only its first column in the body
    rows = [["K", "V", "W"], ["a", "b", ""], ["", "", "x"]]
    assert spread_merges(rows, [[], [_, _, A], [B, B, B | A]], 1)[2] == ["a", "b", "x"]


def test_grid_blocks_puts_titles_in_the_caption_and_drops_empty_rows() -> None:
    rows = [
        ["Price list", "", ""],
        ["", "", ""],
        ["Plan", "Price", "Seats"],
        ["Silver", "500", "3"],
    ]
    context = "Deck — Price list\n| Plan | Price | Seats |\n| --- | --- | --- |"
    assert grid_blocks(rows, caption="Deck") == [
        Block("| Plan | Price | Seats |", is_heading=True, table=context),
        Block("| Silver | 500 | 3 |", table=context),
    ]
    assert grid_blocks([]) == []


# --- sheet_blocks ------------------------------------------------------------------------


def sheet(
    *rows: tuple[int, list[str]], hints: dict[int, dict[int, Hint]] | None = None
) -> list[SheetRow]:
    return [
        SheetRow(number, {c: t for c, t in enumerate(cells) if t}, (hints or {}).get(number, {}))
        for number, cells in rows
    ]


def test_a_title_over_a_blank_row_then_a_two_row_merged_header() -> None:
    """The bench's XLSX and ODS layout: the title in A1, a blank row, the header."""
    rows = sheet(
        (1, ["Sales by region"]),
        (3, ["Region", "2025", "", "2026", ""]),
        (4, ["", "Q1", "Q2", "Q1", "Q2"]),
        (5, ["North", "£1", "£2", "£3", "£4"]),
        hints={3: {2: A, 4: A}, 4: {0: B}},
    )
    header = "| Region | 2025 Q1 | 2025 Q2 | 2026 Q1 | 2026 Q2 |"
    context = f"Sales — Sales by region\n{header}\n| --- | --- | --- | --- | --- |"
    assert sheet_blocks("Sales", rows) == [
        Block(header, is_heading=True, table=context),
        Block("| North | £1 | £2 | £3 | £4 |", table=context),
    ]


def test_blank_rows_continue_a_table_or_start_the_next_and_notes_stay_text() -> None:
    rows = sheet(
        (1, ["Region", "Sales"]),
        (2, ["North", "10"]),
        (4, ["South", "20"]),  # more of the same table
        (6, ["Costs"]),
        (7, ["Product", "Units"]),  # a table of its own, under its title
        (8, ["Pen", "5"]),
        (10, ["Region", "Sales"]),  # a repeated header: a new table
        (11, ["East", "7"]),
        (13, ["Source: records"]),
    )
    blocks = sheet_blocks("S", rows)
    assert [(b.text, b.table) for b in blocks if not b.is_heading] == [
        ("| North | 10 |", "S\n| Region | Sales |\n| --- | --- |"),
        ("| South | 20 |", "S\n| Region | Sales |\n| --- | --- |"),
        ("| Pen | 5 |", "S — Costs\n| Product | Units |\n| --- | --- |"),
        ("| East | 7 |", "S\n| Region | Sales |\n| --- | --- |"),
        ("Source: records", None),
    ]


def test_a_label_in_a_column_of_numbers_starts_a_new_table() -> None:
    rows = sheet((1, ["Item", "Qty"]), (2, ["Pen", "3"]), (4, ["Total", "n/a"]), (5, ["All", "9"]))
    blocks = sheet_blocks("S", rows)
    assert {b.table for b in blocks[:2]} == {"S\n| Item | Qty |\n| --- | --- |"}
    assert blocks[2].table != blocks[1].table


def test_marked_header_rows_of_a_sheet() -> None:
    rows = [
        SheetRow(1, {0: "Code", 1: "Name"}, marked=True),
        SheetRow(2, {0: "7", 1: "8"}, marked=True),
        SheetRow(3, {0: "1", 1: "2"}),
    ]
    assert texts(sheet_blocks("S", rows)) == ["| Code 7 | Name 8 |", "| 1 | 2 |"]


def test_a_long_sheet_with_many_blank_rows_is_laid_out_in_linear_time() -> None:
    rows = [SheetRow(1, {0: "Item", 1: "Qty"})]
    rows += [SheetRow(2 * n + 2, {0: f"item {n}", 1: str(n)}) for n in range(20_000)]
    started = time.perf_counter()
    blocks = sheet_blocks("S", rows)
    assert time.perf_counter() - started < 2
    assert len(blocks) == 20_001 and {b.table for b in blocks} == {
        "S\n| Item | Qty |\n| --- | --- |"
    }


def test_a_wide_row_is_cut_at_the_column_limit_by_the_table_model() -> None:
    rows = sheet((1, ["x"] * (MAX_COLUMNS + 10)), (2, ["y"] * (MAX_COLUMNS + 10)))
    assert all(b.text.count("|") == MAX_COLUMNS + 1 for b in sheet_blocks("S", rows))
