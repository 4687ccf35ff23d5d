"""Rows of the document store, as typed values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DocumentRecord:
        values = dict(row)
        values["kind"] = DocumentKind(values["kind"])
        values["status"] = DocumentStatus(values["status"])
        return cls(**values)

    @property
    def display_title(self) -> str:
        return self.title or self.filename


@dataclass(frozen=True)
class CollectionRecord:
    id: int
    name: str
    document_count: int
