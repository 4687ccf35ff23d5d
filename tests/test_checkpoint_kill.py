"""A writer killed (SIGKILL) in the middle of a checkpoint never leaves an unloadable index."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from retrieval.index import FaissIndex
from retrieval.index_files import read_manifest, sweep_index_dir
from retrieval.index_types import IndexSpec

ROOT = Path(__file__).resolve().parent.parent

# Adds vectors and checkpoints as fast as it can; each file is tens of MB, so a kill
# lands inside a write most of the time.
WRITER = """
import sys
from pathlib import Path
import numpy as np
from retrieval.index import FaissIndex
from retrieval.index_files import IndexUnusable
from retrieval.index_types import IndexSpec
directory, mmap_above_mb = Path(sys.argv[1]), float(sys.argv[2])
spec = IndexSpec(mmap_above_mb=mmap_above_mb, compact_ratio=0.6)
try:
    index = FaissIndex.load(directory, model_id="m", dimension=64, spec=spec)
except IndexUnusable:
    index = FaissIndex(64, "m", spec=spec)
rng = np.random.default_rng()
while True:
    start = int(index.ids().max()) + 1 if index.count else 0
    index.add(np.arange(start, start + 20_000, dtype=np.int64),
              rng.normal(size=(20_000, 64)).astype(np.float32))
    index.remove(rng.choice(start + 20_000, 5_000, replace=False))
    index.save(directory)
    print(index.count, flush=True)
"""


@pytest.mark.parametrize(
    "mmap_above_mb",
    [1e9, 0.0],  # held in memory; memory-mapped, with layered checkpoints and merges
    ids=["in-memory", "mapped"],
)
def test_index_loads_after_the_writer_is_killed_mid_checkpoint(
    tmp_path: Path, mmap_above_mb: float
) -> None:
    directory = tmp_path / "index"
    rng = np.random.default_rng(3)
    counts: list[int] = []
    for _ in range(6):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(directory), str(mmap_above_mb)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        writer.stdout.readline()  # this run has checkpointed once
        time.sleep(float(rng.uniform(0.0, 0.4)))  # somewhere inside a later save
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        manifest = read_manifest(directory)
        spec = IndexSpec(mmap_above_mb=mmap_above_mb)
        index = FaissIndex.load(directory, model_id="m", dimension=64, spec=spec)  # never torn
        assert index.count == manifest.count
        counts.append(index.count)
        # Leftovers of the interrupted checkpoint only: the files it staged (a delta and
        # tombstones), or the old base and its layers when it died between the switch and
        # their removal. (Temp files start with a dot.)
        live = {name for name, _ in manifest.files()}
        assert len([p for p in directory.glob("chunks*") if p.name not in live]) <= 3
    assert counts == sorted(set(counts))  # each run's checkpoints were kept


# WRITER on a slow disk (each fsync takes 0.3 s, as for a large index), saying when each
# save starts: a kill from outside lands inside one, at a random moment.
SLOW_DISK_WRITER = (
    "import os, time\n"
    "_fsync = os.fsync\n"
    "os.fsync = lambda fd: (time.sleep(0.3), _fsync(fd))[1]\n"
    + WRITER.replace(
        "    index.save(directory)", "    print('saving', flush=True)\n    index.save(directory)"
    )
)


def test_the_start_up_sweep_removes_what_killed_checkpoints_leave(tmp_path: Path) -> None:
    """Kills inside saves leave temporary files the size of the index (and files never
    made live); the sweep a start runs removes them, and nothing the manifest names."""
    directory = tmp_path / "index"
    rng = np.random.default_rng(5)
    left = []
    for _ in range(3):
        writer = subprocess.Popen(
            [sys.executable, "-c", SLOW_DISK_WRITER, str(directory), "1e9"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        while writer.stdout.readline().strip() != "saving":  # this run's first save ...
            pass
        while writer.stdout.readline().strip() != "saving":  # ... done; the second begins
            pass
        time.sleep(float(rng.uniform(0.15, 0.9)))
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        manifest = read_manifest(directory)
        live = {name for name, _ in manifest.files()} | {"manifest.json"}
        left.append({p.name for p in directory.iterdir()} - live)
    assert any(name.endswith(".tmp") for names in left for name in names), left
    before = {p.name for p in directory.iterdir()}
    removed = sweep_index_dir(directory)
    assert {p.name for p in removed} == before - live
    assert {p.name for p in directory.iterdir()} == live
    index = FaissIndex.load(directory, model_id="m", dimension=64)
    assert index.count == manifest.count
