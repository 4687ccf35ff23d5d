"""Turn uploaded bytes into pages of structural blocks, whatever the format.

``detect_kind`` decides the format from the content first (PDF and DOCX have signatures)
and the filename second (text formats have none: a ``.svg``, a shell script or a file
without an extension is text too, but not a type we index, so it is refused);
``parse_document`` never raises anything but :class:`ParseError`, whose message is shown
to the user as the document's failure reason.
"""

from __future__ import annotations

import importlib
import io
import re
import zipfile
from collections.abc import Callable
from pathlib import PurePath

from retrieval.parsers import signatures
from retrieval.parsers.docx import parse_docx
from retrieval.parsers.errors import ParseError, UnsupportedDocumentType
from retrieval.parsers.html import parse_html
from retrieval.parsers.image import is_image
from retrieval.parsers.ocr import OcrOptions
from retrieval.parsers.pdf import parse_pdf
from retrieval.parsers.rtf import is_rtf
from retrieval.parsers.text import decode_text, parse_csv, parse_markdown, parse_plain_text
from retrieval.types import DocumentKind, ParsedDocument

__all__ = [
    "ACCEPTED_TYPES",
    "SUPPORTED_EXTENSIONS",
    "OcrOptions",
    "ParseError",
    "UnsupportedDocumentType",
    "detect_kind",
    "parse_document",
]

_EXTENSIONS: dict[str, DocumentKind] = {
    ".pdf": DocumentKind.PDF,
    ".docx": DocumentKind.DOCX,
    ".pptx": DocumentKind.PPTX,
    ".pptm": DocumentKind.PPTX,  # read as slides: macros are never run
    ".xlsx": DocumentKind.XLSX,
    ".xlsm": DocumentKind.XLSX,  # read as data: macros are never run
    ".xltx": DocumentKind.XLSX,
    ".xltm": DocumentKind.XLSX,
    ".odt": DocumentKind.ODT,
    ".ods": DocumentKind.ODS,
    ".odp": DocumentKind.ODP,
    ".rtf": DocumentKind.RTF,
    ".epub": DocumentKind.EPUB,
    ".eml": DocumentKind.EML,
    ".msg": DocumentKind.MSG,
    ".mbox": DocumentKind.MBOX,
    ".png": DocumentKind.IMAGE,
    ".jpg": DocumentKind.IMAGE,
    ".jpeg": DocumentKind.IMAGE,
    ".tif": DocumentKind.IMAGE,
    ".tiff": DocumentKind.IMAGE,
    ".webp": DocumentKind.IMAGE,
    ".html": DocumentKind.HTML,
    ".htm": DocumentKind.HTML,
    ".xhtml": DocumentKind.HTML,
    ".md": DocumentKind.MARKDOWN,
    ".markdown": DocumentKind.MARKDOWN,
    ".txt": DocumentKind.TEXT,
    ".text": DocumentKind.TEXT,
    ".csv": DocumentKind.CSV,
}
SUPPORTED_EXTENSIONS = frozenset(_EXTENSIONS)
# The formats by name: a refusal that also listed the 27 extensions was a paragraph long.
ACCEPTED_TYPES = (
    "PDF, Word (DOCX), PowerPoint (PPTX), Excel (XLSX, XLSM), OpenDocument (ODT, ODS, ODP), "
    "RTF, EPUB, mail (EML, MSG, MBOX), images (PNG, JPEG, TIFF, WebP), HTML, Markdown, "
    "plain text (TXT) or CSV"
)
_SNIFF_BYTES = 8192
_PLAIN_SUFFIX = re.compile(r"\.[a-z0-9_-]{1,15}")
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # Compound File: Outlook mail, old Office, encrypted
# Formats whose content has a signature: a file named as one of them must carry it.
_SIGNED = {
    DocumentKind.PDF: "a PDF (no PDF header)",
    DocumentKind.DOCX: "a DOCX (not a ZIP archive)",
    DocumentKind.PPTX: "a PPTX (not a ZIP archive)",
    DocumentKind.XLSX: "an XLSX (not a ZIP archive)",
    DocumentKind.ODT: "an ODT (not a ZIP archive)",
    DocumentKind.ODS: "an ODS (not a ZIP archive)",
    DocumentKind.ODP: "an ODP (not a ZIP archive)",
    DocumentKind.EPUB: "an EPUB (not a ZIP archive)",
    DocumentKind.MSG: "an Outlook message (not a Compound File)",
    DocumentKind.RTF: "an RTF document (no {\\rtf header)",
    DocumentKind.IMAGE: "a PNG, JPEG, TIFF or WebP image",
}
_ZIPPED = frozenset(
    {
        DocumentKind.DOCX,
        DocumentKind.PPTX,
        DocumentKind.XLSX,
        DocumentKind.ODT,
        DocumentKind.ODS,
        DocumentKind.ODP,
        DocumentKind.EPUB,
    }
)


