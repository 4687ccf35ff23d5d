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

from app.migrations import open_database
from retrieval.embedder import HashingEmbedder, Vectors
from retrieval.index import FaissIndex, IdArray
from retrieval.index_files import index_file, read_manifest
from retrieval.reindex import reindex
from retrieval.store import DocumentStore
from retrieval.vector_sync import open_index
from tests.conftest import fake_settings
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
    faiss = kit.db.dialect == "sqlite"  # else pgvector: the embeddings rows are the index
    old_file = index_file(kit.index_dir) if faiss else None
    old_model = kit.embedder.model_id
    chunks = live.count

    interrupted = StopsAfter(calls=2)
    with pytest.raises(KeyboardInterrupt):
        reindex(kit.store, interrupted, kit.index_dir, batch=2)
    # Nothing switched: the live index and the database still belong to the old model.
    if faiss:
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
    assert resumed.model_id == index.model_id
    assert len(kit.store.embedded_chunk_ids(resumed.model_id)) == chunks
    reopened = index
    if faiss:
        assert read_manifest(kit.index_dir).model_id == resumed.model_id
        assert old_file is not None and not old_file.exists()
        # The next start finds the index level with SQLite: nothing to rebuild or re-embed.
        reopened, sync = open_index(
            kit.index_dir, kit.store, model_id=resumed.model_id, dimension=128
        )
        assert sync.loaded_from_disk and not sync.changed and reopened.count == chunks
    assert kit.store.requeue_without_vectors(resumed.model_id) == 0
    query = resumed.embed_batch(["desk for form 51"])[0]
    top = kit.store.chunk(reopened.search(query, 1)[0][0])
    assert top is not None and "form 51" in top.text


def command_env(kit: Kit, **more: str) -> dict[str, str]:
    """The environment of a ``ragdesk`` command on the kit's store: its SQLite file when
    it made one, whichever store the session runs on."""
    env = {**os.environ, "RAGDESK_EMBEDDER_BACKEND": "fake", **more}
    if kit.db.dialect == "sqlite":
        env.pop("RAGDESK_DATABASE_URL", None)
    return env


def searchable(kit: Kit, model_id: str, dimension: int) -> IdArray:
    """The passage ids a search by ``model_id`` finds now, sorted: in the live FAISS file,
    or on PostgreSQL in that model's embeddings rows (pgvector's index is over them)."""
    if kit.db.dialect == "sqlite":
        index = FaissIndex.load(kit.index_dir, model_id=model_id, dimension=dimension)
        return np.sort(index.ids())
    db = open_database(fake_settings(kit.root))
    try:
        return np.sort(DocumentStore(db).embedded_chunk_ids(model_id))
    finally:
        db.close()


def test_reindex_command(tmp_path: Path) -> None:
    kit, live = ingested(tmp_path / "data")
    live_ids = np.sort(live.ids())
    kit.db.close()
    env = command_env(kit)
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "reindex", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    count = len(live_ids)
    assert f"embedded {count}/{count} passages" in result.stderr
    assert f'"passages": {count}' in result.stdout
    assert f'"from_cache": {count}' in result.stdout  # same model: nothing embedded
    assert np.array_equal(searchable(kit, "hashing-256", 256), live_ids)


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
    live_ids = np.sort(live.ids())
    kit.db.close()
    command = [sys.executable, "-c", HELD_REINDEX, "reindex", "--batch", "2"]
    command += ["--data-dir", str(tmp_path / "data")]
    env = command_env(kit, PYTHONUNBUFFERED="1")
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
    if kit.db.dialect == "sqlite":
        assert read_manifest(tmp_path / "data" / "index").model_id == "hashing-256"
    assert np.array_equal(searchable(kit, "hashing-256", 256), live_ids)

    second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert '"model_id": "hashing-128"' in second.stdout
    assert '"from_cache": 2' in second.stdout  # the interrupted run's first batch
    assert np.array_equal(searchable(kit, "hashing-128", 128), live_ids)
