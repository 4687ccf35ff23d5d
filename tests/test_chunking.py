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
