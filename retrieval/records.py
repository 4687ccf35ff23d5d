"""Rows of the document store, as typed values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrieval.display import shown
from retrieval.types import DocumentKind, DocumentStatus


@dataclass(frozen=True)
class DocumentRecord:
    id: int
    collection_id: int
    content_hash: str
    filename: str
    stored_name: str
    kind: DocumentKind
    size: int
    title: str | None
    status: DocumentStatus
    error: str | None
    page_count: int
    chunk_count: int
    created_at: float
    updated_at: float

    original_filename: str = ""  # as uploaded: only for the download's ``filename*``

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DocumentRecord:
        """A stored row, its name and title made safe to show (``retrieval.display``)."""
        values = dict(row)
        # Which replica works on it (retrieval.leases): ingestion's bookkeeping, not the
        # document's.
        values.pop("claimed_by", None)
        values.pop("claimed_until", None)
        values["kind"] = DocumentKind(values["kind"])
        values["status"] = DocumentStatus(values["status"])
        values["original_filename"] = values["filename"]
        values["filename"] = shown(values["filename"])
        if values["title"] is not None:
            values["title"] = shown(values["title"])
        return cls(**values)

    @property
    def display_title(self) -> str:
        return self.title or self.filename


@dataclass(frozen=True)
class CollectionRecord:
    id: int
    name: str
    document_count: int
