"""Large checkpoints are searched memory-mapped, with writes layered over the read-only base.

Every test compares the mapped index with a plain in-memory one fed the same writes: the
layers (added vectors, tombstoned deletes), their checkpoints, merges and reloads must never
change what a search returns.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import retrieval.index
import retrieval.index_files
from retrieval.index import FaissIndex
from retrieval.index_files import IndexUnusable, read_manifest, verify
from retrieval.index_types import IndexSpec, new_ivf

DIM = 16
MAPPED = IndexSpec(mmap_above_mb=0, compact_ratio=0.5)  # every checkpoint is mapped


def unit_vectors(n: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    unit: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit


def ids(start: int, stop: int) -> np.ndarray:
    return np.arange(start, stop, dtype=np.int64)


class Twin:
    """A mapped index and an in-memory reference receiving the same writes."""

    def __init__(self, directory: Path, spec: IndexSpec = MAPPED):
        self.directory = directory
        self.spec = spec
        self.index = FaissIndex(DIM, "m", spec=spec)
        self.reference = FaissIndex(DIM, "m", spec=IndexSpec(mmap_above_mb=1e9))

    def add(self, start: int, stop: int, seed: int) -> None:
        for index in (self.index, self.reference):
            index.add(ids(start, stop), unit_vectors(stop - start, seed))

    def remove(self, *chunk_ids: int) -> None:
        gone = np.array(chunk_ids, dtype=np.int64)
        assert self.index.remove(gone) == self.reference.remove(gone)

    def reload(self) -> None:
        self.index = FaissIndex.load(self.directory, model_id="m", dimension=DIM, spec=self.spec)

    def assert_same(self, queries: int = 20, allowed: np.ndarray | None = None) -> None:
        assert self.index.count == self.reference.count
        assert sorted(self.index.ids()) == sorted(self.reference.ids())
        for query in unit_vectors(queries, seed=99):
            got = self.index.search(query, 10, allowed=allowed)
            want = self.reference.search(query, 10, allowed=allowed)
            assert [i for i, _ in got] == [i for i, _ in want]
            assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)


def test_a_large_checkpoint_is_searched_mapped_with_writes_layered_over_it(
    tmp_path: Path,
) -> None:
    twin = Twin(tmp_path)
    twin.add(0, 400, seed=1)
    twin.index.save(tmp_path)
    assert twin.index.mapped
    twin.add(400, 450, seed=2)  # into the layer over the base
    twin.remove(3, 7, 420)  # two tombstones in the base, one from the layer
    twin.assert_same()
    twin.assert_same(allowed=ids(0, 10))  # tombstoned ids are excluded from allow-lists too
    twin.assert_same(allowed=np.array([3, 7], dtype=np.int64))  # nothing left to find


def test_checkpoints_over_a_mapped_base_write_only_the_layers(tmp_path: Path) -> None:
    twin = Twin(tmp_path)
    twin.add(0, 400, seed=1)
    twin.index.save(tmp_path)
    base = read_manifest(tmp_path)
    twin.add(400, 420, seed=2)
    twin.remove(5, 405)
    manifest = twin.index.save(tmp_path)
    assert manifest.file == base.file and manifest.sha256 == base.sha256  # base untouched
    assert manifest.delta is not None and manifest.tombstones is not None
    assert sorted(p.name for p in tmp_path.glob("chunks*")) == sorted(
        name for name, _ in manifest.files()
    )
    twin.reload()
    assert twin.index.mapped
    twin.assert_same()


def test_layers_past_the_ratio_are_merged_into_a_new_base(tmp_path: Path) -> None:
    twin = Twin(tmp_path)
    twin.add(0, 200, seed=1)
    twin.index.save(tmp_path)
    first = read_manifest(tmp_path).file
    twin.add(200, 260, seed=2)
    twin.remove(*range(0, 50))  # 60 added + 50 deleted > half of 200
    manifest = twin.index.save(tmp_path)
    assert manifest.file != first and manifest.delta is None and manifest.tombstones is None
    assert not (tmp_path / first).exists()
    assert twin.index.mapped
    twin.assert_same()
    twin.reload()
    twin.assert_same()


def test_layers_are_merged_past_a_fixed_size_however_large_the_base(tmp_path: Path) -> None:
    twin = Twin(tmp_path, IndexSpec(mmap_above_mb=0, compact_ratio=0.9, max_layer_vectors=30))
    twin.add(0, 400, seed=1)
    twin.index.save(tmp_path)
    base = read_manifest(tmp_path).file
    twin.add(400, 420, seed=2)
    twin.remove(1, 2, 3, 4, 5)
    assert twin.index.save(tmp_path).file == base  # 25 changes: layers
    twin.add(420, 430, seed=3)
    assert twin.index.save(tmp_path).file != base  # 35 > 30, though 35 < 0.9 × 400
    twin.assert_same()


def test_a_layered_checkpoint_loads_whole_when_mapping_is_turned_off(tmp_path: Path) -> None:
    twin = Twin(tmp_path)
    twin.add(0, 300, seed=1)
    twin.index.save(tmp_path)
    twin.add(300, 320, seed=2)
    twin.remove(10, 310)
    twin.index.save(tmp_path)
    twin.spec = IndexSpec(mmap_above_mb=1e9)
    twin.reload()
    assert not twin.index.mapped
    twin.assert_same()


def test_a_mapped_base_is_checked_by_size_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    twin = Twin(tmp_path)
    twin.add(0, 300, seed=1)
    twin.index.save(tmp_path)
    twin.add(300, 310, seed=2)
    manifest = twin.index.save(tmp_path)
    assert manifest.size == (tmp_path / manifest.file).stat().st_size
    hashed: list[str] = []
    real_hash = retrieval.index_files.file_sha256

    def recording_hash(path: Path) -> str:
        hashed.append(path.name)
        return real_hash(path)

    monkeypatch.setattr(retrieval.index_files, "file_sha256", recording_hash)
    twin.reload()
    assert manifest.file not in hashed and manifest.delta in hashed  # the small layer is
    base = tmp_path / manifest.file
    base.write_bytes(base.read_bytes()[:-100])  # truncated
    with pytest.raises(IndexUnusable, match="torn"):
        twin.reload()


def test_writes_made_while_a_checkpoint_switches_structures_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first mapping and a merge both replace the live structures after writing a file;
    writes that land meanwhile (deletes from request threads) must survive the switch."""
    twin = Twin(tmp_path)
    twin.add(0, 200, seed=1)

    def first() -> None:
        twin.add(200, 210, seed=3)
        twin.remove(1, 2)

    def second() -> None:
        twin.add(300, 305, seed=4)
        twin.remove(4, 205, 250)

    writes = iter([first, second])
    real_write = retrieval.index_files.write_named

    def write_and_meanwhile(*args: Any) -> tuple[str, str]:
        result = real_write(*args)
        next(writes, lambda: None)()
        return result

    monkeypatch.setattr(retrieval.index, "write_named", write_and_meanwhile)
    twin.index.save(tmp_path)  # unmapped -> mapped, with writes between snapshot and switch
    assert twin.index.mapped
    twin.assert_same()
    twin.add(250, 300, seed=5)
    twin.remove(*range(20, 80))
    twin.index.save(tmp_path)  # a merge, with writes between snapshot and switch
    assert read_manifest(tmp_path).delta is None
    twin.assert_same()
    monkeypatch.undo()
    twin.index.save(tmp_path)  # the journalled writes reach the next checkpoint
    twin.reload()
    twin.assert_same()