def detect_kind(data: bytes, filename: str) -> DocumentKind:
    """Format of an upload, judged by its bytes first and its extension second.

    Magic bytes decide: a PDF header, a ZIP whose parts say DOCX, PPTX, XLSX, an
    OpenDocument or an EPUB, a Compound File holding Outlook mail, an RTF or image
    signature, an mbox's first "From " line. Text formats have no signature and go by
    their extension (a mail saved as ``.eml`` also by its header lines).

    Raises :class:`UnsupportedDocumentType` (the API answers 415) for content of no
    supported type, for content named as a signed format that does not carry its
    signature (HTML named .pdf, a text file named .xlsx), and for binary content behind
    a text extension. A real file of a supported type that is damaged, encrypted or
    hostile is accepted here and fails in parsing with a reason.
    """
    claimed = _EXTENSIONS.get(PurePath(filename).suffix.lower())
    head = data[:_SNIFF_BYTES]
    signed = _signed_kind(data, head, claimed)
    if signed is not None:
        return signed
    if claimed in _SIGNED:  # HTML, SVG, a program ... named .pdf, .xlsx, .png
        name = PurePath(filename).suffix.lower()
        raise _unsupported(f"this file is named {name} but is not {_SIGNED[claimed]}")
    if _looks_binary(head):
        raise _unsupported("binary file of an unsupported type")
    if claimed is None and signatures.looks_like_mbox(head):
        return DocumentKind.MBOX
    if claimed is None and signatures.looks_like_eml(head):
        return DocumentKind.EML
    if claimed is None:  # text, but of a type we do not index (SVG, a script, a log, ...)
        raise _unsupported(f"{_files_named(filename)} not a supported type")
    return claimed


def _signed_kind(data: bytes, head: bytes, claimed: DocumentKind | None) -> DocumentKind | None:
    """The format that ``data``'s signature shows, if it has one."""
    # PDF readers accept the header anywhere in the first KiB; we do when the name says PDF.
    if head.lstrip().startswith(b"%PDF-") or (
        claimed is DocumentKind.PDF and b"%PDF-" in head[:1024]
    ):
        return DocumentKind.PDF
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(data, claimed)
    if head.startswith(_OLE):
        return _compound_kind(data, claimed)
    if is_rtf(head):
        return DocumentKind.RTF
    if is_image(head):
        return DocumentKind.IMAGE
    return None


