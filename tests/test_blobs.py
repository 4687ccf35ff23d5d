"""Where uploaded originals live (``RAGDESK_BLOB_URL``): a directory (the data directory's,
or a volume several servers share) and an S3 bucket (a real S3 server, moto in server
mode, on 127.0.0.1). Writes are whole, same-content writers all succeed, a shared store
is swept with a grace period, and a bucket out of reach is a 503 with ``Retry-After`` and
a reason in readiness, never a 500, a hang or a secret in the log or a response."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from app.config.originals import open_originals
from app.config.settings import Settings
from retrieval import blobs, ingest, s3_blobs
from retrieval.blobs import BlobsUnavailable, Reachability
from retrieval.s3_blobs import S3Originals
from retrieval.types import DocumentStatus
from retrieval.uploads import UploadFiles, content_hash
from tests.conftest import (
    add_key,
    fake_settings,
    logs_captured,
    signed_in,
    upload,
    wait_for,
    wait_indexed,
)
from tests.documents import make_pdf
from tests.retrieval_kit import make_kit
from tests.server import free_port

ROOT = Path(__file__).resolve().parent.parent
KEY_ID = "AKIABLOBTEST00000001"
SECRET = "blob-s3cr3t/never+shown-anywhere-0001"
OLD = time.time() - 2 * 3600  # older than the sweep's grace


# --- a directory ------------------------------------------------------------------------


def test_a_save_is_whole_fsynced_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    files = UploadFiles(tmp_path / "uploads")
    name = files.save(b"the original")
    assert name == content_hash(b"the original")
    assert files.read(name) == b"the original" and files.exists(name)
    assert files.save(b"the original") == name  # identical content: stored once
    assert [p.name for p in (tmp_path / "uploads").rglob("*") if p.is_file()] == [name]
    assert list(files.names()) == [name]
    files.delete(name)
    files.delete(name)  # already gone: no error
    assert not files.exists(name)
    with pytest.raises(FileNotFoundError):
        files.read(name)
    with pytest.raises(ValueError):
        files.path("../../etc/passwd")


SAVER = """
import sys, time
from pathlib import Path
from retrieval.uploads import UploadFiles

files = UploadFiles(Path(sys.argv[1]), shared=sys.argv[3] == "shared")
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
for i in range(40):
    print(files.save(b"the same content %d" % i))
"""


@pytest.mark.parametrize("mode", ["shared", "own"])
def test_processes_saving_the_same_content_at_once_all_succeed(tmp_path: Path, mode: str) -> None:
    """Each writer its own temporary file, renamed into place: the same name, the same
    bytes, however the writes interleave (new ``<xx>`` directories made at once too)."""
    directory, go = tmp_path / "shared", tmp_path / "go"
    savers = [
        subprocess.Popen(
            [sys.executable, "-c", SAVER, str(directory), str(go), mode],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    time.sleep(0.5)  # all started and waiting
    go.touch()
    outputs = [saver.communicate(timeout=60) for saver in savers]
    assert [saver.returncode for saver in savers] == [0] * 6, [err for _, err in outputs]
    expected = [content_hash(b"the same content %d" % i) for i in range(40)]
    assert all(out.split() == expected for out, _ in outputs)
    files = UploadFiles(directory)
    assert sorted(files.names()) == sorted(expected)
    assert all(files.read(name) == b"the same content %d" % i for i, name in enumerate(expected))
    assert not [p for p in directory.rglob("*.tmp")]


def test_threads_saving_the_same_content_at_once_all_succeed(tmp_path: Path) -> None:
    files = UploadFiles(tmp_path / "uploads", shared=True)
    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda _: files.save(b"one content"), range(32)))
    assert set(names) == {content_hash(b"one content")}
    assert files.read(names[0]) == b"one content"


def _leftovers(files: UploadFiles) -> tuple[str, str, Path]:
    """A named original, an unnamed one and a write's temporary file."""
    kept, orphan = files.save(b"named by a row"), files.save(b"named by no row")
    temp = files.path(orphan).parent / f".{orphan}.x1y2z3w4.tmp"
    temp.write_bytes(b"half")
    return kept, orphan, temp


