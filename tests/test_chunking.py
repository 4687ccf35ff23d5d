"""Chunks follow structure, respect the token bound, overlap, and are exact page slices."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from retrieval.chunking import chunk_page
from retrieval.types import Block, ParsedPage


def words(texts: Sequence[str]) -> list[int]:
    return [len(text.split()) for text in texts]


def paragraph(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}." if i % 8 == 7 else f"{tag}{i}" for i in range(n))


def test_small_page_is_one_chunk() -> None:
    page = ParsedPage(1, (Block("Title", is_heading=True), Block("Short body.")))
    [chunk] = chunk_page(page, max_tokens=50, overlap_tokens=5, count_tokens=words)
    assert chunk.text == "Title\n\nShort body."
    assert chunk.heading == "Title"
    assert (chunk.start, chunk.end) == (0, len(page.text))


def test_headings_start_new_chunks() -> None:
    page = ParsedPage(
        3,
        (
            Block("One", is_heading=True),
            Block("alpha beta"),
            Block("Two", is_heading=True),
            Block("gamma delta"),
        ),
    )
    chunks = chunk_page(page, max_tokens=50, overlap_tokens=5, count_tokens=words)
    assert [c.text for c in chunks] == ["One\n\nalpha beta", "Two\n\ngamma delta"]
    assert [c.heading for c in chunks] == ["One", "Two"]
    assert all(c.page == 3 for c in chunks)


def test_long_text_is_bounded_overlapping_and_sliced_exactly() -> None:
    page = ParsedPage(1, (Block(paragraph(300, "a")), Block(paragraph(120, "b"))))
    chunks = chunk_page(page, max_tokens=60, overlap_tokens=10, count_tokens=words)
    assert len(chunks) >= 7
    for chunk in chunks:
        assert len(chunk.text.split()) <= 60
        assert page.text[chunk.start : chunk.end] == chunk.text
    for previous, following in pairwise(chunks):
        assert following.start < previous.end or following.text.startswith("b0")  # overlap
    covered = set()
    for chunk in chunks:
        covered.update(chunk.text.split())
    assert covered == set(page.text.split())  # nothing lost


def test_a_single_huge_word_run_without_sentences_is_split() -> None:
    page = ParsedPage(1, (Block(" ".join(["word"] * 1000)),))
    chunks = chunk_page(page, max_tokens=100, overlap_tokens=0, count_tokens=words)
    assert len(chunks) == 10
    assert all(len(c.text.split()) <= 100 for c in chunks)


def test_empty_page_has_no_chunks() -> None:
    assert chunk_page(ParsedPage(1, ()), max_tokens=10, overlap_tokens=2, count_tokens=words) == []


def _table_page() -> ParsedPage:
    context = "Plan prices\n| Plan | Deductible | Premium |\n| --- | --- | --- |"
    header = Block("| Plan | Deductible | Premium |", is_heading=True, table=context)
    rows = [Block(f"| Plan {i} | {i * 100} | {i * 7} |", table=context) for i in range(12)]
    return ParsedPage(
        2,
        (
            Block("Plans", is_heading=True),
            Block("Our plans differ in deductible and premium."),
            header,
            *rows,
            Block("Prices change every April."),
        ),
    )


def test_a_tables_rows_are_passages_of_their_own_each_under_its_header() -> None:
    page = _table_page()
    context = page.blocks[3].table
    chunks = chunk_page(page, max_tokens=40, overlap_tokens=0, count_tokens=words)
    tables = [c for c in chunks if c.table is not None]
    prose = [c for c in chunks if c.table is None]
    assert len(tables) >= 3  # the header's 13 words leave 27 for rows of 7 words
    assert all(c.table == context for c in tables)
    assert all(line.startswith("| Plan ") for c in tables for line in c.text.split("\n\n"))
    for chunk in tables:  # rows plus the header shown with them stay inside the bound
        assert len(chunk.text.split()) + len(context.split()) <= 40
        assert page.text[chunk.start : chunk.end] == chunk.text
    assert [c.text for c in prose] == [
        "Plans\n\nOur plans differ in deductible and premium.",
        "Prices change every April.",
    ]
    rows = {line for c in tables for line in c.text.split("\n\n")}
    body = {block.text for block in page.blocks if block.table and not block.is_heading}
    assert rows == body  # every row, once or more; the header row only in the context
    assert all(c.heading == "Plans" for c in tables)


def test_a_tables_passages_do_not_overlap_since_no_row_is_ever_cut() -> None:
    chunks = chunk_page(_table_page(), max_tokens=40, overlap_tokens=8, count_tokens=words)
    tables = [c for c in chunks if c.table is not None]
    assert len(tables) >= 3 and all(a.end < b.start for a, b in pairwise(tables))
