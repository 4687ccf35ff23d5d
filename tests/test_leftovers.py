"""The start-up sweep removes what a killed process leaves in the data directory (temporary
files of index saves and uploads, checkpoint files never made live, originals whose row is
gone), and nothing else."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval.index import FaissIndex
from retrieval.index_files import read_manifest, sweep_index_dir
from retrieval.index_types import IndexSpec
from retrieval.leftovers import sweep_data_leftovers
from retrieval.uploads import content_hash
from tests.retrieval_kit import Kit, make_kit

ROOT = Path(__file__).resolve().parent.parent
DIM = 16


def saved_index(directory: Path, count: int = 500, spec: IndexSpec | None = None) -> FaissIndex:
    index = FaissIndex(DIM, "m", spec=spec)
    vectors = np.random.default_rng(0).normal(size=(count, DIM)).astype(np.float32)
    index.add(np.arange(count, dtype=np.int64), vectors)
    directory.mkdir(parents=True, exist_ok=True)
    index.save(directory)
    return index


def files_in(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def upload(kit: Kit, text: str) -> str:
    document, _ = kit.library.submit(
        data=text.encode(), filename=f"{text}.txt", collection_id=kit.collection_id
    )
    return document.stored_name


# --- leftovers laid out exactly as a kill leaves them ---------------------------------------


def test_the_index_sweep_removes_temporary_and_unnamed_checkpoint_files(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    saved_index(directory)
    live = files_in(directory)
    size = (directory / read_manifest(directory).file).stat().st_size
    leftovers = {
        ".chunks-0123456789abcdef.faiss.k2j4_x9a.tmp": size,  # write_named, killed mid-write
        ".chunks.a1b2c3d4.tmp": size,  # write_index_named (a merge), killed mid-write
        ".chunks-gone-0123456789abcdef.npy.zz00yy11.tmp": 10,
        ".manifest.json.q1w2e3r4.tmp": 0,  # killed before the manifest was written
        "chunks-fedcba9876543210.faiss": size,  # staged, never made live
        "chunks-delta-fedcba9876543210.faiss": 100,  # the layer of a switch left behind
    }
    for name, length in leftovers.items():
        (directory / name).write_bytes(b"\0" * length)
    unrelated = {"notes.txt", ".other.abcdefgh.tmp", ".chunks.tmp", "manifest.json.bak"}
    for name in unrelated:
        (directory / name).write_bytes(b"keep")
    removed = sweep_index_dir(directory)
    assert {p.name for p in removed} == set(leftovers)
    assert files_in(directory) == live | unrelated
    index = FaissIndex.load(directory, model_id="m", dimension=DIM)  # hashes checked
    assert index.count == 500


def test_without_a_readable_manifest_no_checkpoint_file_is_touched(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    saved_index(directory)
    (directory / "manifest.json").write_text("{torn")
    checkpoint = files_in(directory)
    (directory / ".chunks.abcdefgh.tmp").write_bytes(b"partial")
    assert [p.name for p in sweep_index_dir(directory)] == [".chunks.abcdefgh.tmp"]
    assert files_in(directory) == checkpoint
    assert sweep_index_dir(tmp_path / "never made") == []


def test_the_upload_sweep_removes_orphans_and_temporary_files_only(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    kept = [upload(kit, "alpha"), upload(kit, "beta")]
    shared = upload(kit, "shared")
    second = kit.store.ensure_collection("second")
    kit.library.submit(data=b"shared", filename="again.txt", collection_id=second)
    orphan = content_hash(b"deleted, but the file stayed")
    files = kit.library.files
    files.save(b"deleted, but the file stayed")
    temp = files.path(kept[0]).parent / f".{orphan}.x1y2z3w4.tmp"
    temp.write_bytes(b"half an upl")
    unrelated = [
        files.directory / "README",
        files.directory / "zz" / ("0" * 64),  # not under its own prefix
        files.path(kept[0]).parent / ("f" * 64),  # not under its own prefix either
        files.path(kept[0]).parent / "notes.tmp",
    ]
    for path in unrelated:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"keep")
    # One of two documents with the same content is deleted: the file is still in use.
    first_shared = next(d for d in kit.store.list_documents() if d.stored_name == shared)
    kit.library.delete(first_shared.id)
    removed = kit.library.sweep()
    assert sorted(removed) == sorted([files.path(orphan), temp])
    for name in [*kept, shared]:
        assert files.path(name).exists()
    assert all(path.exists() for path in unrelated)
    assert kit.library.sweep() == []


def test_the_sweep_logs_what_it_removes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kit = make_kit(tmp_path)
    saved_index(kit.index_dir)
    leftover = kit.index_dir / ".chunks.abcdefgh.tmp"
    leftover.write_bytes(b"x" * 1234)
    orphan = kit.library.files.path(kit.library.files.save(b"no row"))
    with caplog.at_level(logging.WARNING):
        removed = sweep_data_leftovers(kit.index_dir, kit.library)
    assert sorted(removed) == sorted([leftover, orphan])
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"removed {leftover}, left by an interrupted checkpoint (1234 bytes)" in logged
    assert f"removed {orphan}, left by an interrupted upload or delete (6 bytes)" in logged


# --- a real kill (SIGKILL) at each point ----------------------------------------------------

# Sets up a data directory, then kills itself at one point of one operation (argv[2]).
KILLED = """
import os, signal, stat, sys
from pathlib import Path
import numpy as np
from retrieval.index import FaissIndex
from retrieval.index_types import IndexSpec
from tests.retrieval_kit import make_kit