def test_the_own_directory_is_swept_of_every_leftover(tmp_path: Path) -> None:
    files = UploadFiles(tmp_path / "uploads")
    kept, orphan, temp = _leftovers(files)
    assert sorted(files.sweep({kept})) == sorted([files.path(orphan), temp])
    assert list(files.names()) == [kept]


def test_a_shared_directory_is_swept_only_of_what_is_older_than_the_grace(
    tmp_path: Path,
) -> None:
    """Another server may be between its file and its row: young leftovers stay."""
    files = UploadFiles(tmp_path / "shared", shared=True)
    kept, orphan, temp = _leftovers(files)
    assert files.sweep({kept}) == []
    os.utime(files.path(kept), (OLD, OLD))
    os.utime(files.path(orphan), (OLD, OLD))
    os.utime(temp, (OLD, OLD))
    assert sorted(files.sweep({kept})) == sorted([files.path(orphan), temp])
    assert files.exists(kept)
    # Saving content already there makes it young again (its row is on its way).
    os.utime(files.path(kept), (OLD, OLD))
    files.save(b"named by a row")
    assert files.sweep(set()) == []


def test_a_shared_directory_that_goes_away_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blobs, "CHECK_EVERY_S", 0.0)
    files = UploadFiles(tmp_path / "shared", shared=True)
    files.save(b"an original")
    time.sleep(0.2)
    assert files.problem() is None
    shutil.rmtree(tmp_path / "shared")  # the volume unmounted
    assert "is not there" in wait_for(files.problem)
    assert UploadFiles(tmp_path / "own").problem() is None  # the data directory's: no check


def test_readiness_never_waits_for_a_slow_check() -> None:
    release = threading.Event()
    reachability = Reachability("s3://slow/", lambda: release.wait(5) and None, str, slow_s=0.2)
    started = time.monotonic()
    assert reachability.problem() is None  # the check runs on its own thread
    assert time.monotonic() - started < 0.1
    assert "did not answer within" in wait_for(reachability.problem, timeout=5)
    release.set()
    reachability.every_s = 0
    wait_for(lambda: reachability.problem() is None, timeout=5)


def test_documents_whose_original_is_out_of_reach_wait_in_the_queue_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "DISK_RETRY_S", 0.2)
    kit = make_kit(tmp_path)
    worker = kit.worker(kit.open_index()[0], checkpoint_seconds=0.1)  # wakes to retry
    read, tries = kit.library.files.read, []

    def flaky(stored_name: str) -> bytes:
        tries.append(stored_name)
        if len(tries) <= 2:  # the bucket is out of reach for the first two tries
            raise BlobsUnavailable("reading an original in s3://b/ failed: EndpointConnectionError")
        return read(stored_name)

    monkeypatch.setattr(kit.library.files, "read", flaky)
    document, _ = kit.library.submit(
        data=b"Parking costs 4 euros.", filename="a.txt", collection_id=1
    )
    kit.library.attach_worker(worker)
    try:
        wait_for(lambda: kit.store.get_document(document.id).status.is_terminal)  # type: ignore[union-attr]
    finally:
        worker.stop()
    assert len(tries) == 3
    assert kit.store.get_document(document.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]


def test_blob_url_names_the_store(tmp_path: Path) -> None:
    own = open_originals(Settings(data_dir=tmp_path / "data"))
    assert isinstance(own, UploadFiles) and not own.shared
    assert own.directory == tmp_path / "data" / "uploads"
    shared = open_originals(Settings(blob_url=f"file://{tmp_path}/originals"))
    assert isinstance(shared, UploadFiles) and shared.shared
    assert shared.directory == tmp_path / "originals"
    bucket = open_originals(
        Settings(
            blob_url="s3://bucket/some/prefix/",
            blob_endpoint_url="http://minio:9000",
            blob_access_key_id=KEY_ID,
            blob_secret_access_key=SECRET,
        )
    )
    assert isinstance(bucket, S3Originals) and bucket.where == "s3://bucket/some/prefix/"
    assert SECRET not in repr(bucket) and KEY_ID not in repr(bucket)
    with pytest.raises(ValueError, match="blob_url"):
        Settings(blob_url="relative/dir")
    with pytest.raises(ValueError, match="go together"):
        Settings(blob_url="s3://bucket", blob_access_key_id=KEY_ID)
    assert SECRET not in repr(Settings(blob_secret_access_key=SECRET, blob_access_key_id=KEY_ID))


