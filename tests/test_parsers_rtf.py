"""RTF: paragraphs, headings, tables, escapes, skipped destinations and hostile nesting."""

from __future__ import annotations

import time

import pytest

from retrieval.parsers.errors import ParseError
from retrieval.parsers.rtf import MAX_DEPTH, is_rtf, parse_rtf
from retrieval.types import Block

_HEADER = (
    rb"{\rtf1\ansi\ansicpg1252\deff0\uc1"
    rb"{\fonttbl{\f0\fswiss\fcharset0 Arial{\*\panose 020b0604020202020204};}"
    rb"{\f1\froman\fcharset204 Times New Roman Cyr;}}"
    rb"{\colortbl;\red0\green0\blue0;\red255\green0\blue0;}"
    rb"{\stylesheet{\ql Normal;}{\s1\ql\b\fs32 heading 1;}{\s2\ql Body Text;}"
    rb"{\*\cs10 \additive Default Paragraph Font;}}"
    rb"{\info{\title Price list 2025}{\author Jo}{\*\company ACME}}" + b"\n"
)


def _rtf(body: bytes, header: bytes = _HEADER) -> bytes:
    return header + body + b"}"


def _texts(data: bytes) -> list[str]:
    return [block.text for block in parse_rtf(data, "fallback").pages[0].blocks]


def test_paragraphs_bold_and_escapes() -> None:
    data = _rtf(
        rb"\pard\plain Plain and {\b bold} text.\par"
        rb"\pard Caf\'e9 costs \u8364?5 \endash  fair\par"
        rb"\pard Two fallbacks{\uc2\u8212\'97\'97} skipped\par"
        rb"\pard Emoji \u-10179?\u-8704? here\par"
        rb"\pard {\f1 \'cf\'f0\'e8\'e2\'e5\'f2} from a Cyrillic font\par"
        rb"\pard Line\line break\tab tab \{braces\} \\ back\~slash\par"
    )
    document = parse_rtf(data, "fallback")
    assert document.title == "Price list 2025"
    assert [block.text for block in document.pages[0].blocks] == [
        "Plain and bold text.",
        "Café costs €5 – fair",
        "Two fallbacks— skipped",
        "Emoji 😀 here",
        "Привет from a Cyrillic font",
        "Line break tab {braces} \\ back slash",
    ]
    assert document.pages[0].label == ""


def test_headings_by_outline_level_and_style() -> None:
    data = _rtf(
        rb"\pard\s1 Prices\par"
        rb"\pard\s2 Body in a named style.\par"
        rb"\pard\outlinelevel1 Outline heading\par"
        rb"\pard\outlinelevel9 Outline level 9 is body text\par"
    )
    blocks = parse_rtf(data, "fallback").pages[0].blocks
    assert [(b.text, b.is_heading) for b in blocks] == [
        ("Prices", True),
        ("Body in a named style.", False),
        ("Outline heading", True),
        ("Outline level 9 is body text", False),
    ]


def test_table_rows_carry_caption_and_header() -> None:
    row = rb"\trowd\trgaph108\cellx2000\cellx4000\cellx6000 "
    data = _rtf(
        rb"\pard\s1 Plans\par"
        + row
        + rb"\pard\intbl {\b Plan}\cell Price\cell Seats\cell\row"
        + row
        + rb"\pard\intbl Silver\cell 500\cell 30\cell\row"
        + row
        + rb"\pard\intbl Gold\cell 900\cell {\i 60}\par more\cell\row"
        + rb"\pard After the table.\par"
    )
    blocks = parse_rtf(data, "fallback").pages[0].blocks
    context = "Plans\n| Plan | Price | Seats |\n| --- | --- | --- |"
    assert list(blocks) == [
        Block("Plans", is_heading=True),
        Block("| Plan | Price | Seats |", is_heading=True, table=context),
        Block("| Silver | 500 | 30 |", table=context),
        Block("| Gold | 900 | 60 more |", table=context),
        Block("After the table."),
    ]


def test_table_of_numbers_has_no_header_row() -> None:
    row = rb"\trowd\cellx2000\cellx4000 "
    data = _rtf(row + rb"\intbl 1\cell 2\cell\row" + row + rb"\intbl 3\cell 4\cell\row")
    blocks = parse_rtf(data, "fallback").pages[0].blocks
    assert [(b.text, b.table) for b in blocks] == [("| 1 | 2 |", None), ("| 3 | 4 |", None)]


