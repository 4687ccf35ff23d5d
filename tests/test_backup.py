"""``ragdesk backup`` and ``ragdesk restore`` (app/ops/backup.py, app/ops/restore.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from app.factory import create_app
from app.ops.backup import BACKUP_MANIFEST, BackupError, take_backup
from app.ops.restore import RestoreRefused, restore
from retrieval.index_files import read_manifest, verify
from tests.conftest import add_key, add_user, fake_settings, upload, wait_for, wait_indexed
from tests.pg_kit import store_under_test
from tests.server import REPO, ServerProcess, http

# ``ragdesk backup`` copies a SQLite data directory; on PostgreSQL it refuses (the last test).
sqlite_only = pytest.mark.skipif(
    store_under_test() == "postgresql",
    reason="backs up SQLite files: on PostgreSQL ragdesk backup refuses (pg_dump instead)",
)

# Each topic has a word no other document has: a search for it has one lexical match.
TOPICS = ["zorblax", "quintaphor", "mellivane", "drupelkin", "saffrowen", "tarnquill"]


def topic_document(word: str) -> bytes:
    return (
        f"# The {word} policy\n\nEvery {word} request goes to the {word} desk, which answers "
        f"within two days. Staff who handle {word} keep a written record."
    ).encode()


def bulk_document(i: int) -> bytes:
    return f"# Memo {i}\n\nBulkterm{i} inventory lists crates of bulkitem{i} stock.".encode()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory with a few indexed documents, a checkpoint and a conversation."""
    directory = tmp_path_factory.mktemp("backup-source") / "data"
    with TestClient(create_app(fake_settings(directory))) as client:
        client.app.state.services.wait_until_loaded(30)
        add_user(client, "tester", "admin")
        headers = {"Authorization": f"Bearer {add_key(client)}"}
        client.headers.update(headers)
        created = upload(client, *[(f"{w}.md", topic_document(w)) for w in TOPICS]).json()
        for document in created["documents"]:
            assert wait_indexed(client, document["id"])["status"] == "indexed"
        assert client.post("/api/chat", json={"message": "Who answers zorblax?"}).is_success
        index_dir = directory / "index"
        wait_for(lambda: (index_dir / "manifest.json").exists() and read_manifest(index_dir).count)
    return directory


@sqlite_only
def test_a_backup_restores_file_for_file(data_dir: Path, tmp_path: Path) -> None:
    manifest = take_backup(data_dir, tmp_path / "backup")
    paths = [file.path for file in manifest.files]
    assert "ragdesk.db" in paths and "index/manifest.json" in paths
    assert len([p for p in paths if p.startswith("uploads/")]) == len(TOPICS)
    assert len([p for p in paths if p.startswith("index/chunks")]) >= 1
    listed = json.loads((tmp_path / "backup" / BACKUP_MANIFEST).read_text())
    assert [f["path"] for f in listed["files"]] == paths
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in listed["files"])

    assert restore(tmp_path / "backup", tmp_path / "restored") == len(paths)
    restored = tmp_path / "restored"
    index = read_manifest(restored / "index")
    verify(restored / "index", index)  # the checkpoint is whole
    assert not list(tmp_path.glob(".restored.restoring-*"))  # the staging dir became it


