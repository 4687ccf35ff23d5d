"""Parsing in a child process: same results, and hostile files cost only themselves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from retrieval.parsers import ParseError, parse_document
from retrieval.parsers.isolated import IsolatedParser
from retrieval.types import DocumentKind
from tests.documents import make_docx, make_pdf


@pytest.fixture
def parser() -> Iterator[IsolatedParser]:
    isolated = IsolatedParser(timeout_s=20)
    yield isolated
    isolated.close()


@pytest.mark.parametrize(
    ("data", "kind", "name"),
    [
        (make_pdf(["one", "two\nlines"], title="T"), DocumentKind.PDF, "a.pdf"),
        (make_docx([("h1", "Head"), ("p", "Body text")]), DocumentKind.DOCX, "b.docx"),
        ("# Título\n\nÜnïcode body".encode(), DocumentKind.MARKDOWN, "c.md"),
    ],
)
def test_child_results_equal_in_process_results(
    parser: IsolatedParser, data: bytes, kind: DocumentKind, name: str
) -> None:
    assert parser.parse(data, kind, name) == parse_document(data, kind, name)


def test_parse_errors_come_back_with_their_reason(parser: IsolatedParser) -> None:
    with pytest.raises(ParseError, match="empty"):
        parser.parse(b"", DocumentKind.TEXT, "empty.txt")
    assert parser.parse(b"still works", DocumentKind.TEXT, "ok.txt").pages  # same child


def test_a_file_over_the_time_budget_is_abandoned_and_the_next_one_parses() -> None:
    strict = IsolatedParser(timeout_s=0.05)  # far below what 40 MB of text takes to parse
    try:
        with pytest.raises(ParseError, match="longer than"):
            strict.parse(b"word " * (8 << 20), DocumentKind.TEXT, "slow.txt")
        strict.timeout_s = 20
        assert strict.parse(b"next file", DocumentKind.TEXT, "next.txt").pages
    finally:
        strict.close()


def test_memory_cap_turns_a_blow_up_into_a_failure() -> None:
    tiny = IsolatedParser(timeout_s=30, memory_bytes=400 << 20)
    try:
        with pytest.raises(ParseError):
            tiny.parse(b"x " * (60 << 20), DocumentKind.TEXT, "huge.txt")
        assert tiny.parse(b"small", DocumentKind.TEXT, "small.txt").pages
    finally:
        tiny.close()
