"""Responses about one document shared by several route modules: its status row (for
polling), its original file (always as a download) and a PDF page as it looks."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from litestar.response import Response, Template

from app.documents.page_images import RendererBusy
from app.errors import Busy, NotFound
from app.state import Services
from retrieval.parsers import ParseError
from retrieval.parsers.isolated import ParserUnavailable
from retrieval.records import DocumentRecord
from retrieval.types import DocumentKind

DOWNLOAD_TYPE = "application/octet-stream"


async def document_row_template(services: Services, document_id: int, template: str) -> Template:
    """A document's row as it polls its status; a row that reaches its final state tells
    the sidebar and status bar to refresh."""
    document = await _document(services, document_id)
    headers = {"HX-Trigger": "documents-changed"} if document.status.is_terminal else {}
    return Template(template, context={"document": document}, headers=headers)


async def original_file(services: Services, document_id: int) -> Response[bytes]:
    """The uploaded bytes, always as a download (never rendered on our origin)."""
    document = await _document(services, document_id)
    try:
        data = await asyncio.to_thread(services.library.files.read, document.stored_name)
    except FileNotFoundError:
        raise NotFound("the original file is missing from disk") from None
    return Response(data, media_type=DOWNLOAD_TYPE, headers=_download_headers(document))


async def pdf_page_image(services: Services, document_id: int, page: int) -> Response[bytes]:
    """A PDF page or a picture's page as it looks (PNG), for the viewer; 404 for another
    kind or no such page."""
    document = await _document(services, document_id)
    drawn = document.kind in (DocumentKind.PDF, DocumentKind.IMAGE)
    if not drawn or not 1 <= page <= document.page_count:
        raise NotFound("no such PDF or image page")
    try:
        png = await asyncio.to_thread(services.page_images.png, document.stored_name, page)
    except FileNotFoundError:
        raise NotFound("the original file is missing from disk") from None
    except (ParseError, ParserUnavailable):
        raise NotFound("this page cannot be drawn; its text is shown instead") from None
    except RendererBusy:
        raise Busy("pages are being drawn for others; try again in a moment") from None
    headers = {"Cache-Control": "private, max-age=3600"}
    return Response(png, media_type="image/png", headers=headers)


async def original_file_head(services: Services, document_id: int) -> Response[None]:
    """What ``original_file`` would send, without the bytes (``HEAD``)."""
    document = await _document(services, document_id)
    headers = {**_download_headers(document), "Content-Length": str(document.size)}
    # No body; Litestar cannot serialise None as octet-stream, so an empty one.
    return Response(b"", media_type=DOWNLOAD_TYPE, headers=headers)  # type: ignore[arg-type]


async def _document(services: Services, document_id: int) -> DocumentRecord:
    document = await asyncio.to_thread(services.store.get_document, document_id)
    if document is None:
        raise NotFound("no such document")
    return document


def _download_headers(document: DocumentRecord) -> dict[str, str]:
    return {"Content-Disposition": attachment(document.original_filename)}


def attachment(filename: str) -> str:
    """Content-Disposition with an ASCII fallback and the exact name per RFC 5987."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in filename
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"