@sqlite_only
def test_a_flipped_byte_anywhere_is_refused(data_dir: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    manifest = take_backup(data_dir, backup)
    for file in manifest.files:
        if not file.path.startswith(("ragdesk.db", "uploads/", "index/chunks")):
            continue
        path = backup / file.path
        original = path.read_bytes()
        damaged = bytearray(original)
        damaged[len(damaged) // 2] ^= 0x01
        path.write_bytes(bytes(damaged))
        with pytest.raises(RestoreRefused, match=f"damaged: {file.path} does not match"):
            restore(backup, tmp_path / "restored")
        assert not (tmp_path / "restored").exists()
        path.write_bytes(original)
    (backup / manifest.files[-1].path).unlink()
    with pytest.raises(RestoreRefused, match="is missing"):
        restore(backup, tmp_path / "restored")
    assert not list(tmp_path.glob(".restored.*"))  # nothing half-restored is left


@sqlite_only
def test_the_cli_refuses_a_damaged_backup_with_status_1(data_dir: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    assert run_cli("backup", str(backup), "--data-dir", str(data_dir)).returncode == 0
    database = backup / "ragdesk.db"
    data = bytearray(database.read_bytes())
    data[-100] ^= 0xFF
    database.write_bytes(bytes(data))
    refused = run_cli("restore", str(backup), "--data-dir", str(tmp_path / "restored"))
    assert refused.returncode == 1
    assert "the backup is damaged: ragdesk.db does not match its manifest" in refused.stderr


@sqlite_only
def test_restore_and_backup_refuse_a_directory_that_is_not_empty(
    data_dir: Path, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    take_backup(data_dir, backup)
    target = tmp_path / "target"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(RestoreRefused, match="is not empty"):
        restore(backup, target)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    refused = run_cli("restore", str(backup), "--data-dir", str(target))
    assert refused.returncode == 1 and "is not empty" in refused.stderr
    with pytest.raises(BackupError, match="is not empty"):
        take_backup(data_dir, target)
    (tmp_path / "empty").mkdir()
    assert restore(backup, tmp_path / "empty") > 0  # an empty directory is fine


# The backup on a slow disk (each fsync takes 0.2 s), so that a kill lands mid-way.
SLOW_BACKUP = (
    "import os, sys, time\n"
    "_fsync = os.fsync\n"
    "os.fsync = lambda fd: (time.sleep(0.2), _fsync(fd))[1]\n"
    "from app.cli import main\n"
    "main(['backup', sys.argv[1], '--data-dir', sys.argv[2]])\n"
)


@sqlite_only
def test_a_backup_killed_mid_way_is_refused_by_restore(data_dir: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_BACKUP, str(backup), str(data_dir)], cwd=REPO
    )
    wait_for(lambda: (backup / "ragdesk.db").exists(), timeout=30, interval=0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait(10) == -signal.SIGKILL
    assert any(backup.rglob("*")) and not (backup / BACKUP_MANIFEST).exists()
    refused = run_cli("restore", str(backup), "--data-dir", str(tmp_path / "restored"))
    assert refused.returncode == 1
    assert "is not a complete backup: it has no backup-manifest.json" in refused.stderr
    assert not (tmp_path / "restored").exists()


@sqlite_only
def test_sigterm_during_a_backup_exits_130_and_leaves_no_half_written_file(
    data_dir: Path, tmp_path: Path
) -> None:
    """#30 item 3: the backup is held reading an "original" that is a FIFO the test writes
    nothing to, so SIGTERM lands mid-copy however fast the machine is."""
    source = tmp_path / "data"
    shutil.copytree(data_dir, source)
    fifo = source / "uploads" / "ff" / ("f" * 64)  # globbed last, after the real originals
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    backup = tmp_path / "backup"
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "backup", str(backup), "--data-dir", str(source)],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Opening the write end succeeds once the backup has the FIFO open for reading; held
    # open and never written, it keeps the backup blocked in read().
    writer = wait_for(lambda: _open_writer(fifo), timeout=60, interval=0.05)
    try:
        wait_for(lambda: any(backup.rglob("*.partial")), timeout=30, interval=0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 130
    finally:
        os.close(writer)
    assert process.stderr is not None
    assert f"interrupted; {backup} is incomplete" in process.stderr.read()
    assert not list(backup.rglob("*.partial")) and not (backup / BACKUP_MANIFEST).exists()
    refused = run_cli("restore", str(backup), "--data-dir", str(tmp_path / "restored"))
    assert refused.returncode == 1 and not (tmp_path / "restored").exists()
    fifo.unlink()
    again = run_cli("backup", str(tmp_path / "again"), "--data-dir", str(source))
    assert again.returncode == 0, again.stderr


def _open_writer(fifo: Path) -> int | None:
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: nobody has it open for reading yet
        return None


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=REPO, capture_output=True, text=True
    )


# --- online: a running server, ingesting and answering ------------------------------------


def search_all(url: str, key: str) -> list[list[tuple[int, str, float]]]:
    """Each topic's hits: (chunk id, text, score)."""
    results = []
    for word in TOPICS:
        response = http.post(
            f"{url}/api/search",
            json={"query": f"who handles {word} requests", "k": 4},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert response.status_code == 200, response.text
        hits = response.json()["hits"]
        results.append([(h["chunk_id"], h["text"], h["score"]) for h in hits])
    return results


@sqlite_only
def test_a_backup_taken_while_ingesting_and_chatting_restores_the_same_hits(
    tmp_path: Path,
) -> None:
    source = ServerProcess(
        tmp_path / "data",
        tmp_path / "server.log",
        embedder_backend="fake",
        generator_backend="fake",
        fake_token_delay_s=0.05,
        index_checkpoint_seconds=0.2,
    ).start(ready_timeout=60)
    restored: ServerProcess | None = None
    try:
        url = source.url
        created = http.post(
            f"{url}/api/documents",
            files=[("file", (f"{w}.md", topic_document(w))) for w in TOPICS],
        ).json()["documents"]
        wait_for(lambda: all(_status(url, d["id"]) == "indexed" for d in created), timeout=60)
        # A key that reads the default collection only: the bulk upload below goes to
        # another one, so searches through it do not depend on how far that one has got.
        scoped = http.post(
            f"{url}/api/keys",
            json={"user": source.username, "name": "scoped", "collections": ["default"]},
        ).json()["key"]
        assert http.post(f"{url}/api/collections", json={"name": "bulk"}).status_code == 201

        uploading = threading.Event()
        backed_up = threading.Event()
        uploaded: list[int] = []

        def bulk() -> None:  # uploads go on until the backup is done, however fast it is
            start = 0
            while not backed_up.is_set() and start < 1000:
                files = [("file", (f"m{i}.md", bulk_document(i))) for i in range(start, start + 10)]
                assert http.post(f"{url}/api/documents?collection=bulk", files=files).is_success
                start += 10
                uploading.set()
            uploaded.append(start)

        def chat() -> None:
            with http.stream("POST", f"{url}/api/chat", json={"message": "zorblax?"}) as r:
                assert r.status_code == 200 and "event: done" in r.read().decode()

        workers = [threading.Thread(target=bulk), threading.Thread(target=chat)]
        for worker in workers:
            worker.start()
        assert uploading.wait(30)  # ingestion under way
        backup = run_cli("backup", str(tmp_path / "backup"), "--data-dir", str(source.data_dir))
        backed_up.set()
        assert backup.returncode == 0, backup.stderr
        for worker in workers:
            worker.join(60)
        before = search_all(url, scoped)
        assert all(hits for hits in before)
        source.stop()

        done = run_cli("restore", str(tmp_path / "backup"), "--data-dir", str(tmp_path / "new"))
        assert done.returncode == 0, done.stderr
        restored = ServerProcess(
            tmp_path / "new",
            tmp_path / "restored.log",
            embedder_backend="fake",
            generator_backend="fake",
        ).start(ready_timeout=60)
        assert search_all(restored.url, scoped) == before
        # The snapshot is consistent: each bulk memo it has as indexed is found by its word.
        documents = http.get(f"{restored.url}/api/documents").json()["documents"]
        memos = [d for d in documents if re.fullmatch(r"m\d+\.md", d["filename"])]
        indexed = [memo for memo in memos if memo["status"] == "indexed"]
        assert memos and len(indexed) < uploaded[0], "the backup was taken mid-ingestion"
        for memo in memos:
            if memo["status"] == "indexed":
                i = memo["filename"][1:-3]
                hits = http.post(
                    f"{restored.url}/api/search", json={"query": f"bulkterm{i}", "k": 1}
                ).json()["hits"]
                assert hits and hits[0]["document_id"] == memo["id"], (memo, hits)
        # Every document the snapshot has, has its original: the unfinished ones resume.
        wait_for(
            lambda: all(_status(restored.url, memo["id"]) == "indexed" for memo in memos),
            timeout=120,
            interval=0.5,
        )
        conversations = http.get(f"{restored.url}/api/conversations").json()
        assert conversations, "the chat before the backup is in it"
    finally:
        source.stop()
        if restored is not None:
            restored.stop()


def _status(url: str, document_id: int) -> Any:
    return http.get(f"{url}/api/documents/{document_id}").json()["status"]


# --- PostgreSQL: refused, with what to do instead ------------------------------------------

SECRET = "pw-B7mQx2"  # the database URL's password: never shown


def test_on_postgresql_the_backup_refuses_and_says_to_use_pg_dump(tmp_path: Path) -> None:
    url = f"postgresql://ragdesk:{SECRET}@db.internal:5432/ragdesk"
    env = {**os.environ, "RAGDESK_DATABASE_URL": url, "RAGDESK_BLOB_URL": "s3://originals/rd"}
    backup = tmp_path / "backup"
    refused = subprocess.run(
        [sys.executable, "-m", "app.cli", "backup", str(backup), "--data-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )
    assert refused.returncode == 1, refused.stderr
    told = refused.stderr
    assert told.startswith("ragdesk backup: this installation keeps its database in PostgreSQL")
    assert "pg_dump" in told and "RAGDESK_BLOB_URL (s3://originals/rd)" in told
    assert SECRET not in told + refused.stdout and "db.internal" not in told
    assert not backup.exists()  # nothing was written

    settings = fake_settings(tmp_path / "data", database_url=url)  # originals: the data dir
    with pytest.raises(BackupError, match="pg_dump") as raised:
        take_backup(tmp_path / "data", backup, settings=settings)
    assert f"live in {tmp_path / 'data' / 'uploads'} (RAGDESK_BLOB_URL is unset)" in str(
        raised.value
    )
    assert SECRET not in str(raised.value) and not backup.exists()
