"""A real-prose corpus that needs no download: the docstrings of Python's standard library."""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path

from retrieval.db import SqliteDatabase
from retrieval.embedder import Embedder, SentenceTransformerEmbedder, bundled_embedder_dir
from retrieval.index import FaissIndex
from retrieval.ingest import IngestConfig, IngestWorker
from retrieval.library import Library
from retrieval.parsers.isolated import IsolatedParser
from retrieval.store import DocumentStore
from retrieval.uploads import UploadFiles
from retrieval.vector_sync import open_index

SKIP_PREFIXES = (
    "idlelib",
    "tkinter",
    "turtle",
    "test",
    "lib2to3",
    "ensurepip",
    "antigravity",
    "this",
)


def stdlib_documents(limit: int) -> list[tuple[str, str]]:
    """Up to ``limit`` (module name, Markdown text) pairs built from stdlib docstrings."""
    documents: list[tuple[str, str]] = []
    names = sorted(sys.stdlib_module_names)
    for name in names:
        if name.startswith(SKIP_PREFIXES) or name.startswith("_"):
            continue
        text = _module_text(name)
        if text and len(text) > 1500:
            documents.append((name, text))
        if len(documents) >= limit:
            break
    return documents


def _module_text(name: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
    except Exception:  # platform-specific or deprecated modules
        return None
    parts = [f"# {name}", inspect.getdoc(module) or ""]
    for attr, value in sorted(vars(module).items()):
        if attr.startswith("_") or getattr(value, "__module__", None) != name:
            continue
        doc = inspect.getdoc(value)
        if doc and (inspect.isfunction(value) or inspect.isclass(value)):
            parts += [f"## {attr}", doc]
    return "\n\n".join(part for part in parts if part)


if __name__ == "__main__":
    docs = stdlib_documents(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
    print(len(docs), sum(len(t) for _, t in docs), [n for n, _ in docs][:10])


def ingest_files(
    root: Path, files: Iterable[tuple[str, bytes]], embedder: Embedder | None = None
) -> tuple[Embedder, DocumentStore, FaissIndex, dict[int, str]]:
    """``files`` (name, bytes) ingested and indexed under ``root`` with ``embedder`` (default:
    the bundled one), real SQLite and FAISS; also returns each document id's file name."""
    embedder = embedder or SentenceTransformerEmbedder(bundled_embedder_dir())
    store, library, index = open_library(root, embedder)
    worker = IngestWorker(store, library.files, embedder, index, root / "index", IngestConfig())
    collection = store.ensure_collection()
    names: dict[int, str] = {}
    for name, data in files:
        document, _ = library.submit(data=data, filename=name, collection_id=collection)
        names[document.id] = name
    worker.ingest_many(list(names))
    return embedder, store, index, names


def open_library(root: Path, embedder: Embedder) -> tuple[DocumentStore, Library, FaissIndex]:
    """Real SQLite, upload directory and FAISS index under ``root`` (created or reopened)."""
    store = DocumentStore(SqliteDatabase(root / "ragdesk.db"))
    library = Library(store, UploadFiles(root / "uploads"))
    index, _ = open_index(
        root / "index", store, model_id=embedder.model_id, dimension=embedder.dimension
    )
    return store, library, index


def background_worker(
    root: Path,
    library: Library,
    index: FaissIndex,
    embedder: Embedder,
    parser: IsolatedParser,
    *,
    embedding_cache: bool = True,
) -> IngestWorker:
    """The ingest worker as the server runs it (parsing in the sandboxed child process),
    checkpointing only when stopped; start it with ``library.attach_worker``."""
    config = IngestConfig(checkpoint_seconds=3600, embedding_cache=embedding_cache)
    return IngestWorker(
        library.store, library.files, embedder, index, root / "index", config, parse=parser.parse
    )
