"""A writer killed (SIGKILL) in the middle of a checkpoint never leaves an unloadable index."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from retrieval.index import FaissIndex, read_manifest

ROOT = Path(__file__).resolve().parent.parent

# Adds vectors and checkpoints as fast as it can; each file is tens of MB, so a kill
# lands inside a write most of the time.
WRITER = """
import sys
from pathlib import Path
import numpy as np
from retrieval.index import FaissIndex, IndexUnusable
directory = Path(sys.argv[1])
try:
    index = FaissIndex.load(directory, model_id="m", dimension=64)
except IndexUnusable:
    index = FaissIndex(64, "m")
rng = np.random.default_rng()
while True:
    start = int(index.ids().max()) + 1 if index.count else 0
    index.add(np.arange(start, start + 20_000, dtype=np.int64),
              rng.normal(size=(20_000, 64)).astype(np.float32))
    index.save(directory)
    print(index.count, flush=True)
"""


def test_index_loads_after_the_writer_is_killed_mid_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    rng = np.random.default_rng(3)
    counts: list[int] = []
    for _ in range(6):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(directory)],
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
        index = FaissIndex.load(directory, model_id="m", dimension=64)  # never torn
        assert index.count == manifest.count
        counts.append(index.count)
        # Leftovers of the interrupted write (a temp file, at most one staged file) only.
        assert len(list(directory.glob("chunks*.faiss"))) <= 2
    assert counts == sorted(set(counts))  # each run's checkpoints were kept
