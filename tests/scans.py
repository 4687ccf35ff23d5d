"""Scanned pages built in memory: text drawn into an image, the image alone on a PDF page.

Nothing is stored: tests and ``bench/ocr.py`` draw the pages they need (Pillow's bundled
font, so no system font is assumed), optionally skewed and speckled like a photocopy,
and wrap them in a PDF whose pages hold only the image (and, for the "garbage text layer"
case, an invisible text layer of glyph soup, as broken scanner software writes).
"""

from __future__ import annotations

import io
import random
import textwrap

from PIL import Image, ImageDraw, ImageFilter, ImageFont

from tests.documents import pdf_file

A4_POINTS = (595, 842)


def scanned_page(
    paragraphs: list[str],
    *,
    dpi: int = 150,
    skew_degrees: float = 0.0,
    noise: float = 0.0,
    seed: int = 0,
) -> Image.Image:
    """An A4 page at ``dpi`` with ``paragraphs`` in an 11 pt font, grey-scale.

    ``noise`` is the share of pixels flipped to random grey levels (speckle), applied
    with a slight blur, as on a worn photocopy; ``skew_degrees`` rotates the whole page.
    """
    width, height = (round(side * dpi / 72) for side in A4_POINTS)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=round(11 * dpi / 72))
    line_height = round(16 * dpi / 72)
    margin = round(60 * dpi / 72)
    y = margin
    for paragraph in paragraphs:
        for line in textwrap.wrap(paragraph, width=80):
            draw.text((margin, y), line, font=font, fill=0)
            y += line_height
        y += line_height // 2
    if skew_degrees:
        page = page.rotate(skew_degrees, resample=Image.Resampling.BICUBIC, fillcolor=255)
    if noise:
        page = _speckle(page, noise, seed)
    return page


def _speckle(page: Image.Image, share: float, seed: int) -> Image.Image:
    rng = random.Random(seed)
    pixels = page.load()
    assert pixels is not None
    width, height = page.size
    for _ in range(int(width * height * share)):
        pixels[rng.randrange(width), rng.randrange(height)] = rng.randrange(256)
    return page.filter(ImageFilter.GaussianBlur(0.6))


def glyph_soup(length: int, seed: int = 0) -> str:
    """What a text layer with a broken font encoding extracts as: symbols and odd letters."""
    rng = random.Random(seed)
    alphabet = "¤¦§¨©ª«¬®¯°±²³´µ¶·¸¹º»¼½¾¿×÷ÞþðÐ#$%&*+/<=>@[]^_{|}~"
    words = ("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 9))) for _ in range(length))
    return " ".join(words)


def scanned_pdf(pages: list[Image.Image], *, text_layers: list[str] | None = None) -> bytes:
    """A PDF with one JPEG image filling each A4 page, and no text, or ``text_layers[i]``
    drawn invisibly (render mode 3) over page ``i``."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    pages_id = len(objects) + 3 * len(pages) + 1
    page_ids = []
    for number, image in enumerate(pages):
        jpeg = io.BytesIO()
        image.convert("L").save(jpeg, "JPEG", quality=85)
        width, height = image.size
        picture = add(
            b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
            b"/BitsPerComponent 8 /Filter /DCTDecode /Length %d >>\nstream\n"
            % (width, height, len(jpeg.getvalue()))
            + jpeg.getvalue()
            + b"\nendstream"
        )
        ops = b"q %d 0 0 %d 0 0 cm /Im1 Do Q" % A4_POINTS
        if text_layers is not None:
            escaped = (
                text_layers[number].replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            )
            ops += b"\nBT 3 Tr /F1 10 Tf 50 780 Td (" + escaped.encode("cp1252") + b") Tj ET"
        content = add(b"<< /Length %d >>\nstream\n" % len(ops) + ops + b"\nendstream")
        page_ids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R "
                b"/Resources << /XObject << /Im1 %d 0 R >> /Font << /F1 %d 0 R >> >> >>"
                % (pages_id, *A4_POINTS, content, picture, font)
            )
        )
    kids = b" ".join(b"%d 0 R" % i for i in page_ids)
    assert add(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_ids))) == pages_id
    catalog = add(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id)
    return pdf_file(objects, catalog)
