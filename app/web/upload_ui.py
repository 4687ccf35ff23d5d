"""The upload dialog's side of an upload: the collection chosen in it, and a failed upload
told in plain words, one row per file, instead of a bare status line."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.auth.resources import WriteForbidden
from app.errors import AppError, InsufficientStorage, NotFound
from app.schemas import MAX_ROW_ID

_ROW_ID = re.compile(r"[0-9]{1,19}")

NO_SUCH_COLLECTION = "This collection does not exist or is not open to you."
NOT_WRITABLE = "You may not add documents to this collection."
DISK_FULL = "The server's disk is full, so nothing was stored. Try again later."


@dataclass(frozen=True)
class UploadFailure:
    filenames: list[str]
    reason: str


def upload_target(raw: object) -> int | None:
    """The collection id chosen in the dialog (None: no choice sent, the default one)."""
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or not _ROW_ID.fullmatch(raw) or not 1 <= int(raw) <= MAX_ROW_ID:
        raise NotFound("no such collection")
    return int(raw)


def upload_failure_reason(exc: AppError) -> str:
    """Why an upload failed, as a sentence for the dialog's row."""
    if isinstance(exc, WriteForbidden):
        return NOT_WRITABLE
    if isinstance(exc, NotFound):
        return NO_SUCH_COLLECTION
    if isinstance(exc, InsufficientStorage):
        return DISK_FULL
    detail = exc.detail.strip().rstrip(".")
    return f"The upload failed: {detail}." if detail else "The upload failed."
