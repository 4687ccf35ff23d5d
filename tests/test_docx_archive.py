"""DOCX container limits: real bombs built here with zipfile fail at once with a reason."""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Iterator

import pytest

from retrieval.parsers import ParseError, parse_document
from retrieval.parsers.isolated import IsolatedParser
from retrieval.parsers.office_archive import (
    MAX_MEMBERS,
    MAX_UNCOMPRESSED_BYTES,
    MAX_XML_BYTES,
    check_archive,
)
from retrieval.types import DocumentKind
from tests.documents import make_docx

PARAGRAPH = b"<w:p><w:r><w:t>Clause %d: the supplier delivers within 30 days.</w:t></w:r></w:p>"


def _rebuilt(
    extra: dict[str, Iterator[bytes]], *, document: Iterator[bytes] | None = None
) -> bytes:
    """A genuine DOCX, its word/document.xml body streamed from ``document`` if given, with
    ``extra`` parts added (each streamed, so a bomb never sits in memory whole)."""
    source = zipfile.ZipFile(io.BytesIO(make_docx([("p", "Genuine text")])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            payload = source.read(item)
            if item.filename == "word/document.xml" and document is not None:
                head, tail = payload.split(b"<w:body>", 1)
                _stream(target, item.filename, iter([head, b"<w:body>", *document, tail]))
            else:
                target.writestr(item.filename, payload)
        for name, chunks in extra.items():
            _stream(target, name, chunks)
    return out.getvalue()


def _stream(target: zipfile.ZipFile, name: str, chunks: Iterator[bytes]) -> None:
    with target.open(name, "w", force_zip64=True) as part:
        for chunk in chunks:
            part.write(chunk)


def _paragraphs(total_bytes: int) -> Iterator[bytes]:
    """Word-like XML that deflates about 30 times, as real text does (no ratio alarm)."""
    written, number = 0, 0
    while written < total_bytes:
        chunk = b"".join(PARAGRAPH % n for n in range(number, number + 10_000))
        number += 10_000
        written += len(chunk)
        yield chunk


def _repeated(piece: bytes, total_bytes: int) -> Iterator[bytes]:
    block = piece * (1_048_576 // len(piece))
    for _ in range(total_bytes // len(block) + 1):
        yield block


def _reason(data: bytes) -> str:
    with pytest.raises(ParseError) as caught:
        parse_document(data, DocumentKind.DOCX, "upload.docx")
    return caught.value.reason


def test_thousands_of_parts_are_refused() -> None:
    # As in the report: 5,018 entries in all, which used to be indexed.
    genuine = len(zipfile.ZipFile(io.BytesIO(make_docx([("p", "x")]))).infolist())
    parts = {f"word/media/part{n}.xml": iter([b"<a/>" * 1000]) for n in range(5_018 - genuine)}
    reason = _reason(_rebuilt(parts))
    assert "5,018 parts" in reason and f"at most {MAX_MEMBERS:,}" in reason


def test_xml_beyond_the_cap_is_refused_before_any_xml_is_parsed() -> None:
    # 150 MB of XML from about 1.4 MB (ratio 111) parsed for two minutes and 1.5 GB;
    # here 70 MB of ordinary-looking XML, under every other limit, fails at once.
    data = _rebuilt({}, document=_paragraphs(70 << 20))
    assert len(data) * 100 > 70 << 20  # deflates well under the ratio limit
    started = time.perf_counter()
    reason = _reason(data)
    assert f"at most {MAX_XML_BYTES >> 20} MB are accepted" in reason and "of XML" in reason
    assert time.perf_counter() - started < 10


def test_xml_is_counted_by_content_whatever_the_part_is_called() -> None:
    # A relationship can make a part of any name the document: XML is recognised by content.
    data = _rebuilt({"word/media/image1.png": _paragraphs(70 << 20)})
    assert "of XML" in _reason(data)


def test_an_archive_that_expands_beyond_the_total_cap_is_refused() -> None:
    data = _rebuilt({"word/media/huge.bin": _repeated(b"\0", MAX_UNCOMPRESSED_BYTES + 1)})
    assert f"at most {MAX_UNCOMPRESSED_BYTES >> 20} MB are accepted" in _reason(data)


def test_one_part_that_is_filler_is_refused_even_among_real_images() -> None:
    import random

    noise = random.Random(7).randbytes(2 << 20)  # photographs do not compress
    data = _rebuilt(
        {
            "word/media/photo.jpg": iter([noise]),
            "word/footer1.xml": _repeated(b"<w:p/>", 20 << 20),  # 20 MB of one element
        }
    )
    reason = _reason(data)
    assert "'word/footer1.xml' expands" in reason and "at most 100 times" in reason


def test_a_genuine_document_with_many_images_and_parts_is_accepted() -> None:
    import random

    pixels = random.Random(3).randbytes(20_000)
    images = {f"word/media/image{n}.png": iter([b"\x89PNG" + pixels]) for n in range(600)}
    footers = {f"word/footer{n}.xml": iter([b"<w:ftr/>"]) for n in range(200)}
    data = _rebuilt({**images, **footers}, document=_paragraphs(4 << 20))
    check_archive(data)
    blocks = parse_document(data, DocumentKind.DOCX, "manual.docx").pages[0].blocks
    assert len(blocks) > 40_000


def test_the_bomb_fails_fast_in_the_parser_process_too() -> None:
    parser = IsolatedParser(timeout_s=120)
    try:
        started = time.monotonic()
        with pytest.raises(ParseError, match="ZIP bomb"):
            parser.parse(_rebuilt({}, document=_paragraphs(70 << 20)), DocumentKind.DOCX, "b.docx")
        assert time.monotonic() - started < 20  # not the 120 s budget
    finally:
        parser.close()