# --- an S3 bucket -----------------------------------------------------------------------


def bucket_store(bucket: Any, s3_url: str, **kwargs: Any) -> S3Originals:
    return S3Originals(
        bucket.name,
        "originals",
        endpoint_url=s3_url,
        access_key_id=KEY_ID,
        secret_access_key=SECRET,
        **kwargs,
    )


def keys(bucket: Any) -> list[str]:
    return sorted(o.key for o in bucket.objects.all())


def test_a_bucket_keeps_originals_under_its_prefix(bucket: Any, s3_url: str) -> None:
    files = bucket_store(bucket, s3_url)
    name = files.save(b"the original")
    assert keys(bucket) == [f"originals/{name[:2]}/{name}"]
    assert files.read(name) == b"the original" and files.exists(name)
    bucket.put_object(Key="originals/notes.txt", Body=b"not an original")
    bucket.put_object(Key="elsewhere/" + name[:2] + "/" + name, Body=b"outside the prefix")
    assert list(files.names()) == [name]
    files.delete(name)
    files.delete(name)  # already gone: no error
    assert not files.exists(name)
    with pytest.raises(FileNotFoundError):
        files.read(name)
    assert files.problem() is None or wait_for(lambda: files.problem() is None)


def test_threads_putting_the_same_content_at_once_all_succeed(bucket: Any, s3_url: str) -> None:
    files = bucket_store(bucket, s3_url)
    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda _: files.save(b"one content"), range(16)))
    assert set(names) == {content_hash(b"one content")}
    assert files.read(names[0]) == b"one content"


def test_a_bucket_is_swept_only_of_unnamed_originals_older_than_the_grace(
    bucket: Any, s3_url: str
) -> None:
    files = bucket_store(bucket, s3_url)
    kept, orphan = files.save(b"named by a row"), files.save(b"named by no row")
    bucket.put_object(Key="originals/stray.bin", Body=b"not ours")
    assert files.sweep({kept}) == []  # young: maybe another server's upload in progress
    aged = bucket_store(bucket, s3_url, grace_s=-60)  # as if an hour and more had passed
    assert [str(p) for p in aged.sweep({kept})] == [f"originals/{orphan[:2]}/{orphan}"]
    assert sorted(aged.names()) == [kept] and "originals/stray.bin" in keys(bucket)


def test_a_silent_bucket_is_a_clear_error_within_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Connected, never answered: the read timeout ends it, and readiness says so."""
    monkeypatch.setattr(s3_blobs, "READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(s3_blobs, "PROBE_TIMEOUT_S", 0.5)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel accepts connections; nobody ever answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        files = S3Originals(
            "bucket", endpoint_url=url, access_key_id=KEY_ID, secret_access_key=SECRET
        )
        started = time.monotonic()
        with pytest.raises(BlobsUnavailable, match=r"(?i)timeout") as raised:
            files.save(b"never stored")
        assert time.monotonic() - started < 10
        assert SECRET not in str(raised.value) and KEY_ID not in str(raised.value)
        assert "storing an original in s3://bucket/" in wait_for(files.problem)


# --- through the app --------------------------------------------------------------------


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` at DEBUG, also once the app has replaced the root logger's handlers
    (Litestar's logging config, at start): held by our loggers and boto's themselves."""
    with logs_captured(caplog, "app", "retrieval", "botocore", "boto3", "urllib3"):
        yield caplog


def bucket_settings(data_dir: Path, bucket_name: str, endpoint: str) -> Settings:
    return fake_settings(
        data_dir,
        blob_url=f"s3://{bucket_name}/library",
        blob_endpoint_url=endpoint,
        blob_access_key_id=KEY_ID,
        blob_secret_access_key=SECRET,
    )