def test_pictures_objects_and_other_destinations_are_skipped() -> None:
    hex_data = b"89504e470d0a1a0a" * 500
    data = _rtf(
        rb"{\header \pard Running header\par}"
        rb"\pard Before{\*\shppict{\pict\pngblip\picw10\pich10 " + hex_data + rb"}}"
        rb"{\pict\wmetafile8 " + hex_data + rb"}"
        rb"{\pict\bin6 }{}{}x} after.\par"
        rb"\pard{\field{\*\fldinst HYPERLINK \"https://example.com\"}{\fldrslt the link}}"
        rb"{\*\bkmkstart b1}{\*\unknowndestination secret}\par"
        rb"\pard Note{\footnote \pard footnote text\par}{\v hidden words} end\par"
        rb"{\object\objemb{\*\objclass Excel}{\*\objdata 0102" + hex_data + rb"}"
        rb"{\result shown result}}\par"
    )
    assert _texts(data) == ["Before after.", "the link", "Note end", "shown result"]


def test_binary_count_beyond_the_file_costs_nothing() -> None:
    data = rb"{\rtf1 Kept\par{\pict\bin99999999999 " + b"x" * 1000
    assert _texts(data) == ["Kept"]
    assert _texts(rb"{\rtf1 {\pict\bin-5 }Negative count\par}") == ["Negative count"]


def test_title_falls_back_to_heading_then_file_name() -> None:
    placeholder = rb"{\rtf1\ansi{\info{\title Document1}}\pard\outlinelevel0 Real title\par}"
    assert parse_rtf(placeholder, "fallback").title == "Real title"
    table = rb"{\rtf1 \intbl Plan\cell Price\cell\row\intbl Gold\cell 9\cell\row}"
    assert parse_rtf(table, "fallback").title == "fallback"  # a header row is no title
    assert parse_rtf(rb"{\rtf1\ansi Only text\par}", "fallback").title == "fallback"


def test_deep_nesting_is_refused_fast() -> None:
    reason = f"the RTF is nested too deeply (more than {MAX_DEPTH:,} groups inside each other)"
    started = time.perf_counter()
    for data in (
        rb"{\rtf1 " + b"{" * 2_000_000,
        rb"{\rtf1 {\*\skipped " + b"{" * 2_000_000,  # inside a skipped destination too
    ):
        with pytest.raises(ParseError) as caught:
            parse_rtf(data, "fallback")
        assert caught.value.reason == reason
    assert time.perf_counter() - started < 2
    nested = rb"{\rtf1 " + b"{" * 900 + b"deep" + b"}" * 900 + b"\\par}"
    assert _texts(nested) == ["deep"]


def test_not_rtf_and_broken_endings() -> None:
    with pytest.raises(ParseError) as caught:
        parse_rtf(b"plain text", "fallback")
    assert caught.value.reason == "not an RTF file (it does not start with {\\rtf)"
    assert _texts(rb"{\rtf1 unclosed group {\b bold") == ["unclosed group bold"]
    assert _texts(rb"{\rtf1 closed}} trailing garbage") == ["closed"]
    assert is_rtf(b"\xef\xbb\xbf {\\rtf1 x}")
    assert not is_rtf(b"{\\rt")


def test_rows_marked_as_header_and_cells_merged_down() -> None:
    """``\\trhdr`` marks Word's "repeat as header row"; ``\\clvmgf``/``\\clvmrg`` merge a
    cell down, ``\\clmgf``/``\\clmrg`` across: the covered cells take the merged text."""
    top = rb"\trowd\trhdr\clvmgf\cellx2000\clmgf\cellx4000\clmrg\cellx6000 "
    second = rb"\trowd\trhdr\clvmrg\cellx2000\cellx4000\cellx6000 "
    body = rb"\trowd\cellx2000\cellx4000\cellx6000 "
    data = _rtf(
        rb"\pard\s1 Sales\par"
        + top
        + rb"\pard\intbl Region\cell 2025\cell\cell\row"
        + second
        + rb"\pard\intbl \cell Q1\cell Q2\cell\row"
        + body
        + rb"\pard\intbl North\cell 10\cell 20\cell\row"
        + rb"\pard After.\par"
    )
    blocks = parse_rtf(data, "fallback").pages[0].blocks
    context = "Sales\n| Region | 2025 Q1 | 2025 Q2 |\n| --- | --- | --- |"
    assert list(blocks[1:]) == [
        Block("| Region | 2025 Q1 | 2025 Q2 |", is_heading=True, table=context),
        Block("| North | 10 | 20 |", table=context),
        Block("After."),
    ]


def test_a_marked_header_row_of_numbers_is_still_the_header() -> None:
    row = rb"\trowd\cellx2000\cellx4000 "
    data = _rtf(rb"\trowd\trhdr\cellx2000\cellx4000 \intbl 1\cell 2\cell\row" + row)
    data = data[:-1] + rb"\intbl 3\cell 4\cell\row}"
    blocks = parse_rtf(data, "fallback").pages[0].blocks
    assert [(b.text, b.is_heading) for b in blocks] == [("| 1 | 2 |", True), ("| 3 | 4 |", False)]
