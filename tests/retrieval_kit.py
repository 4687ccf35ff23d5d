"""A real SQLite store, upload directory and FAISS index under tmp_path, with fake embeddings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval.db import Database, SqliteDatabase
from retrieval.embedder import HashingEmbedder
from retrieval.index import FaissIndex
from retrieval.index_types import IndexSpec
from retrieval.ingest import IngestConfig, IngestWorker
from retrieval.library import Library
from retrieval.store import DocumentStore
from retrieval.uploads import UploadFiles
from retrieval.vector_sync import SyncReport, open_index


@dataclass
class Kit:
    root: Path
    db: Database
    store: DocumentStore
    library: Library
    embedder: HashingEmbedder
    collection_id: int

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    def open_index(self, spec: IndexSpec | None = None) -> tuple[FaissIndex, SyncReport]:
        return open_index(
            self.index_dir,
            self.store,
            model_id=self.embedder.model_id,
            dimension=self.embedder.dimension,
            spec=spec,
        )

    def ingest(self, worker: IngestWorker, files: Iterable[tuple[str, str]]) -> list[int]:
        """Upload each (filename, text) into the default collection and ingest it now."""
        document_ids = []
        for filename, text in files:
            document, _ = self.library.submit(
                data=text.encode(), filename=filename, collection_id=self.collection_id
            )
            worker.ingest(document.id)
            document_ids.append(document.id)
        return document_ids

    def worker(self, index: FaissIndex, **config: Any) -> IngestWorker:
        """An ingest worker with small chunks and a long quiet period; ``config`` overrides
        any IngestConfig field."""
        settings = {"chunk_tokens": 40, "chunk_overlap_tokens": 5, "checkpoint_seconds": 60.0}
        return IngestWorker(
            self.store,
            self.library.files,
            self.embedder,
            index,
            self.index_dir,
            IngestConfig(**{**settings, **config}),
        )


def make_kit(root: Path) -> Kit:
    db = SqliteDatabase(root / "ragdesk.db")
    store = DocumentStore(db)
    library = Library(store, UploadFiles(root / "uploads"))
    return Kit(root, db, store, library, HashingEmbedder(), store.ensure_collection())