def test_an_upload_lands_in_the_bucket_and_is_read_back_from_it(
    tmp_path: Path, bucket: Any, s3_url: str, logged: pytest.LogCaptureFixture
) -> None:
    pdf = make_pdf(["The zebrafish canteen opens at noon.", "Parking costs 4 euros a day."])
    with signed_in(bucket_settings(tmp_path / "data", bucket.name, s3_url)) as client:
        wait_for(lambda: client.get("/health/ready").status_code == 200)
        created = upload(client, ("canteen.pdf", pdf))
        assert created.status_code == 201, created.text
        document = created.json()["documents"][0]
        name = content_hash(pdf)
        assert keys(bucket) == [f"library/{name[:2]}/{name}"]
        assert not [p for p in (tmp_path / "data" / "uploads").rglob("*") if p.is_file()]
        assert wait_indexed(client, document["id"])["status"] == "indexed"  # parsed from S3
        download = client.get(f"/api/documents/{document['id']}/download")
        assert download.status_code == 200 and download.content == pdf
        assert client.get(f"/documents/{document['id']}/original").content == pdf
        image = client.get(f"/documents/{document['id']}/pages/2/image")
        assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
        # The bucket goes out of reach: the viewer's reads are 503s too, not 500s or 404s.
        files = client.app.state.services.library.files
        reachable = files.endpoint_url
        files.endpoint_url, files._clients = f"http://127.0.0.1:{free_port()}", {}
        for path in ("/api/documents/{}/download", "/documents/{}/pages/1/image"):
            gone = client.get(path.format(document["id"]))
            assert gone.status_code == 503 and "retry-after" in gone.headers, path
            assert SECRET not in gone.text and KEY_ID not in gone.text
        files.endpoint_url, files._clients = reachable, {}
        assert client.delete(f"/api/documents/{document['id']}").status_code == 204
        assert keys(bucket) == []
        metrics = client.get("/metrics", headers={"Authorization": f"Bearer {add_key(client)}"})
        assert metrics.status_code == 200 and SECRET not in metrics.text
    assert "indexed document" in logged.text  # the log was captured
    assert SECRET not in logged.text and KEY_ID not in logged.text


def test_a_bucket_out_of_reach_is_a_503_with_retry_after_and_readiness_says_why(
    tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with signed_in(bucket_settings(tmp_path / "data", "gone", closed)) as client:
        started = time.monotonic()
        refused = upload(client, ("notes.md", b"# Notes\n\nThe okapi parking is behind."))
        assert time.monotonic() - started < 10
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) > 0
        assert "storage of uploaded files cannot be reached" in refused.json()["error"]["detail"]
        for text in (refused.text, str(refused.headers)):
            assert SECRET not in text and KEY_ID not in text and closed not in text
        dialog = client.post(
            "/ui/documents",
            files=[("file", ("notes.md", b"# Notes\n\nThe okapi parking is behind."))],
            headers={"HX-Request": "true"},
        )
        assert dialog.status_code == 503 and "retry-after" in dialog.headers
        assert "cannot be reached" in dialog.text and SECRET not in dialog.text
        assert client.app.state.services.store.stored_names() == set()  # nothing kept

        admin = client.get("/health/ready")  # an admin's session: the reason itself
        assert admin.status_code == 503 and "retry-after" in admin.headers
        assert "s3://gone/library/" in admin.json()["detail"]
        assert SECRET not in admin.text and KEY_ID not in admin.text
        client.cookies.clear()
        anyone = client.get("/health/ready")  # fixed words for anyone else
        assert anyone.status_code == 503
        assert anyone.json()["detail"] == "the storage of uploaded files cannot be reached"
    told = [r.getMessage() for r in logged.records if "cannot be used" in r.getMessage()]
    assert told and "s3://gone/library/" in told[0]  # in the log, with the reason
    assert SECRET not in logged.text and KEY_ID not in logged.text
