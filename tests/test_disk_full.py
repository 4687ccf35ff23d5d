"""A full disk is a clear 507, logged once, reported by readiness, and leaves nothing
half-written."""

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
    ready = client.get("/health/ready")
    assert ready.status_code == 503 and "disk" in ready.json()["detail"]


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
