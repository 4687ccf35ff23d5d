"""``ragdesk ingest``: files and directories into a collection, resumable after a kill."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.migrations import open_database
from retrieval.bulk import BulkIngest, find_files
from retrieval.index import FaissIndex
from retrieval.store import DocumentStore
from retrieval.types import DocumentStatus
from tests.conftest import fake_settings
from tests.retrieval_kit import make_kit

ROOT = Path(__file__).resolve().parent.parent


def make_tree(root: Path, files: int) -> Path:
    docs = root / "docs"
    (docs / "nested" / "deeper").mkdir(parents=True)
    (docs / ".git").mkdir()
    (docs / ".git" / "config.txt").write_text("hidden, never ingested")
    (docs / "picture.gif").write_bytes(b"GIF89a\x01\x00\x01\x00")
    for n in range(files):
        folder = docs if n % 3 == 0 else docs / "nested" if n % 3 == 1 else docs / "nested/deeper"
        (folder / f"note-{n:03d}.md").write_text(
            f"# Note {n}\n\nPolicy number {n} covers topic {n * 7} in some detail.\n"
        )
    return docs


def test_directories_are_walked_for_supported_files_only(tmp_path: Path) -> None:
    docs = make_tree(tmp_path, 4)
    found = dict(find_files([docs, tmp_path / "nowhere"]))
    assert found[docs / "picture.gif"] == "unsupported type"
    assert found[tmp_path / "nowhere"] == "no such file or directory"
    assert sorted(p.name for p, reason in found.items() if reason is None) == [
        f"note-{n:03d}.md" for n in range(4)
    ]
    assert not any(".git" in p.parts for p in found)


def test_bulk_ingest_reports_each_file_and_skips_what_is_indexed(tmp_path: Path) -> None:
    kit = make_kit(tmp_path / "data")
    docs = make_tree(tmp_path, 5)
    (docs / "empty.txt").write_text("")
    (docs / "fake.pdf").write_bytes(b"not a pdf at all")
    index, _ = kit.open_index()
    events: list[tuple[str, str]] = []
    bulk = BulkIngest(
        kit.library,
        kit.worker(index),
        kit.collection_id,
        batch_documents=2,
        listener=lambda path, outcome, _: events.append((path.name, outcome)),
    )
    summary = bulk.run([docs])
    assert (summary.files, summary.indexed, summary.already_indexed) == (6, 5, 0)
    assert [p.name for p, _ in summary.failed] == ["empty.txt"]
    assert sorted(p.name for p, _ in summary.skipped) == ["fake.pdf", "picture.gif"]
    for stage in ("queued", "parsed", "embedded", "indexed"):
        assert ("note-000.md", stage) in events
    assert index.count == summary.chunks > 0

    again = BulkIngest(kit.library, kit.worker(index), kit.collection_id).run([docs])
    assert (again.indexed, again.already_indexed, len(again.failed)) == (0, 5, 1)
    assert len(kit.store.list_documents()) == 6  # nothing was added twice


def read_summary(text: str) -> dict[str, int]:
    match = re.search(
        r"(\d+) files in collection 'handbook': (\d+) indexed \((\d+) chunks\), "
        r"(\d+) already indexed, (\d+) failed, (\d+) skipped",
        text,
    )
    assert match, text
    keys = ("files", "indexed", "chunks", "already", "failed", "skipped")
    return dict(zip(keys, map(int, match.groups()), strict=True))


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT delivered and handled by Python in the child, whatever the test process
    passes on: a background job's children inherit SIGINT ignored (Python then installs no
    handler), and a blocked signal mask is inherited too. In one full-suite run the child
    ran to the end through the SIGINT (exit 0); it never did when run alone."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_resumes_where_it_stopped(tmp_path: Path, sig: signal.Signals) -> None:
    files = 90
    docs = make_tree(tmp_path, files)
    data_dir = tmp_path / "data"
    env = {**os.environ, "RAGDESK_EMBEDDER_BACKEND": "fake", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "app.cli", "ingest", str(docs), "--collection", "handbook"]
    command += ["--data-dir", str(data_dir), "--batch", "2"]
    first = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    assert first.stderr is not None
    for line in first.stderr:  # stop it as soon as the first file is indexed
        if line.split()[:1] == ["indexed"]:
            first.send_signal(sig)
            break
    _, errors = first.communicate(timeout=60)
    if sig != signal.SIGKILL:  # Ctrl-C, or kill: the command's own clean-up ran
        assert first.returncode == 130 and "run the same command again" in errors
    else:
        assert first.returncode == -signal.SIGKILL

    second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    summary = read_summary(second.stdout)
    assert summary["files"] == files and summary["skipped"] == 1 and summary["failed"] == 0
    assert summary["already"] >= 1, "the first run indexed something"
    assert summary["indexed"] >= 1, "the first run was stopped before the end"
    assert summary["already"] + summary["indexed"] == files

    db = open_database(fake_settings(data_dir))  # the store the command used
    store = DocumentStore(db)
    documents = store.list_documents()
    assert len(documents) == files
    assert {d.status for d in documents} == {DocumentStatus.INDEXED}
    model_id = "hashing-256"
    embedded = sorted(store.embedded_chunk_ids(model_id).tolist())
    if db.dialect == "sqlite":  # FAISS's file (pgvector's index is over the rows themselves)
        index = FaissIndex.load(data_dir / "index", model_id=model_id, dimension=256)
        assert sorted(index.ids().tolist()) == embedded
    every = store.chunk_ids_in({d.collection_id for d in documents})
    assert embedded == sorted(every.tolist())  # every passage has its vector
    db.close()

    third = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert read_summary(third.stdout)["already"] == files
