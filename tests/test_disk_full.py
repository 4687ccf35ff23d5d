"""A full disk is a clear 507, logged once, reported by readiness (without a 503), leaves
nothing half-written, makes caches give space back, and sends documents back to the queue."""

from __future__ import annotations

import errno
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from retrieval.disk import DiskWatch, is_disk_full
from tests.conftest import upload, wait_indexed

ENOSPC = OSError(errno.ENOSPC, "No space left on device")
SQLITE_FULL = sqlite3.OperationalError("database or disk is full")


def test_full_disks_are_recognised_through_causes() -> None:
    assert is_disk_full(ENOSPC) and is_disk_full(SQLITE_FULL)
    try:
        try:
            raise ENOSPC
        except OSError as exc:
            raise RuntimeError("saving the index failed") from exc
    except RuntimeError as wrapped:
        assert is_disk_full(wrapped)
    assert not is_disk_full(OSError(errno.EACCES, "denied")) and not is_disk_full(None)


def test_an_upload_on_a_full_disk_is_a_507_and_stores_nothing(
    client: TestClient[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    services = client.app.state.services

    def full(data: bytes) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(services.library.files, "save", full)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            reply = upload(client, ("a.txt", b"some words"))
            assert reply.status_code == 507, reply.text
            assert "disk is full" in reply.json()["error"]["detail"]
    assert client.get("/api/documents").json()["documents"] == []
    assert sum("is full" in r.getMessage() for r in caplog.records) == 1  # told once
    assert not any(r.exc_info for r in caplog.records)  # no traceback per request
    # #30: readiness reports it without taking reads down; /metrics says it too
    ready = client.get("/health/ready")
    assert ready.status_code == 200 and ready.json()["disk"] == "full"
    assert "ragdesk_disk_full 1.0" in client.get("/metrics").text
    assert client.get("/api/documents").status_code == 200  # reads go on


def test_a_delete_on_a_full_disk_is_a_507_and_keeps_the_document(
    client: TestClient[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    document = upload(client, ("a.txt", b"some words")).json()["documents"][0]
    wait_indexed(client, document["id"])
    services = client.app.state.services

    def full(document_id: int) -> list[int]:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(services.store, "delete_document", full)
    reply = client.delete(f"/api/documents/{document['id']}")
    assert reply.status_code == 507
    assert client.get(f"/api/documents/{document['id']}").status_code == 200


def test_readiness_clears_once_there_is_room(tmp_path: Path) -> None:
    watch = DiskWatch(tmp_path, min_free_bytes=0)
    assert not watch.full
    assert watch.saw(ENOSPC) and watch.full
    assert not watch.saw(ValueError("not a disk problem"))
    watch._failed_at = -1e9  # long ago
    assert not watch.full
    assert DiskWatch(tmp_path, min_free_bytes=1 << 62).full  # less free than required


def test_a_checkpoint_on_a_full_disk_is_told_once_then_recovers(
    client: TestClient[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    worker = client.app.state.services.require_retrieval().worker
    worker.stop()  # checkpoints are driven by hand here, never by two threads at once
    index = worker.index
    real_save = index.save
    failing = True

    def save(directory: Path) -> None:
        if failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(directory)

    monkeypatch.setattr(index, "save", save)
    with caplog.at_level(logging.WARNING, logger="retrieval.ingest"):
        for _ in range(5):
            worker.mark_dirty()
            worker.checkpoint()
        failing = False
        worker.mark_dirty()
        worker.checkpoint()
    messages = [r.getMessage() for r in caplog.records if r.name == "retrieval.ingest"]
    assert sum("disk is full" in m for m in messages) == 1
    assert not any(r.exc_info for r in caplog.records)
    assert messages[-1] == "the vector index is checkpointed again"


def test_n_a_full_disk_asks_caches_to_give_space_back(tmp_path: Path) -> None:
    watch = DiskWatch(tmp_path, min_free_bytes=0)
    asked: list[int] = []
    watch.reclaimers.append(lambda: asked.append(1) or 4096)
    watch.reclaimers.append(lambda: 1 // 0)  # a broken cache does not stop the others
    assert not watch.saw(ValueError("not a disk problem")) and asked == []
    assert watch.saw(ENOSPC) and asked == [1]


def test_n_documents_hit_by_a_full_disk_return_to_the_queue_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#30: a full disk turned acknowledged documents into 'failed' ("internal error
    while parsing"); they are queued again and indexed once there is room."""
    from retrieval import ingest
    from retrieval.types import DocumentStatus
    from tests.conftest import wait_for
    from tests.retrieval_kit import make_kit

    monkeypatch.setattr(ingest, "DISK_RETRY_S", 0.2)
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    store_passages = kit.store.replace_content
    attempts: list[DocumentStatus] = []

    def replace_content(document_id: int, *args: Any, **kwargs: Any) -> Any:
        attempts.append(kit.store.get_document(document_id).status)  # type: ignore[union-attr]
        if len(attempts) <= 2:  # the first try and the first retry find the disk full
            raise sqlite3.OperationalError("database or disk is full")
        return store_passages(document_id, *args, **kwargs)

    monkeypatch.setattr(kit.store, "replace_content", replace_content)
    document, _ = kit.library.submit(
        data=b"Parking costs 4 euros.", filename="a.txt", collection_id=1
    )
    kit.library.attach_worker(worker)
    try:
        wait_for(lambda: kit.store.get_document(document.id).status.is_terminal)  # type: ignore[union-attr]
    finally:
        worker.stop()
    assert len(attempts) == 3  # two full-disk tries, then indexed; never failed between
    assert kit.store.get_document(document.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]
