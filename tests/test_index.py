"""FAISS index: search, real deletes, atomic checkpoints, torn and stale files rebuilt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import retrieval.index
import retrieval.index_files
from retrieval.index import FaissIndex
from retrieval.index_files import MANIFEST_FILE, IndexUnusable, index_file


def unit_vectors(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_search_finds_the_nearest_by_id() -> None:
    index = FaissIndex(16, "m")
    vectors = unit_vectors(50)
    ids = np.arange(1000, 1050, dtype=np.int64)
    index.add(ids, vectors)
    hits = index.search(vectors[7], 3)
    assert hits[0][0] == 1007
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert len(hits) == 3


def test_remove_is_immediate_and_real() -> None:
    index = FaissIndex(16, "m")
    vectors = unit_vectors(10)
    index.add(np.arange(10, dtype=np.int64), vectors)
    assert index.remove(np.array([3], dtype=np.int64)) == 1
    assert 3 not in [i for i, _ in index.search(vectors[3], 10)]
    assert index.count == 9


def test_empty_index_and_small_k() -> None:
    index = FaissIndex(16, "m")
    assert index.search(unit_vectors(1)[0], 5) == []
    index.add(np.array([1], dtype=np.int64), unit_vectors(1))
    assert len(index.search(unit_vectors(1)[0], 5)) == 1  # no -1 padding


def test_wrong_shape_is_rejected() -> None:
    with pytest.raises(ValueError):
        FaissIndex(16, "m").add(np.array([1, 2], dtype=np.int64), unit_vectors(1))


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    index = FaissIndex(16, "m")
    vectors = unit_vectors(20)
    index.add(np.arange(20, dtype=np.int64), vectors)
    manifest = index.save(tmp_path)
    assert manifest.count == 20 and manifest.max_chunk_id == 19
    loaded = FaissIndex.load(tmp_path, model_id="m", dimension=16)
    assert loaded.search(vectors[5], 1)[0][0] == 5
    assert not list(tmp_path.glob(".*tmp"))  # no temp files left behind


def test_torn_index_file_is_detected(tmp_path: Path) -> None:
    index = FaissIndex(16, "m")
    index.add(np.arange(20, dtype=np.int64), unit_vectors(20))
    index.save(tmp_path)
    data = index_file(tmp_path).read_bytes()
    index_file(tmp_path).write_bytes(data[: len(data) // 2])
    with pytest.raises(IndexUnusable, match="torn"):
        FaissIndex.load(tmp_path, model_id="m", dimension=16)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda d: (d / MANIFEST_FILE).unlink(), "no checkpoint"),
        (lambda d: (d / MANIFEST_FILE).write_text("{garbage"), "unreadable"),
        (lambda d: index_file(d).unlink(), "missing"),
    ],
)
def test_damaged_checkpoints_are_detected(tmp_path: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    index = FaissIndex(16, "m")
    index.add(np.arange(3, dtype=np.int64), unit_vectors(3))
    index.save(tmp_path)
    damage(tmp_path)
    with pytest.raises(IndexUnusable, match=reason):
        FaissIndex.load(tmp_path, model_id="m", dimension=16)


def test_index_of_another_model_is_not_used(tmp_path: Path) -> None:
    FaissIndex(16, "old-model").save(tmp_path)
    with pytest.raises(IndexUnusable, match="old-model"):
        FaissIndex.load(tmp_path, model_id="new-model", dimension=16)


def test_checkpoint_switches_files_and_keeps_one(tmp_path: Path) -> None:
    index = FaissIndex(16, "m")
    index.add(np.arange(3, dtype=np.int64), unit_vectors(3))
    index.save(tmp_path)
    first = index_file(tmp_path)
    index.add(np.arange(3, 6, dtype=np.int64), unit_vectors(3, seed=1))
    index.save(tmp_path)
    assert not first.exists()  # the old file went after the switch
    assert [p.name for p in tmp_path.glob("chunks*")] == [index_file(tmp_path).name]
    assert FaissIndex.load(tmp_path, model_id="m", dimension=16).count == 6


def test_manifest_from_before_named_files_still_loads(tmp_path: Path) -> None:
    import json

    index = FaissIndex(16, "m")
    index.add(np.arange(4, dtype=np.int64), unit_vectors(4))
    index.save(tmp_path)
    index_file(tmp_path).rename(tmp_path / "chunks.faiss")
    manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
    del manifest["file"]
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert FaissIndex.load(tmp_path, model_id="m", dimension=16).count == 4
    manifest["file"] = "../elsewhere.faiss"
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(IndexUnusable, match="unexpected file"):
        FaissIndex.load(tmp_path, model_id="m", dimension=16)


def test_a_delete_during_a_checkpoint_does_not_tear_its_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request thread may delete while the ingestion thread writes a checkpoint: the
    manifest's count must be the one of the file written, or the next start rebuilds."""
    index = FaissIndex(16, "m")
    index.add(np.arange(20, dtype=np.int64), unit_vectors(20))
    real_write = retrieval.index_files.write_named

    def write_while_deleting(*args: Any) -> tuple[str, str]:
        index.remove(np.array([3], dtype=np.int64))
        return real_write(*args)

    monkeypatch.setattr(retrieval.index, "write_named", write_while_deleting)
    index.save(tmp_path)
    assert FaissIndex.load(tmp_path, model_id="m", dimension=16).count == 20