root, point = Path(sys.argv[1]), sys.argv[2]
kit = make_kit(root)
def upload(text):
    return kit.library.submit(data=text.encode(), filename="a.txt", collection_id=1)[0]
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
def die_at_fsync(n, files_only=False):
    real, calls = os.fsync, [0]
    def fsync(fd):
        if not files_only or stat.S_ISREG(os.fstat(fd).st_mode):
            calls[0] += 1
        if calls[0] == n:
            die()
        real(fd)
    os.fsync = fsync

kept, doomed = upload("kept"), upload("doomed")
mapped = point == "merge"
spec = IndexSpec(mmap_above_mb=0.0 if mapped else 1e9, compact_ratio=0.01)
index = FaissIndex(16, "m", spec=spec)
rng = np.random.default_rng(0)
index.add(np.arange(2000), rng.normal(size=(2000, 16)).astype(np.float32))
index.save(kit.index_dir)
index.add(np.arange(2000, 3000), rng.normal(size=(1000, 16)).astype(np.float32))
print(flush=True)
if point == "delete":  # the row is deleted, the file not yet
    kit.library.files.delete = die
    kit.library.delete(doomed.id)
elif point == "upload-row":  # the file is written, the row not yet
    kit.store.add_document = die
    upload("never acknowledged")
elif point == "upload-write":  # the file is being written
    die_at_fsync(1, files_only=True)
    upload("never acknowledged")
elif point == "merge":  # a mapped index merges its layers into a new base file
    die_at_fsync(1)
    index.save(kit.index_dir)
else:  # an index save: writing the file (1), after its rename (2), writing the manifest (3)
    die_at_fsync(int(point.removeprefix("save-")))
    index.save(kit.index_dir)
"""


@pytest.mark.parametrize(
    ("point", "left"),
    [
        ("delete", {"uploads/*/<doomed>"}),
        ("upload-row", {"uploads/*/<new>"}),
        ("upload-write", {"uploads/*/.<new>.*.tmp"}),
        ("save-1", {"index/.chunks-*.faiss.*.tmp"}),
        ("save-2", {"index/chunks-*.faiss"}),
        ("save-3", {"index/chunks-*.faiss", "index/.manifest.json.*.tmp"}),
        ("merge", {"index/.chunks.*.tmp"}),
    ],
)
def test_a_kill_at_each_point_leaves_only_what_the_sweep_removes(
    tmp_path: Path, point: str, left: set[str]
) -> None:
    writer = subprocess.run(
        [sys.executable, "-c", KILLED, str(tmp_path), point],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert writer.returncode == -signal.SIGKILL, writer.stderr
    kit = make_kit(tmp_path)
    manifest = read_manifest(kit.index_dir)
    live = {f"index/{name}" for name, _ in manifest.files()} | {"index/manifest.json"}
    live |= {f"uploads/{d.stored_name[:2]}/{d.stored_name}" for d in kit.store.list_documents()}
    doomed, new = content_hash(b"doomed"), content_hash(b"never acknowledged")
    patterns = {p.replace("<doomed>", doomed).replace("<new>", new) for p in left}
    leftovers = files_in(tmp_path) - live - {"ragdesk.db", "ragdesk.db-wal", "ragdesk.db-shm"}
    # What the kill left: one file for each expected pattern, nothing else.
    assert len(leftovers) == len(patterns)
    assert all(any(Path(f).match(p) for f in leftovers) for p in patterns), leftovers
    removed = sweep_data_leftovers(kit.index_dir, kit.library)
    assert {str(p.relative_to(tmp_path)) for p in removed} == leftovers
    assert not files_in(tmp_path) & leftovers
    assert live <= files_in(tmp_path)  # live data untouched
    spec = IndexSpec(mmap_above_mb=0.0 if point == "merge" else 1e9)
    index = FaissIndex.load(kit.index_dir, model_id="m", dimension=16, spec=spec)
    assert index.count == manifest.count
    for document in kit.store.list_documents():
        assert kit.library.files.read(document.stored_name)
