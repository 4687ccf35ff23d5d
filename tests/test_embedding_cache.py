"""Identical chunk texts are embedded once: re-ingestion and near-duplicates reuse vectors."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import sqlite_utils

from retrieval.embedder import HashingEmbedder
from retrieval.embedding_cache import CacheUsage, EmbeddingCache, text_key
from retrieval.index import FaissIndex
from retrieval.ingest import IngestWorker
from retrieval.migrations import MIGRATIONS, apply_migrations
from retrieval.reindex import passages, reindex
from retrieval.types import DocumentStatus
from tests.conftest import wait_for
from tests.retrieval_kit import Kit, make_kit

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
    worker = kit.worker(index, embedding_cache=False)  # ingests directly: no quiet period
    kit.ingest(worker, ((name, ORIGINAL.decode() + name) for name in ("a.md", "b.md")))
    texts = embedded_texts(kit.embedder)
    assert len(texts) > len(set(texts))  # the shared paragraphs were embedded twice


# --- pruning ---------------------------------------------------------------------------------
OTHER = b"# Canteen\n\nThe canteen opens at eight and closes at three on Fridays."


def cached(kit: Kit) -> set[tuple[str, str]]:
    rows = kit.db.read().execute("SELECT text_sha256, model_id FROM embedding_cache")
    return {(row[0], row[1]) for row in rows}


def live_keys(kit: Kit) -> set[str]:
    """Cache keys of the texts a re-ingestion of every stored passage would embed."""
    _, texts = passages(kit.store)  # indexed documents' passages, as reindex embeds them
    return {text_key(text) for text in texts}


def row_bytes(kit: Kit) -> int:
    return 4 * kit.embedder.dimension + len(kit.embedder.model_id) + 80


def pruning_worker(
    kit: Kit, index: FaissIndex, max_bytes: int, quiet_s: float = 60.0
) -> IngestWorker:
    return kit.worker(index, checkpoint_seconds=quiet_s, embedding_cache_max_bytes=max_bytes)


def submit(kit: Kit, data: bytes, name: str) -> int:
    document, _ = kit.library.submit(data=data, filename=name, collection_id=kit.collection_id)
    return document.id


def ingested(tmp_path: Path, data: bytes = ORIGINAL) -> tuple[Kit, IngestWorker, int]:
    """A kit with ``data`` uploaded as h.md and ingested, its worker, the document's id."""
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    document_id = submit(kit, data, "h.md")
    worker.ingest(document_id)
    return kit, worker, document_id


def test_prune_keeps_every_vector_a_live_passage_needs(tmp_path: Path) -> None:
    kit, worker, document_id = ingested(tmp_path)
    cache = EmbeddingCache(kit.db)
    cache.embed(kit.embedder, ["a spare text", "another spare text"])  # no passage has these
    needed = {(key, kit.embedder.model_id) for key in live_keys(kit)}
    assert cached(kit) == needed | {
        (text_key(t), kit.embedder.model_id) for t in ("a spare text", "another spare text")
    }

    report = cache.prune(0, kit.embedder.model_id)
    assert report.evicted_rows == 2
    assert cached(kit) == needed
    assert report.usage == CacheUsage(len(needed), len(needed) * row_bytes(kit), 0, 0)

    # Re-ingesting the document after the prune embeds nothing and indexes the same.
    kit.embedder.history.clear()
    kit.store.set_status(document_id, DocumentStatus.QUEUED)
    worker.ingest(document_id)
    assert embedded_texts(kit.embedder) == []
    stored = kit.store.get_document(document_id)
    assert stored is not None and stored.status is DocumentStatus.INDEXED
    assert len(kit.store.embedded_chunk_ids(kit.embedder.model_id)) == len(needed)


