"""Reading uploaded files out of a multipart request and handing them to the library."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from litestar import Request
from litestar.datastructures import UploadFile
from litestar.exceptions import ClientException

from app.auth.access import readable_collections, require_writable
from app.errors import (
    AppError,
    NotFound,
    StorageUnavailable,
    UnprocessableInput,
    UnsupportedMediaType,
)
from app.sources.store import SourceStore
from app.state import Services
from retrieval.blobs import BlobsUnavailable
from retrieval.display import shown
from retrieval.library import display_filename
from retrieval.parsers import UnsupportedDocumentType, detect_kind
from retrieval.records import CollectionRecord, DocumentRecord
from retrieval.store import CollectionGone

MAX_FILES_PER_REQUEST = 100
# Litestar's cap on multipart parts (create_app sets it): files plus a few form fields.
MAX_PARTS_PER_REQUEST = MAX_FILES_PER_REQUEST + 20


@dataclass(frozen=True)
class IncomingFile:
    filename: str
    data: bytes


@dataclass(frozen=True)
class Accepted:
    document: DocumentRecord
    duplicate: bool


@dataclass(frozen=True)
class Rejected:
    filename: str
    reason: str


async def read_files(request: Request[Any, Any, Any], field: str = "file") -> list[IncomingFile]:
    try:
        form = await request.form()
    except ValueError as exc:  # e.g. a non-file part that is not UTF-8 (UnicodeDecodeError)
        raise UnprocessableInput("the multipart body is malformed") from exc
    except ClientException as exc:
        if exc.status_code != 400:  # a body over the size limit is already a clear 413
            raise
        if "Too Large" not in exc.detail:  # Litestar words its part-count limit as a size
            raise UnprocessableInput("the multipart body is malformed") from exc
        raise AppError(
            f"the multipart body has more than {MAX_PARTS_PER_REQUEST} parts or a part with "
            f"oversized headers; send at most {MAX_FILES_PER_REQUEST} files per request"
        ) from exc
    values = form.getall(field) if field in form else []
    parts = [part for part in values if isinstance(part, UploadFile)]
    if not parts:
        raise UnprocessableInput(f"send one or more files as multipart parts named '{field}'")
    if len(parts) > MAX_FILES_PER_REQUEST:
        raise UnprocessableInput(f"at most {MAX_FILES_PER_REQUEST} files per request")
    return [IncomingFile(display_filename(part.filename), await part.read()) for part in parts]


async def named_collections(
    request: Request[Any, Any, Any], field: str = "collection"
) -> list[str]:
    """The collections a multipart upload names in its ``field`` parts (ids or names; an
    empty one names none, as the upload dialog's "default" choice sends it)."""
    form = await request.form()  # parsed once: read_files has read it already
    values = form.getall(field) if field in form else []
    if any(not isinstance(value, str) for value in values):
        raise UnprocessableInput(f"the '{field}' part is a collection id or name, not a file")
    return [value.strip() for value in values if isinstance(value, str) and value.strip()]


def upload_collection(services: Services, refs: Iterable[str]) -> int | None:
    """The one collection an upload names (None: none named, so the default one), found
    among those the caller may read: 404 alike for one that does not exist and one that
    may not be read; 422 when two different collections are named (the query and the form
    disagree). Whether the caller may write it is :func:`submit_all`'s check (403)."""
    wanted = list(dict.fromkeys(refs))
    if not wanted:
        return None
    readable = readable_collections(services.store.collections())
    found = {_readable_collection(readable, ref).id for ref in wanted}
    if len(found) > 1:
        raise UnprocessableInput("the upload names more than one collection; name one")
    return found.pop()


def _readable_collection(readable: list[CollectionRecord], ref: str) -> CollectionRecord:
    """By name, or by id (a name of digits that names none is read as an id), as the MCP
    tools find a collection: the API documents names, the upload dialog sends ids."""
    for record in readable:
        if record.name == ref:
            return record
    if ref.isdecimal() and len(ref) < 20:
        for record in readable:
            if record.id == int(ref):
                return record
    raise NotFound(f"no collection named {ref[:100]!r}")


def unsupported(files: list[IncomingFile]) -> list[Rejected]:
    rejected = []
    for file in files:
        try:
            detect_kind(file.data, file.filename)
        except UnsupportedDocumentType as exc:
            rejected.append(Rejected(shown(file.filename), str(exc)))
    return rejected


async def submit_all(
    services: Services, files: list[IncomingFile], collection_id: int | None = None
) -> list[Accepted | Rejected]:
    """Store each file (fsynced, committed) off the event loop; unsupported ones are rejected.
    They go to ``collection_id`` (default: the default collection), which the request's
    principal must be allowed to write (403 otherwise)."""
    target = collection_id or services.collection_id
    await asyncio.to_thread(require_writable, services.auth, target)
    sources = SourceStore(services.db)

    def submit(file: IncomingFile) -> Accepted | Rejected:
        try:
            document, created = services.library.submit(
                data=file.data, filename=file.filename, collection_id=target
            )
        except UnsupportedDocumentType as exc:
            return Rejected(shown(file.filename), str(exc))
        except CollectionGone:  # deleted between the rights check and the row
            raise NotFound("no such collection (it was deleted)") from None
        except BlobsUnavailable:  # a 503 the upload dialog tells in its rows
            raise StorageUnavailable() from None
        if not created:  # the bytes of a synced file, now uploaded by hand too: a sync
            # that loses the file must not delete what a person uploaded
            sources.drop_claim(target, document.content_hash)
        return Accepted(document, duplicate=not created)

    return [await asyncio.to_thread(submit, file) for file in files]


def require_all_supported(files: list[IncomingFile]) -> None:
    """The JSON API is all-or-nothing: one unsupported file rejects the request with 415."""
    rejected = unsupported(files)
    if rejected:
        names = ", ".join(f"{r.filename} ({r.reason})" for r in rejected)
        raise UnsupportedMediaType(f"unsupported file type: {names}")
