"""The collection view: a sortable, filterable table of documents with their actions
(download the original, re-ingest, delete)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import numpy as np
from litestar import Controller, Response, get, head, post
from litestar.di import Provide
from litestar.params import Parameter
from litestar.response import Template

from app.errors import NotFound
from app.schemas import RowId
from app.state import Services
from app.web.conversations_ui import Conflict
from app.web.deps import provide_services
from app.web.document_views import (
    document_row_template,
    original_file,
    original_file_head,
)
from app.web.ui_context import shell_context, upload_context
from retrieval.collections import Workspaces
from retrieval.records import DocumentRecord
from retrieval.store import DocumentGone
from retrieval.types import DocumentStatus

COLUMNS = (
    ("name", "Name"),
    ("kind", "Type"),
    ("pages", "Pages"),
    ("chunks", "Chunks"),
    ("size", "Size"),
    ("status", "Status"),
    ("added", "Added"),
)


class SortKey(StrEnum):
    NAME = "name"
    KIND = "kind"
    PAGES = "pages"
    CHUNKS = "chunks"
    SIZE = "size"
    STATUS = "status"
    ADDED = "added"


class Order(StrEnum):
    ASC = "asc"
    DESC = "desc"


def _sort_value(key: SortKey, document: DocumentRecord) -> Any:
    return {
        SortKey.NAME: lambda d: d.display_title.casefold(),
        SortKey.KIND: lambda d: d.kind.value,
        SortKey.PAGES: lambda d: d.page_count,
        SortKey.CHUNKS: lambda d: d.chunk_count,
        SortKey.SIZE: lambda d: d.size,
        SortKey.STATUS: lambda d: d.status.value,
        SortKey.ADDED: lambda d: d.created_at,
    }[key](document)


Query = Annotated[str, Parameter(max_length=200)]


@dataclass(frozen=True)
class TableView:
    """How the document table is sorted and filtered: the same query parameters for the
    collection page and for the table partial that its headers and filter reload."""

    sort: SortKey
    order: Order
    query: str


def provide_table_view(
    sort: SortKey = SortKey.ADDED, order: Order = Order.DESC, q: Query = ""
) -> TableView:
    return TableView(sort, order, q.strip())


def document_table(services: Services, collection_id: int, view: TableView) -> dict[str, Any]:
    collection = next((c for c in services.store.collections() if c.id == collection_id), None)
    if collection is None:
        raise NotFound("no such collection")
    needle = view.query.casefold()
    documents = [
        d
        for d in services.store.list_documents(collection_id)
        if needle in f"{d.display_title}\n{d.filename}\n{d.kind.value}\n{d.status.value}".casefold()
    ]
    documents.sort(
        key=lambda d: (_sort_value(view.sort, d), d.id), reverse=view.order is Order.DESC
    )
    return {
        "collection": collection,
        "documents": documents,
        "columns": COLUMNS,
        "sort": view.sort.value,
        "order": view.order.value,
        "query": view.query,
    }


class CollectionsUi(Controller):
    dependencies = {
        "services": Provide(provide_services, sync_to_thread=False),
        "view": Provide(provide_table_view, sync_to_thread=False),
    }

    @get("/collections/{collection_id:int}")
    async def collection(
        self, collection_id: RowId, services: Services, view: TableView
    ) -> Template:
        def context() -> dict[str, Any]:
            table = document_table(services, collection_id, view)
            return {
                **shell_context(services, None),
                **table,
                **upload_context(services, collection_id),
                "workspace": Workspaces(services.db).get(collection_id),
            }

        return Template("collection.html", context=await asyncio.to_thread(context))

    @get("/ui/collections/{collection_id:int}/documents")
    async def table(self, collection_id: RowId, services: Services, view: TableView) -> Template:
        context = await asyncio.to_thread(document_table, services, collection_id, view)
        return Template("_document_table.html", context=context)

    @get("/ui/documents/{document_id:int}/table-row")
    async def table_row(self, document_id: RowId, services: Services) -> Template:
        return await document_row_template(services, document_id, "_document_table_row.html")

    @post("/ui/documents/{document_id:int}/reingest", status_code=200)
    async def reingest(self, document_id: RowId, services: Services) -> Template:
        document = await asyncio.to_thread(reingest, services, document_id)
        return Template("_document_table_row.html", context={"document": document})

    @get("/documents/{document_id:int}/original")
    async def original(self, document_id: RowId, services: Services) -> Response[bytes]:
        return await original_file(services, document_id)

    @head("/documents/{document_id:int}/original")
    async def original_head(self, document_id: RowId, services: Services) -> Response[None]:
        return await original_file_head(services, document_id)


def reingest(services: Services, document_id: int) -> DocumentRecord:
    """Parse, chunk and embed a finished document again from its stored original."""
    retrieval = services.require_retrieval()
    document = services.store.get_document(document_id)
    if document is None:
        raise NotFound("no such document")
    if not document.status.is_terminal:
        raise Conflict("the document is already being ingested")
    rows = services.db.read().execute("SELECT id FROM chunks WHERE document_id = ?", [document_id])
    old_chunks = [int(row[0]) for row in rows]
    try:
        services.store.set_status(document_id, DocumentStatus.QUEUED)
    except DocumentGone:
        raise NotFound("no such document") from None
    if old_chunks:  # out of vector search now; the new passages replace them in SQLite
        retrieval.worker.index.remove(np.asarray(old_chunks, dtype=np.int64))
        retrieval.worker.mark_dirty()
    retrieval.worker.enqueue(document_id)
    updated = services.store.get_document(document_id)
    if updated is None:
        raise NotFound("no such document")
    return updated