def test_deleted_documents_vectors_are_kept_within_the_bound(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    kit.library.worker = worker
    handbook, canteen = submit(kit, ORIGINAL, "h.md"), submit(kit, OTHER, "c.md")
    worker.ingest_many([handbook, canteen])
    handbook_keys = live_keys(kit)
    kit.library.delete(handbook)
    handbook_keys -= live_keys(kit)  # those the canteen document does not share
    cache = EmbeddingCache(kit.db)

    # Within the bound: kept, so a re-upload embeds nothing.
    report = cache.prune(len(handbook_keys) * row_bytes(kit), kit.embedder.model_id)
    assert report.evicted_rows == 0
    assert report.usage.spare_rows == len(handbook_keys)
    kit.embedder.history.clear()
    again = submit(kit, ORIGINAL, "h.md")
    worker.ingest(again)
    assert embedded_texts(kit.embedder) == []

    # Deleted again and pruned to nothing: only the canteen's vectors stay.
    kit.library.delete(again)
    report = cache.prune(0, kit.embedder.model_id)
    assert report.evicted_rows == len(handbook_keys)
    assert {key for key, _ in cached(kit)} == live_keys(kit)
    # A re-upload now embeds its passages again, and they are found as before.
    third = submit(kit, ORIGINAL, "h.md")
    worker.ingest(third)
    assert {text_key(text) for text in embedded_texts(kit.embedder)} == handbook_keys
    query = kit.embedder.embed_batch(["Paragraph 3 explains rule 33"])[0]
    [(chunk_id, _)] = index.search(query, 1)
    hit = kit.store.chunk(chunk_id)
    assert hit is not None and hit.document_id == third and "rule 33" in hit.text


def test_prune_evicts_the_least_recently_used_first(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    now = [0.0]
    cache = EmbeddingCache(kit.db, clock=lambda: now[0])
    for n in range(6):  # text n stored at time n
        now[0] = float(n)
        cache.embed(kit.embedder, [f"text {n}"])
    now[0] = 10.0
    cache.embed(kit.embedder, ["text 0"])  # a hit: the oldest is now the most recent
    assert len(kit.embedder.history) == 6

    size = row_bytes(kit)
    report = cache.prune(3 * size + size - 1, kit.embedder.model_id)  # room for 3, not 4
    assert report.evicted_rows == 3
    assert report.evicted_bytes == 3 * size
    assert {key for key, _ in cached(kit)} == {text_key(f"text {n}") for n in (0, 4, 5)}
    assert report.usage == CacheUsage(3, 3 * size, 3, 3 * size)
    assert cache.size() == (3, 3 * size)
    assert cache.prune(3 * size, kit.embedder.model_id).evicted_rows == 0  # already fits


def test_an_earlier_models_vectors_go_after_a_reindex(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    worker.ingest_many([submit(kit, ORIGINAL, "h.md"), submit(kit, OTHER, "c.md")])
    old_model, keys = kit.embedder.model_id, live_keys(kit)
    new = HashingEmbedder(dimension=128)
    reindex(kit.store, new, kit.index_dir)
    assert cached(kit) == {(k, m) for k in keys for m in (old_model, new.model_id)}
    cache = EmbeddingCache(kit.db)

    # The old model's vectors are spare now; within the bound they stay (a switch back).
    old_bytes = len(keys) * row_bytes(kit)
    assert cache.prune(old_bytes, new.model_id).usage.spare_rows == len(keys)
    assert cache.prune(old_bytes - 1, new.model_id).evicted_rows == 1  # the LRU one
    assert cache.prune(0, new.model_id).evicted_rows == len(keys) - 1
    assert cached(kit) == {(key, new.model_id) for key in keys}
    _, report = reindex(kit.store, new, kit.index_dir)  # the new model's stay complete
    assert (report.embedded, report.reused) == (0, len(keys))


def test_passages_still_waiting_for_vectors_keep_the_current_models(tmp_path: Path) -> None:
    """A crash between storing passages and their vectors: the resumed ingestion hits."""
    kit, worker, document_id = ingested(tmp_path)
    keys = live_keys(kit)
    with kit.db.write() as db:
        db.execute("DELETE FROM embeddings")
        db.execute("UPDATE documents SET status = 'embedding'")
    cache = EmbeddingCache(kit.db)
    assert cache.prune(0, kit.embedder.model_id).evicted_rows == 0
    assert cached(kit) == {(key, kit.embedder.model_id) for key in keys}
    kit.embedder.history.clear()
    worker.ingest(document_id)
    assert embedded_texts(kit.embedder) == []
    # Stored vectors protect their model's rows whatever model is in use (a reindex to
    # another model that has not switched yet).
    assert cache.prune(0, "another-model").evicted_rows == 0


def test_a_changed_title_rekeys_its_passages(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    worker.ingest(submit(kit, ORIGINAL, "h.md"))
    cache = EmbeddingCache(kit.db)
    before = live_keys(kit)
    assert cache.key_passages() == len(before)  # worked out lazily, before a prune
    assert cache.key_passages() == 0  # ...once
    with kit.db.write() as db:
        db.execute("UPDATE documents SET title = 'Staff handbook'")
    assert cache.key_passages() == len(before)
    keys = {row[0] for row in kit.db.read().execute("SELECT text_sha256 FROM chunk_text_keys")}
    assert keys == live_keys(kit) and not keys & before


def test_rows_from_before_the_migration_are_dated_by_when_they_were_stored(
    tmp_path: Path,
) -> None:
    db = sqlite_utils.Database(tmp_path / "old.db")
    upto = next(i for i, m in enumerate(MIGRATIONS) if m.name.startswith("retrieval.m012_"))
    apply_migrations(db, MIGRATIONS[:upto])
    db.execute(
        "INSERT INTO embedding_cache (text_sha256, model_id, vector, created_at)"
        " VALUES ('k', 'm', x'00000000', 123.0)"
    )
    db.conn.commit()
    apply_migrations(db)
    assert db.execute("SELECT last_used FROM embedding_cache").fetchall() == [(123.0,)]


def test_the_worker_prunes_in_the_background(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="retrieval.ingest")
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = pruning_worker(kit, index, max_bytes=0, quiet_s=0.05)
    EmbeddingCache(kit.db).embed(kit.embedder, ["left over from before"])
    kit.library.attach_worker(worker)  # starts the thread: a prune once it is idle
    try:
        document_id = submit(kit, ORIGINAL, "h.md")
        wait_for(lambda: indexed(kit, document_id))
        needed = {(key, kit.embedder.model_id) for key in live_keys(kit)}
        wait_for(lambda: cached(kit) == needed)  # the left-over row went
        assert "embedding cache: evicted 1 unused vectors" in caplog.text  # for operators
        kit.library.delete(document_id)  # its vectors become spare: pruned when idle
        wait_for(lambda: cached(kit) == set())
        wait_for(lambda: worker.cache_usage == CacheUsage(0, 0, 0, 0))
    finally:
        assert worker.stop()


def indexed(kit: Kit, document_id: int) -> bool:
    document = kit.store.get_document(document_id)
    return document is not None and document.status is DocumentStatus.INDEXED


def test_a_title_longer_than_is_stored_keeps_its_passages_vectors(tmp_path: Path) -> None:
    """Passages are embedded with the title as stored (cut at 500 characters), so the cache
    keys rebuilt from SQLite match them and prune keeps them."""
    title = "Handbook " + "x" * 600
    body = "\n\n".join(f"Paragraph {n} says rule {n}." for n in range(5))
    kit, worker, document_id = ingested(tmp_path, f"# {title}\n\n{body}".encode())
    report = EmbeddingCache(kit.db).prune(0, kit.embedder.model_id)
    assert report.evicted_rows == 0 and report.usage.spare_rows == 0
    kit.embedder.history.clear()
    kit.store.set_status(document_id, DocumentStatus.QUEUED)
    worker.ingest(document_id)
    assert kit.embedder.history == []  # nothing embedded again


def test_n_a_full_disk_makes_the_worker_drop_every_spare_vector(tmp_path: Path) -> None:
    """#30: caches give space back before users' writes are refused: after
    ``give_back_space`` the next prune keeps no spare vector, whatever the budget."""
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = pruning_worker(kit, index, max_bytes=1 << 30, quiet_s=0.05)
    EmbeddingCache(kit.db).embed(kit.embedder, ["left over from before"])
    kit.library.attach_worker(worker)
    try:
        wait_for(lambda: worker.cache_usage is not None)  # the first prune kept it: in budget
        assert cached(kit) != set()
        assert worker.give_back_space() == 0  # done by the worker thread, soon
        wait_for(lambda: cached(kit) == set())
        wait_for(lambda: worker.cache_usage == CacheUsage(0, 0, 0, 0))
    finally:
        assert worker.stop()
