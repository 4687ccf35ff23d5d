"""A missing, torn or stale FAISS checkpoint is rebuilt or caught up from SQLite."""

from __future__ import annotations

from pathlib import Path

from retrieval.index_files import index_file
from tests.retrieval_kit import Kit, make_kit

DOCS = [b"alpha policy text about leave", b"beta rules for travel meals", b"gamma parking notes"]


def ingest_all(kit: Kit) -> None:
    index, _ = kit.open_index()
    worker = kit.worker(index)
    for number, data in enumerate(DOCS):
        document, _ = kit.library.submit(
            data=data, filename=f"{number}.txt", collection_id=kit.collection_id
        )
        worker.ingest(document.id)


def test_missing_index_is_rebuilt_from_sqlite(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    ingest_all(kit)
    for path in kit.index_dir.iterdir():  # as if the disk holding the index was lost
        path.unlink()
    index, report = kit.open_index()
    assert not report.loaded_from_disk
    assert index.count == len(DOCS)
    assert index_file(kit.index_dir).exists()  # and saved for next time


def test_torn_index_is_rebuilt(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    ingest_all(kit)
    kit.open_index()  # catches up and checkpoints all documents
    path = index_file(kit.index_dir)
    path.write_bytes(path.read_bytes()[:100])
    rebuilt, report = kit.open_index()
    assert report.reason is not None and "torn" in report.reason
    assert rebuilt.count == len(DOCS)


def test_stale_index_is_caught_up(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    ingest_all(kit)
    index, _ = kit.open_index()
    index.save(kit.index_dir)
    # After the checkpoint: one more document arrives and one is deleted.
    extra, _ = kit.library.submit(
        data=b"delta newer text", filename="new.txt", collection_id=kit.collection_id
    )
    kit.worker(index).ingest(extra.id)
    kit.library.delete(1)
    reopened, report = kit.open_index()
    assert report.loaded_from_disk
    assert (report.added, report.removed) == (1, 1)
    assert sorted(reopened.ids().tolist()) == sorted(
        kit.store.embedded_chunk_ids(kit.embedder.model_id).tolist()
    )


def test_checkpoint_lagging_behind_sqlite_is_caught_up(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    ingest_all(kit)  # the empty checkpoint made on open was never refreshed: killed before
    index, report = kit.open_index()
    assert report.loaded_from_disk and report.added == len(DOCS)
    assert index.count == len(DOCS)


def test_in_sync_index_loads_without_changes(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    ingest_all(kit)
    index, _ = kit.open_index()
    index.save(kit.index_dir)
    _, report = kit.open_index()
    assert report.loaded_from_disk and not report.changed


def test_changing_the_embedding_model_re_embeds_every_document(tmp_path: Path) -> None:
    from retrieval.embedder import HashingEmbedder
    from retrieval.types import DocumentStatus

    kit = make_kit(tmp_path)
    ingest_all(kit)
    kit.embedder = HashingEmbedder(dimension=128)  # a different model id and dimension
    assert kit.store.requeue_without_vectors(kit.embedder.model_id) == len(DOCS)
    index, report = kit.open_index()
    assert report.reason is not None and "hashing-256" in report.reason
    worker = kit.worker(index)
    for document in kit.store.list_documents():
        assert document.status is DocumentStatus.QUEUED
        worker.ingest(document.id)
    assert index.count == len(DOCS)
    assert kit.store.requeue_without_vectors(kit.embedder.model_id) == 0