def _zip_kind(data: bytes, claimed: DocumentKind | None) -> DocumentKind:
    """DOCX, PPTX and XLSX by their main part; OpenDocument and EPUB by their ``mimetype``.
    A broken ZIP named as one of them is that format, and fails in parsing with a reason."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            mimetype = _member_head(archive, "mimetype") if "mimetype" in names else b""
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError):
        if claimed in _ZIPPED:
            return claimed
        raise _unsupported("this ZIP archive is damaged") from None
    for part, kind in _OOXML_PARTS:
        if part in names:
            return kind
    found = _OPEN_TYPES.get(mimetype.strip().decode("ascii", "replace"))
    if found is not None:
        return found
    raise _unsupported(
        "ZIP archives other than Office, OpenDocument or EPUB files are not supported"
    )


_OOXML_PARTS = (
    ("word/document.xml", DocumentKind.DOCX),
    ("ppt/presentation.xml", DocumentKind.PPTX),
    ("xl/workbook.xml", DocumentKind.XLSX),
)
_OPEN_TYPES = {
    "application/vnd.oasis.opendocument.text": DocumentKind.ODT,
    "application/vnd.oasis.opendocument.text-template": DocumentKind.ODT,
    "application/vnd.oasis.opendocument.spreadsheet": DocumentKind.ODS,
    "application/vnd.oasis.opendocument.spreadsheet-template": DocumentKind.ODS,
    "application/vnd.oasis.opendocument.presentation": DocumentKind.ODP,
    "application/vnd.oasis.opendocument.presentation-template": DocumentKind.ODP,
    "application/epub+zip": DocumentKind.EPUB,
}


def _member_head(archive: zipfile.ZipFile, name: str) -> bytes:
    with archive.open(name) as member:
        return member.read(100)


def _compound_kind(data: bytes, claimed: DocumentKind | None) -> DocumentKind:
    """Outlook mail is a Compound File; so are Office files protected by a password (their
    ZIP is inside, encrypted) and the legacy binary formats (.doc, .xls, .ppt)."""
    if signatures.is_msg(data):
        return DocumentKind.MSG
    if claimed in _ZIPPED:  # fails in parsing: "encrypted" (``_refuse_encrypted``)
        return claimed
    raise _unsupported(
        "legacy Office binary files (.doc, .xls, .ppt) are not supported; save them as "
        ".docx, .xlsx or .pptx"
    )


def _files_named(filename: str) -> str:
    suffix = PurePath(filename).suffix.lower()
    if not suffix:
        return "files without an extension are"
    # Quoted only when plain: a user's suffix may hold direction controls or markup.
    return f"'{suffix}' files are" if _PLAIN_SUFFIX.fullmatch(suffix) else "files of this type are"


def _unsupported(reason: str) -> UnsupportedDocumentType:
    return UnsupportedDocumentType(f"{reason}; accepted: {ACCEPTED_TYPES}")


def _looks_binary(head: bytes) -> bool:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False  # UTF-16 with a byte-order mark
    return b"\x00" in head


def parse_document(
    data: bytes, kind: DocumentKind, filename: str, *, ocr: OcrOptions | None = None
) -> ParsedDocument:
    """Parse ``data`` as ``kind``; any failure becomes a :class:`ParseError` with a reason.

    With ``ocr``, scanned PDF pages are read by OCR; without, they have no text.
    """
    if not data.strip():
        raise ParseError("the file is empty")
    if data.startswith(_OLE) and kind in _ZIPPED:
        raise ParseError(
            f"the {kind.value.upper()} file is protected by a password (encrypted); "
            "upload an unprotected copy"
        )
    fallback_title = PurePath(filename).stem or "Untitled"
    try:
        if kind is DocumentKind.PDF:
            document = parse_pdf(data, fallback_title, ocr)
        elif kind is DocumentKind.IMAGE:  # an image holds only what OCR reads
            image = importlib.import_module("retrieval.parsers.image")
            document = image.parse_image(data, fallback_title, ocr)
        else:
            document = _PARSERS[kind](data, fallback_title)
    except ParseError:
        raise
    except RecursionError:
        raise ParseError("the document is nested too deeply to parse") from None
    except Exception as exc:  # a parser library failed on hostile or broken input
        raise ParseError(
            f"could not read this {kind.value.upper()} file ({type(exc).__name__})"
        ) from exc
    if not any(page.blocks for page in document.pages):
        raise ParseError(f"no text could be extracted{_no_text_why(kind, ocr)}")
    return document


def _no_text_why(kind: DocumentKind, ocr: OcrOptions | None) -> str:
    if kind is DocumentKind.IMAGE:
        return " (OCR read no text in the image)"
    if kind is not DocumentKind.PDF:
        return ""
    return ", not even by OCR" if ocr is not None else " (OCR of scanned pages is off)"


def _parse_text_kind(
    parse: Callable[[str, str], ParsedDocument],
) -> Callable[[bytes, str], ParsedDocument]:
    def parse_bytes(data: bytes, fallback_title: str) -> ParsedDocument:
        return parse(decode_text(data), fallback_title)

    return parse_bytes


Parser = Callable[[bytes, str], ParsedDocument]


def _lazy(module: str, name: str) -> Parser:
    """A parser whose module (and library) is imported on first use: the server imports
    this package for its formats list, the parser child for the parsing."""

    def parse(data: bytes, fallback_title: str) -> ParsedDocument:
        parser: Parser = getattr(importlib.import_module(module), name)
        return parser(data, fallback_title)

    return parse


_PARSERS: dict[DocumentKind, Parser] = {
    DocumentKind.PDF: parse_pdf,
    DocumentKind.DOCX: parse_docx,
    DocumentKind.PPTX: _lazy("retrieval.parsers.presentation", "parse_pptx"),
    DocumentKind.XLSX: _lazy("retrieval.parsers.spreadsheet", "parse_xlsx"),
    DocumentKind.ODT: _lazy("retrieval.parsers.odf", "parse_odt"),
    DocumentKind.ODS: _lazy("retrieval.parsers.odf", "parse_ods"),
    DocumentKind.ODP: _lazy("retrieval.parsers.odf", "parse_odp"),
    DocumentKind.RTF: _lazy("retrieval.parsers.rtf", "parse_rtf"),
    DocumentKind.EPUB: _lazy("retrieval.parsers.epub", "parse_epub"),
    DocumentKind.EML: _lazy("retrieval.parsers.mail", "parse_eml"),
    DocumentKind.MSG: _lazy("retrieval.parsers.mail", "parse_msg"),
    DocumentKind.MBOX: _lazy("retrieval.parsers.mail", "parse_mbox"),
    DocumentKind.HTML: _parse_text_kind(parse_html),
    DocumentKind.MARKDOWN: _parse_text_kind(parse_markdown),
    DocumentKind.TEXT: _parse_text_kind(parse_plain_text),
    DocumentKind.CSV: _parse_text_kind(parse_csv),
}
