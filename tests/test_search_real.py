"""Hybrid search with the bundled embedder on real SQLite and FAISS files."""

from __future__ import annotations

import pytest

from retrieval.db import SqliteDatabase
from retrieval.embedder import SentenceTransformerEmbedder, bundled_embedder_dir
from retrieval.ingest import IngestConfig, IngestWorker
from retrieval.library import Library
from retrieval.search import Retriever, SearchConfig
from retrieval.store import DocumentStore
from retrieval.uploads import UploadFiles
from retrieval.vector_sync import open_index

pytestmark = pytest.mark.real

DOCUMENTS = {
    "travel.md": b"# Travel policy\n\nEmployees may claim a daily meal allowance of 45 euros "
    b"when travelling abroad. Receipts must be submitted within 30 days.",
    "security.md": b"# Building security\n\nIf the alarm sounds, leave by the nearest stairs. "
    b"The door panel of the server room accepts the code XK-4471.",
    "leave.md": b"# Holidays\n\nStaff receive 28 days of paid annual leave plus public holidays.",
}


@pytest.fixture(scope="module")
def retriever(tmp_path_factory: pytest.TempPathFactory) -> Retriever:
    root = tmp_path_factory.mktemp("real-search")
    embedder = SentenceTransformerEmbedder(bundled_embedder_dir())
    store = DocumentStore(SqliteDatabase(root / "ragdesk.db"))
    library = Library(store, UploadFiles(root / "uploads"))
    index, _ = open_index(
        root / "index", store, model_id=embedder.model_id, dimension=embedder.dimension
    )
    worker = IngestWorker(store, library.files, embedder, index, root / "index", IngestConfig())
    collection = store.ensure_collection()
    worker.ingest_many(
        [
            library.submit(data=data, filename=name, collection_id=collection)[0].id
            for name, data in DOCUMENTS.items()
        ]
    )
    return Retriever(embedder, index, store, SearchConfig(mode="hybrid"))


def test_semantic_and_lexical_questions_both_find_their_passage(retriever: Retriever) -> None:
    # No word in common with the passage: the vector side finds it.
    [top, *_] = retriever.search("How much money do I get for food on trips?", 3).hits
    assert "45 euros" in top.text
    # An opaque code: BM25 finds it.
    [top, *_] = retriever.search("XK-4471", 3).hits
    assert "XK-4471" in top.text


def test_off_topic_question_clears_no_gate(retriever: Retriever) -> None:
    hits = retriever.search("Who won the football world cup in 1954?", 3, min_score=0.25).hits
    assert hits == []
    assert retriever.search("How many vacation days do staff have?", 3, min_score=0.25).hits
