"""Identical chunk texts are embedded once: re-ingestion and near-duplicates reuse vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.embedder import HashingEmbedder
from retrieval.embedding_cache import EmbeddingCache
from retrieval.ingest import IngestConfig, IngestWorker
from retrieval.types import DocumentStatus
from tests.retrieval_kit import make_kit

PARAGRAPHS = [
    f"Paragraph {n} explains rule {n * 11} of the handbook in plain words." for n in range(8)
]
ORIGINAL = ("# Handbook\n\n" + "\n\n".join(PARAGRAPHS)).encode()
# The same handbook with one paragraph edited.
EDITED = ORIGINAL.replace(b"rule 33 of", b"the revised rule 33 of")


def embedded_texts(embedder: HashingEmbedder) -> list[str]:
    return [text for call in embedder.history for text in call]


def test_cache_embeds_each_distinct_text_once(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    cache = EmbeddingCache(kit.db)
    first = cache.embed(kit.embedder, ["alpha", "beta", "alpha"])
    assert embedded_texts(kit.embedder) == ["alpha", "beta"]  # duplicates in a batch too
    again = cache.embed(kit.embedder, ["beta", "alpha"])
    assert len(kit.embedder.history) == 1  # all cached: the embedder was not called
    np.testing.assert_array_equal(again, first[[1, 0]])
    np.testing.assert_array_equal(first, kit.embedder.embed_batch(["alpha", "beta", "alpha"]))
    other_model = HashingEmbedder(dimension=128)  # another model never sees these vectors
    assert cache.embed(other_model, ["alpha"]).shape == (1, 128)
    assert other_model.history == [["alpha"]]


def test_reingestion_and_near_duplicates_reuse_vectors(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    kit.library.worker = worker  # deletes reach the index (its thread is not needed)
    document, _ = kit.library.submit(
        data=ORIGINAL, filename="h.md", collection_id=kit.collection_id
    )
    worker.ingest(document.id)
    chunks = len(embedded_texts(kit.embedder))
    assert chunks >= 3

    # Deleted and uploaded again: every vector comes from the cache.
    kit.library.delete(document.id)
    again, _ = kit.library.submit(data=ORIGINAL, filename="h.md", collection_id=kit.collection_id)
    kit.embedder.history.clear()
    worker.ingest(again.id)
    assert embedded_texts(kit.embedder) == []
    stored = kit.store.get_document(again.id)
    assert stored is not None and stored.status is DocumentStatus.INDEXED
    assert index.count == chunks

    # A near-duplicate: only the chunk holding the edit is embedded.
    edited, _ = kit.library.submit(data=EDITED, filename="h2.md", collection_id=kit.collection_id)
    worker.ingest(edited.id)
    [text] = embedded_texts(kit.embedder)
    assert "revised rule 33" in text
    hits = index.search(kit.embedder.embed_batch(["revised rule 33"])[0], 1)
    assert kit.store.chunk(hits[0][0]) is not None


def test_cache_can_be_turned_off(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    config = IngestConfig(chunk_tokens=40, chunk_overlap_tokens=5, embedding_cache=False)
    worker = IngestWorker(kit.store, kit.library.files, kit.embedder, index, kit.index_dir, config)
    for name in ("a.md", "b.md"):
        document, _ = kit.library.submit(
            data=ORIGINAL + name.encode(), filename=name, collection_id=kit.collection_id
        )
        worker.ingest(document.id)
    texts = embedded_texts(kit.embedder)
    assert len(texts) > len(set(texts))  # the shared paragraphs were embedded twice