def test_an_ivf_checkpoint_is_mapped_too(tmp_path: Path) -> None:
    vectors = unit_vectors(2000, seed=1)
    spec = IndexSpec(kind="ivf", mmap_above_mb=0, compact_ratio=0.5)
    index = FaissIndex(DIM, "m", _index=new_ivf(DIM, vectors), spec=spec)
    index.add(ids(0, 2000), vectors)
    index.save(tmp_path)
    assert index.mapped and index.kind == "ivf"
    index.remove(ids(0, 1000))
    index.add(ids(5000, 5003), unit_vectors(3, seed=7))
    hits = index.search(vectors[1500], 5)
    assert hits[0][0] == 1500
    assert all(i >= 1000 for i, _ in hits)
    # a small allow-list inside the tombstoned range finds only what is live
    assert [i for i, _ in index.search(vectors[10], 5, allowed=np.array([10, 5001]))] == [5001]
    index.save(tmp_path)
    again = FaissIndex.load(tmp_path, model_id="m", dimension=DIM, spec=spec)
    assert again.mapped and again.kind == "ivf" and again.count == 1003


def test_the_server_on_a_mapped_index_ingests_deletes_at_once_and_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every checkpoint mapped (RAGDESK_INDEX_MMAP_ABOVE_MB=0), through the HTTP API. One
    passage a document; layers are merged past 1.5× the base, so the two first documents
    end up in the base and a delete plus an upload stay layers, through a restart."""
    from app.config.settings import IndexSettings
    from tests.conftest import fake_settings, signed_in, upload, wait_for, wait_indexed

    spec_of = IndexSettings.spec
    merging = lambda section: replace(spec_of(section), compact_ratio=1.5)  # noqa: E731
    monkeypatch.setattr(IndexSettings, "spec", merging)
    settings = fake_settings(tmp_path / "data", index_mmap_above_mb=0)

    def search(client: Any, query: str) -> set[int]:
        hits = client.post("/api/search", json={"query": query, "k": 5}).json()["hits"]
        return {hit["document_id"] for hit in hits}

    with signed_in(settings) as client:
        index = client.app.state.services.retrieval.worker.index
        files = [
            ("canteen.md", b"# Canteen\n\nThe canteen opens at noon for lunch."),
            ("parking.md", b"# Parking\n\nParking permits are renewed every March."),
        ]
        first, second = (upload(client, file).json()["documents"][0] for file in files)
        for document in (first, second):
            wait_indexed(client, document["id"])
        directory = client.app.state.services.retrieval.worker.index_dir
        merged = wait_for(lambda: read_manifest(directory).count == 2 and read_manifest(directory))
        assert index.mapped and merged.delta is None  # both in the mapped base
        assert first["id"] in search(client, "canteen lunch noon")
        assert client.delete(f"/api/documents/{first['id']}").status_code == 204
        assert first["id"] not in search(client, "canteen lunch noon")  # a tombstone, at once
        third = upload(client, ("leave.md", b"# Leave\n\nAnnual leave is 30 days.")).json()
        wait_indexed(client, third["documents"][0]["id"])  # into the layer over the base
        layered = wait_for(lambda: read_manifest(directory).tombstones is not None)
        assert layered and read_manifest(directory).delta is not None  # both layers written
        count = index.count
    with signed_in(settings) as client:  # a restart loads the mapped base and its layers
        index = client.app.state.services.retrieval.worker.index
        assert index.mapped and index.count == count
        assert first["id"] not in search(client, "canteen lunch noon")
        assert second["id"] in search(client, "parking permits march")
        assert third["documents"][0]["id"] in search(client, "annual leave days")


def test_a_damaged_mapped_base_is_found_after_the_start_and_rebuilt_from_sqlite(
    tmp_path: Path,
) -> None:
    """A mapped base is checked by size at load, then hashed in the background: bytes
    flipped on disk are found, and the ingest worker rebuilds the index from SQLite."""
    from tests.conftest import wait_for
    from tests.retrieval_kit import make_kit

    kit = make_kit(tmp_path)
    spec = IndexSpec(mmap_above_mb=0)

    index, _ = kit.open_index(spec)
    kit.ingest(kit.worker(index), ((f"{n}.txt", f"Note {n}: rule {n} applies.") for n in range(20)))
    index.save(kit.index_dir)
    base = kit.index_dir / read_manifest(kit.index_dir).file
    data = bytearray(base.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)  # same size: the check at load passes
    base.write_bytes(bytes(data))

    damaged, _ = kit.open_index(spec)
    assert damaged.mapped
    wait_for(lambda: damaged.damaged)  # the background hash found it
    # Checkpoints after every batch (no quiet period): the idle worker still wakes for it.
    worker = kit.worker(damaged, checkpoint_seconds=0, max_checkpoint_interval=0.05)
    worker.start()
    try:
        wait_for(lambda: not damaged.damaged)  # rebuilt at the next quiet checkpoint
    finally:
        assert worker.stop()
    assert sorted(damaged.ids()) == sorted(kit.store.embedded_chunk_ids(kit.embedder.model_id))
    verify(kit.index_dir, read_manifest(kit.index_dir))  # the files on disk are sound again
    again, _ = kit.open_index(spec)
    stored = kit.store.vectors(again.ids()[:5], kit.embedder.dimension)
    assert [again.search(vector, 1)[0][0] for vector in stored] == list(again.ids()[:5])


def test_a_merge_never_copies_a_damaged_base_into_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge may come before the background hash has finished (a start that catches up
    many writes): it hashes the base itself first, and keeps the layers if it is damaged."""
    spec = IndexSpec(mmap_above_mb=0, max_layer_vectors=10)
    index = FaissIndex(DIM, "m", spec=spec)
    index.add(ids(0, 300), unit_vectors(300, seed=1))
    index.save(tmp_path)
    base = tmp_path / read_manifest(tmp_path).file
    data = bytearray(base.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # same size
    base.write_bytes(bytes(data))
    real_hash = retrieval.index_files.file_sha256

    def slow_hash(path: Path) -> str:
        time.sleep(0.5)  # the background check is still running when the merge comes
        return real_hash(path)

    monkeypatch.setattr(retrieval.index, "file_sha256", slow_hash)
    loaded = FaissIndex.load(tmp_path, model_id="m", dimension=DIM, spec=spec)
    loaded.add(ids(300, 320), unit_vectors(20, seed=2))  # 20 > 10: the next save merges
    manifest = loaded.save(tmp_path)
    assert loaded.damaged  # found by the merge's own check
    assert manifest.file == base.name and manifest.delta is not None  # layers, no merge
    with pytest.raises(IndexUnusable, match="torn"):
        verify(tmp_path, manifest)  # the damage was not laundered under a new hash
