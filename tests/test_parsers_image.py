"""Pictures read by OCR (retrieval/parsers/image.py): PNG, JPEG, multi-page TIFF, WebP;
where each line stands on the picture, its pages drawn, and the bounds on hostile files.
Pictures are drawn in the test (Pillow's bundled font); OCR is real on a few small ones."""

from __future__ import annotations

import io
import struct
import time
import zlib
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont

from retrieval.ingest import _region_boxed
from retrieval.parsers import ParseError
from retrieval.parsers import image as image_module
from retrieval.parsers.image import is_image, parse_image, render_image
from retrieval.parsers.isolated import IsolatedParser
from retrieval.parsers.ocr import OcrOptions, Reading
from retrieval.types import Block, ChunkSpan, ParsedDocument, ParsedPage

TRAVEL = ["Travel policy. The refund limit", "is 300 euros per trip."]
PARKING = ["Visitors park in the north", "garage on level two."]
OPTIONS = OcrOptions(threads=2)


def _picture(paragraphs: list[list[str]], *, width: int = 560) -> Image.Image:
    """Black lines of text on white, a wide blank between paragraphs."""
    font = ImageFont.load_default(size=24)
    height = 30 + sum(36 * len(lines) + 40 for lines in paragraphs)
    picture = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(picture)
    y = 20
    for lines in paragraphs:
        for line in lines:
            draw.text((24, y), line, font=font, fill="black")
            y += 36
        y += 40
    return picture


def _saved(picture: Image.Image, fmt: str, **options: Any) -> bytes:
    out = io.BytesIO()
    picture.save(out, fmt, **options)
    return out.getvalue()


def _tiff(frames: list[Image.Image]) -> bytes:
    return _saved(frames[0], "TIFF", save_all=True, append_images=frames[1:])


