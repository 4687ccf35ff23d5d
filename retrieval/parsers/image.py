"""Pictures (PNG, JPEG, TIFF, WebP): the text OCR reads on them, and their pages drawn.

A picture holds no text but what OCR reads, so it is read even where the deployment's OCR
of scanned PDFs is off (the deployment's OCR options when it has them, their defaults
otherwise); its time budget and page count apply to an image's pages as to scanned PDF
pages. Each frame of a multi-page TIFF (a fax, a sheet feeder's output) is a page,
labelled "Image page n"; other formats are read by their first frame (an animated PNG or
WebP is one picture, not pages). OCR says where each line stands on the picture, kept as
the page's ``regions``, so a cited passage is boxed on it without a text layer.

Pillow decodes them: MIT-CMU licence, already installed as RapidOCR's dependency, all
four formats in its wheels, and each format's reader gives the size from the header
before any pixel is decoded. Limits: a frame over ``MAX_IMAGE_PIXELS`` fails with its size
before it is decoded (Pillow's own bomb check is bypassed only to say the size; ours is
stricter); more than ``MAX_FRAMES`` frames fail before any is read; a frame is read by OCR
at most ``ocr.MAX_RENDER_PIXELS`` large (a JPEG decodes at a reduced scale directly).
The EXIF orientation is applied before OCR and drawing alike (a phone photo taken sideways
is read upright, and its boxes fit the page drawn). This runs in the parser child.
"""

from __future__ import annotations

import contextlib
import io
import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from retrieval.parsers.errors import ParseError
from retrieval.parsers.ocr import MAX_RENDER_PIXELS, OcrOptions, budget_warning, read_image
from retrieval.parsers.page_boxes import MAX_RENDER_PIXELS as MAX_DRAWN_SIDE
from retrieval.types import ParsedDocument, ParsedPage

if TYPE_CHECKING:
    from PIL import Image, ImageFile

MAX_IMAGE_PIXELS = 50_000_000  # per frame: a 50-megapixel photo, an A4 scan at 600 dpi
MAX_FRAMES = 500
_ORIENTATION = 0x0112  # the EXIF tag
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"II+\x00", "TIFF"),  # BigTIFF
    (b"MM\x00+", "TIFF"),
)


def image_format(head: bytes) -> str | None:
    """ "PNG", "JPEG", "TIFF" or "WEBP" by the file's first bytes (12 suffice), else None."""
    for signature, name in _SIGNATURES:
        if head.startswith(signature):
            return name
    return "WEBP" if head[:4] == b"RIFF" and head[8:12] == b"WEBP" else None


def is_image(head: bytes) -> bool:
    """Whether the file's first bytes (12 suffice) are those of a picture read here."""
    return image_format(head) is not None


def parse_image(data: bytes, fallback_title: str, ocr: OcrOptions | None = None) -> ParsedDocument:
    """The text of each page of the picture, as OCR reads it, with where its lines stand."""
    options = ocr or OcrOptions()
    with _opened(data) as image:
        count = _page_count(image)
        if count > options.max_pages:
            raise ParseError(
                f"the image has {count} pages; OCR reads at most {options.max_pages} per "
                "document (RAGDESK_OCR_MAX_PAGES)"
            )
        if options.before_ocr is not None:
            options.before_ocr(count)
        pages = _read_pages(image, count, options)
    if not any(page.blocks for page in pages):
        raise ParseError("no text could be read in the image")
    skipped = list(range(len(pages) + 1, count + 1))
    pages += [ParsedPage(number, (), _label(number, count)) for number in skipped]
    warnings = (budget_warning(skipped, count, options),) if skipped else ()
    return ParsedDocument(title=fallback_title, pages=tuple(pages), warnings=warnings)


def _read_pages(image: ImageFile.ImageFile, count: int, options: OcrOptions) -> list[ParsedPage]:
    """The pages OCR read before ``options.document_budget_s`` ran out (the first always)."""
    import numpy

    pages: list[ParsedPage] = []
    started = time.monotonic()
    for number in range(1, count + 1):
        if pages and time.monotonic() - started >= options.document_budget_s:
            break
        with _decoding():
            image.seek(number - 1)
            width, height = _checked_size(image)
            scale = min(1.0, math.sqrt(MAX_RENDER_PIXELS / (width * height)))
            pixels = numpy.asarray(_frame(image, scale, grey=True))
        reading = read_image(pixels, options.threads)
        pages.append(ParsedPage(number, reading.blocks, _label(number, count), reading.regions))
    return pages


def _label(number: int, count: int) -> str:
    return f"Image page {number}" if count > 1 else ""


def render_image(data: bytes, number: int, width_px: int) -> bytes:
    """Page ``number`` of the picture as a PNG at most ``width_px`` wide (never enlarged;
    the longer side at most page_boxes.MAX_RENDER_PIXELS). Raises IndexError for a page
    it does not have, ParseError for a picture that cannot be read."""
    with _opened(data) as image:
        if not 1 <= number <= _page_count(image):
            raise IndexError(f"the document has no page {number}")
        with _decoding():
            image.seek(number - 1)
            width, height = _checked_size(image)
            scale = min(1.0, width_px / width, MAX_DRAWN_SIDE / max(width, height))
            out = io.BytesIO()
            _frame(image, scale, grey=False).save(out, format="PNG")
    return out.getvalue()


