"""Blue/green reindex: a new model's index is built beside the live one, then switched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from retrieval.embedder import HashingEmbedder, Vectors
from retrieval.index import FaissIndex
from retrieval.index_files import index_file, read_manifest
from retrieval.reindex import reindex
from retrieval.vector_sync import open_index
from tests.retrieval_kit import Kit, make_kit

ROOT = Path(__file__).resolve().parent.parent


def ingested(root: Path) -> tuple[Kit, FaissIndex]:
    kit = make_kit(root)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    kit.ingest(
        worker,
        (
            (f"{n}.md", f"# Topic {n}\n\nThe desk for form {n * 17} is on floor {n}.")
            for n in range(6)
        ),
    )
    index.save(kit.index_dir)
    return kit, index


class StopsAfter(HashingEmbedder):
    """A new model that is interrupted (Ctrl-C) after ``calls`` batches."""

    def __init__(self, calls: int):
        super().__init__(dimension=128)
        self.calls = calls

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        if len(self.history) == self.calls:
            raise KeyboardInterrupt
        return super().embed_batch(texts)


def test_reindex_switches_to_the_new_model_only_when_complete(tmp_path: Path) -> None:
    kit, live = ingested(tmp_path)
    old_file, old_model = index_file(kit.index_dir), kit.embedder.model_id
    chunks = live.count

    interrupted = StopsAfter(calls=2)
    with pytest.raises(KeyboardInterrupt):
        reindex(kit.store, interrupted, kit.index_dir, batch=2)
    # Nothing switched: the live index and SQLite still belong to the old model.
    assert index_file(kit.index_dir) == old_file
    assert FaissIndex.load(kit.index_dir, model_id=old_model, dimension=256).count == chunks
    assert len(kit.store.embedded_chunk_ids(old_model)) == chunks

    seen: list[tuple[int, int]] = []
    resumed = StopsAfter(calls=-1)  # the same model, not interrupted this time
    index, report = reindex(
        kit.store, resumed, kit.index_dir, batch=2, progress=lambda *p: seen.append(p)
    )
    assert seen[-1] == (chunks, chunks)
    assert (report.chunks, report.reused, report.embedded) == (chunks, 4, chunks - 4)
    assert read_manifest(kit.index_dir).model_id == resumed.model_id == index.model_id
    assert not old_file.exists()
    assert len(kit.store.embedded_chunk_ids(resumed.model_id)) == chunks
    # The next start finds the index level with SQLite: nothing to rebuild or re-embed.
    reopened, sync = open_index(kit.index_dir, kit.store, model_id=resumed.model_id, dimension=128)
    assert sync.loaded_from_disk and not sync.changed and reopened.count == chunks
    assert kit.store.requeue_without_vectors(resumed.model_id) == 0
    query = resumed.embed_batch(["desk for form 51"])[0]
    top = kit.store.chunk(reopened.search(query, 1)[0][0])
    assert top is not None and "form 51" in top.text


def test_reindex_command(tmp_path: Path) -> None:
    kit, live = ingested(tmp_path / "data")
    kit.db.close()
    env = {**os.environ, "RAGDESK_EMBEDDER_BACKEND": "fake"}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "reindex", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"embedded {live.count}/{live.count} passages" in result.stderr
    assert f'"passages": {live.count}' in result.stdout
    assert f'"from_cache": {live.count}' in result.stdout  # same model: nothing embedded
    after = FaissIndex.load(tmp_path / "data" / "index", model_id="hashing-256", dimension=256)
    assert np.array_equal(np.sort(after.ids()), np.sort(live.ids()))


# ``ragdesk reindex`` to a new 128-dimension model whose second batch blocks (until SIGTERM)
# when RAGDESK_TEST_HOLD is set, so the signal lands mid-way however fast the machine is.
HELD_REINDEX = """
import os, sys, time
from retrieval.embedder import HashingEmbedder
import app.documents.reindex_command as command

class Held(HashingEmbedder):
    def embed_batch(self, texts):
        if self.history and os.environ.get("RAGDESK_TEST_HOLD"):
            print("held", file=sys.stderr, flush=True)
            time.sleep(3600)
        return super().embed_batch(texts)

command.build_embedder = lambda settings: Held(dimension=128)
from app.cli import main
main(sys.argv[1:])
"""


def test_sigterm_during_reindex_exits_130_keeps_the_live_index_and_the_rerun_resumes(
    tmp_path: Path,
) -> None:
    """#30 item 3: interrupted, the command says so and exits 130 (not 0: the new index is
    not built); the live index is untouched; the next run reuses the vectors computed."""
    kit, live = ingested(tmp_path / "data")
    kit.db.close()
    command = [sys.executable, "-c", HELD_REINDEX, "reindex", "--batch", "2"]
    command += ["--data-dir", str(tmp_path / "data")]
    env = {**os.environ, "RAGDESK_EMBEDDER_BACKEND": "fake", "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(
        command, cwd=ROOT, env={**env, "RAGDESK_TEST_HOLD": "1"}, stderr=subprocess.PIPE, text=True
    )
    assert first.stderr is not None
    for line in first.stderr:
        if line.strip() == "held":
            first.send_signal(signal.SIGTERM)
            break
    _, errors = first.communicate(timeout=60)
    assert first.returncode == 130
    assert "interrupted: the live index is unchanged" in errors
    assert read_manifest(tmp_path / "data" / "index").model_id == "hashing-256"

    second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert '"model_id": "hashing-128"' in second.stdout
    assert '"from_cache": 2' in second.stdout  # the interrupted run's first batch
    after = FaissIndex.load(tmp_path / "data" / "index", model_id="hashing-128", dimension=128)
    assert np.array_equal(np.sort(after.ids()), np.sort(live.ids()))