def _forged_png(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels, with no pixel data."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


# The format, by its first bytes


def test_pictures_are_recognised_by_their_first_bytes() -> None:
    small = Image.new("L", (8, 8), 255)
    for data in (
        _saved(small, "PNG"),
        _saved(small, "JPEG"),
        _saved(small, "TIFF"),
        b"MM\x00*\x00\x00\x00\x08",  # a big-endian TIFF
        _saved(small, "WEBP"),
    ):
        assert is_image(data[:16])
    for head in (b"%PDF-1.7\n", b"RIFF\x10\x00\x00\x00WAVEfmt ", b"PK\x03\x04", b"GIF89a", b""):
        assert not is_image(head)


# What OCR reads, and where (real recognition)


def test_a_png_is_one_page_whose_regions_box_each_line() -> None:
    data = _saved(_picture([TRAVEL, PARKING]), "PNG")
    document = parse_image(data, "notice", OPTIONS)
    assert document.title == "notice" and not document.warnings
    [page] = document.pages
    assert (page.number, page.label) == (1, "")
    assert [block.text for block in page.blocks] == [" ".join(TRAVEL), " ".join(PARKING)]
    # Each region is a line's slice of the page's text, boxed where the line was drawn.
    assert [page.text[start:end] for start, end, _ in page.regions] == TRAVEL + PARKING
    tops = [box[1] for _, _, box in page.regions]
    assert tops == sorted(tops) and tops[2] > 0.5  # the second paragraph: lower half
    for _, _, (x0, y0, x1, y1) in page.regions:
        assert 0.0 < x0 < 0.1 and x0 < x1 <= 1.0 and y0 < y1 <= 1.0


def test_each_frame_of_a_tiff_is_a_page_and_a_sideways_jpeg_is_read_upright() -> None:
    frames = [_picture([TRAVEL[:1]]), _picture([PARKING[:1]], width=480)]
    document = parse_image(_tiff(frames), "scan", OPTIONS)
    assert [(page.number, page.label) for page in document.pages] == [
        (1, "Image page 1"),
        (2, "Image page 2"),
    ]
    assert [page.text for page in document.pages] == [TRAVEL[0], PARKING[0]]
    # A phone photo held sideways: pixels stored turned, the EXIF orientation (6) says so.
    exif = Image.Exif()
    exif[0x0112] = 6
    turned = _picture([PARKING[:1]]).transpose(Image.Transpose.ROTATE_90)
    photo = parse_image(_saved(turned, "JPEG", quality=90, exif=exif), "photo", OPTIONS)
    assert photo.pages[0].text == PARKING[0]


# Passages get the boxes of the lines they overlap (ingest, no child)


def test_passages_on_a_picture_are_boxed_by_the_lines_they_overlap() -> None:
    line1, line2, line3 = (0.1, 0.1, 0.9, 0.2), (0.1, 0.2, 0.5, 0.3), (0.1, 0.6, 0.8, 0.7)
    page = ParsedPage(
        1,
        (Block("first line second"), Block("third")),
        regions=((0, 10, line1), (11, 17, line2), (19, 24, line3)),
    )
    chunks = [
        ChunkSpan(1, 0, 17, "first line second", None),
        ChunkSpan(1, 11, 24, "second\n\nthird", None),
        ChunkSpan(2, 0, 4, "text", None),  # a page without regions stays unboxed
    ]
    boxed = _region_boxed(ParsedDocument("t", (page,)), chunks)
    assert [chunk.boxes for chunk in boxed] == [(line1, line2), (line2, line3), ()]


# Pages drawn for the viewer


def test_page_two_of_a_tiff_is_drawn_by_the_parser_child() -> None:
    frames = [Image.new("L", (300, 200), 255), Image.new("RGB", (2000, 1000), (200, 30, 30))]
    data = _tiff(frames)
    parser = IsolatedParser(timeout_s=30)
    try:
        png = parser.render_page(data, 2, 1000)
        with pytest.raises(ParseError, match="no page 3"):
            parser.render_page(data, 3, 1000)
    finally:
        parser.close()
    drawn = Image.open(io.BytesIO(png))
    assert drawn.size == (1000, 500) and drawn.getpixel((10, 10)) == (200, 30, 30)
    # Never enlarged; transparent parts on white.
    clear = _saved(Image.new("RGBA", (40, 20), (0, 0, 0, 0)), "WEBP", lossless=True)
    small = Image.open(io.BytesIO(render_image(clear, 1, 1000)))
    assert small.size == (40, 20) and small.convert("RGB").getpixel((5, 5)) == (255, 255, 255)


# Bounds and bad input


def test_a_decompression_bomb_fails_with_its_size_before_any_pixel_is_decoded() -> None:
    bomb = _forged_png(30_000, 30_000)
    reason = "the image is 30,000 × 30,000 pixels; at most 50 million pixels are read"
    with pytest.raises(ParseError, match=reason):
        parse_image(bomb, "bomb", OPTIONS)
    with pytest.raises(ParseError, match=reason):
        render_image(bomb, 1, 1000)


def test_too_many_pages_fail_before_any_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image_module, "MAX_FRAMES", 3)
    dot = Image.new("L", (4, 4), 255)
    with pytest.raises(ParseError, match="the image has more than 3 pages"):
        parse_image(_tiff([dot] * 4), "many", OPTIONS)
    with pytest.raises(ParseError, match=r"at most 1 per document \(RAGDESK_OCR_MAX_PAGES\)"):
        parse_image(_tiff([dot] * 2), "two", OcrOptions(max_pages=1))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_saved(Image.new("L", (400, 300), 255), "PNG"), "no text could be read in the image"),
        (_saved(Image.new("L", (400, 300), 0), "PNG")[:60], "the image is damaged or not readable"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 garbage", "the image is damaged or not readable"),
        (b"%PDF-1.7", "not a PNG, JPEG, TIFF or WebP image"),
    ],
)
def test_bad_pictures_fail_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_image(data, "bad", OPTIONS)


def test_past_its_time_budget_ocr_leaves_the_remaining_pages_empty_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def slow_read(image: Any, threads: int) -> Reading:
        time.sleep(0.01)  # longer than the whole budget
        return Reading((Block("Read by OCR."),), ((0, 12, (0.1, 0.1, 0.5, 0.2)),))

    monkeypatch.setattr(image_module, "read_image", slow_read)
    dot = Image.new("L", (4, 4), 255)
    options = OcrOptions(document_budget_s=0.001, before_ocr=asked.append)
    document = parse_image(_tiff([dot] * 3), "long", options)
    assert asked == [3]  # the child asks for the time of every page, before the first
    assert [(page.text, page.label) for page in document.pages] == [
        ("Read by OCR.", "Image page 1"),
        ("", "Image page 2"),
        ("", "Image page 3"),
    ]
    [warning] = document.warnings
    assert "2 of 3 scanned pages, from page 2 on, were not read" in warning