@contextlib.contextmanager
def _opened(data: bytes) -> Iterator[ImageFile.ImageFile]:
    """The picture with its first frame's header read, and its size checked: no pixel yet."""
    from PIL import JpegImagePlugin, PngImagePlugin, TiffImagePlugin, WebPImagePlugin

    readers: dict[str, type[ImageFile.ImageFile]] = {
        "PNG": PngImagePlugin.PngImageFile,
        "JPEG": JpegImagePlugin.JpegImageFile,
        "TIFF": TiffImagePlugin.TiffImageFile,
        "WEBP": WebPImagePlugin.WebPImageFile,
    }
    name = image_format(data[:16])
    if name is None:
        raise ParseError("the file is not a PNG, JPEG, TIFF or WebP image")
    with _decoding():
        # The format's reader itself, not Image.open: that one refuses a large picture
        # without saying its size (DecompressionBombError) before ours can.
        image = readers[name](io.BytesIO(data))
    try:
        _checked_size(image)
        yield image
    finally:
        image.close()


@contextlib.contextmanager
def _decoding() -> Iterator[None]:
    """Pillow's errors on a damaged or hostile picture, as reasons."""
    from PIL import Image

    try:
        yield
    except ParseError:
        raise
    except Image.DecompressionBombError:  # a TIFF tile, or a WebP header, over Pillow's bound
        bound = 2 * (Image.MAX_IMAGE_PIXELS or 0) // 1_000_000
        raise ParseError(_too_large(f"is over {bound:,} million pixels")) from None
    except MemoryError:
        raise ParseError("the image is too large to decode within the parser's memory") from None
    except Exception as exc:
        raise ParseError(f"the image is damaged or not readable ({type(exc).__name__})") from exc


def _checked_size(image: ImageFile.ImageFile) -> tuple[int, int]:
    width, height = image.size
    if width < 1 or height < 1:
        raise ParseError("the image has no pixels")
    if width * height > MAX_IMAGE_PIXELS:
        raise ParseError(_too_large(f"is {width:,} × {height:,} pixels"))
    return width, height


def _too_large(size: str) -> str:
    return f"the image {size}; at most {MAX_IMAGE_PIXELS // 1_000_000} million pixels are read"


def _page_count(image: ImageFile.ImageFile) -> int:
    """A TIFF's frames (counted from their headers, no pixel decoded); other formats: 1."""
    if image.format != "TIFF":
        return 1
    count = 1
    with _decoding():
        while count <= MAX_FRAMES:
            try:
                image.seek(count)
            except EOFError:
                break
            count += 1
        image.seek(0)
    if count > MAX_FRAMES:
        raise ParseError(f"the image has more than {MAX_FRAMES} pages")
    return count


def _frame(image: ImageFile.ImageFile, scale: float, *, grey: bool) -> Image.Image:
    """The current frame decoded at ``scale`` (at most 1), upright, its transparent parts
    on white: mode "L" when ``grey``, else "L" or "RGB" as the picture is."""
    from PIL import Image

    width, height = image.size
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    orientation = image.getexif().get(_ORIENTATION)
    if image.format == "JPEG" and scale < 1:
        image.draft("L" if grey else "RGB", size)  # the decoder skips the detail at once
    image.load()
    frame = _plain(image, grey)
    if frame.size != size:
        frame = frame.resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0)
    if frame.mode in ("LA", "RGBA"):
        ground = Image.new(frame.mode[:-1], frame.size, "white")
        ground.paste(frame, mask=frame.getchannel("A"))
        frame = ground
    turn = _TURNS.get(orientation) if isinstance(orientation, int) else None
    return frame if turn is None else frame.transpose(_transposition(turn))


def _plain(image: Image.Image, grey: bool) -> Image.Image:
    """The frame in one of the modes "L", "LA", "RGB", "RGBA" (alpha only where it has
    transparency), so that resizing and the white ground work the same for all."""
    if image.mode in ("I", "F") or image.mode.startswith("I;"):
        return _stretched(image)  # 16-bit and float scans: Pillow would clip them to white
    alpha = image.has_transparency_data
    if grey or image.mode in ("1", "L", "LA", "La"):
        mode = "LA" if alpha else "L"
    else:
        mode = "RGBA" if alpha else "RGB"
    return image if image.mode == mode else image.convert(mode)


def _stretched(image: Image.Image) -> Image.Image:
    import numpy
    from PIL import Image

    values = numpy.asarray(image, dtype=numpy.float32)
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return Image.new("L", image.size, "white")
    return Image.fromarray(((values - low) * (255 / (high - low))).astype(numpy.uint8))


# EXIF orientation -> the turn that makes the picture upright (as ImageOps.exif_transpose).
_TURNS = {
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_270",
    7: "TRANSVERSE",
    8: "ROTATE_90",
}


def _transposition(name: str) -> Any:
    from PIL import Image

    return Image.Transpose[name]
