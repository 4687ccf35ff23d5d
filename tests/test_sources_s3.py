"""Synced sources from an S3-compatible bucket: a real S3 server (moto in server mode) on
127.0.0.1, driven through boto3 as any bucket would be. The same scenario as a directory,
keys with ``..`` refused, and credentials never in a response, a run or the log."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import botocore.credentials
import pytest
from litestar.testing import TestClient
from pydantic import SecretStr

from app.config.settings.ingest import SourceCredential
from app.sources.s3 import S3Reader
from tests.conftest import add_key, fake_settings, signed_in, upload, wait_for
from tests.test_sources import BINARY, counts, create, documents, found, sync

ACCESS_KEY_ID = "AKIARAGDESKTEST0001"
SECRET = "s3cr3t/never+shown-anywhere-0001"
TOKEN = "session-token-never-shown-0001"


@contextmanager
def admin_api(data_dir: Path, **settings: Any) -> Iterator[TestClient[Any]]:
    credentials = {
        "local": {
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET,
            "session_token": TOKEN,
        }
    }
    values = {"source_credentials": credentials, "sync_check_s": 0, **settings}
    with signed_in(fake_settings(data_dir, **values)) as client:
        wait_for(lambda: client.get("/health/ready").status_code == 200)
        client.cookies.clear()
        client.headers["Authorization"] = f"Bearer {add_key(client)}"
        yield client


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient[Any]]:
    with admin_api(tmp_path / "data") as client:
        yield client


def put(bucket: Any, files: dict[str, bytes | str]) -> None:
    for key, content in files.items():
        bucket.put_object(Key=key, Body=content.encode() if isinstance(content, str) else content)


def test_a_bucket_syncs_adds_changes_removes_and_leaves_hand_uploads(
    api: TestClient[Any], bucket: Any, s3_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    put(
        bucket,
        {
            "handbook/alpha.md": "# Alpha\n\nThe zebrafish canteen opens at noon.",
            "handbook/beta.md": "# Beta\n\nThe okapi parking is behind the building.",
            "handbook/deep/gamma.txt": "Gamma: the narwhal printer is on floor two.",
            "handbook/same-as-hand.md": "# Shared\n\nThe axolotl rule applies to everyone.",
            "handbook/picture.png": b"\x89PNG\r\n",
            "handbook/binary.md": BINARY,
            "handbook/../escape.md": "# Escape\n\nThe wombat key is out of the prefix.",
            "handbook/folder/": b"",  # a "folder" marker, as consoles make
            "elsewhere/other.md": "# Other\n\nOutside the prefix: never listed.",
        },
    )
    shared = upload(api, ("shared.md", b"# Shared\n\nThe axolotl rule applies to everyone."))
    hand = upload(api, ("hand.md", b"# Hand\n\nThe quokka form is uploaded by hand."))
    hand_ids = {shared.json()["documents"][0]["id"], hand.json()["documents"][0]["id"]}
    source = create(
        api,
        name="bucket",
        kind="s3",
        bucket=bucket.name,
        prefix="handbook/",
        endpoint_url=s3_url,
        credentials="local",
    )
    assert (source["bucket"], source["prefix"], source["credentials"]) == (
        bucket.name,
        "handbook/",
        "local",
    )
    first = sync(api, source["id"])
    assert first["status"] == "done", first
    assert counts(first) == (4, 0, 0, 0, 0, 3)
    reasons = {p["path"]: p["reason"] for p in first["problems"]}
    assert "path traversal" in reasons["handbook/../escape.md"]
    assert "binary file" in reasons["handbook/binary.md"]
    assert found(api, "wombat key") == set()
    assert found(api, "zebrafish canteen") == {"Alpha"}
    assert len(documents(api)) == 5

    assert counts(sync(api, source["id"])) == (0, 0, 0, 4, 0, 3)

    put(bucket, {"handbook/alpha.md": "# Alpha\n\nThe zebrafish canteen now opens at one."})
    bucket.Object("handbook/beta.md").delete()
    bucket.Object("handbook/same-as-hand.md").delete()
    third = sync(api, source["id"])
    assert counts(third) == (0, 1, 2, 1, 0, 3)
    assert found(api, "okapi parking") == set()
    assert hand_ids <= {d["id"] for d in documents(api)}
    assert found(api, "axolotl rule") == {"Shared"}
    files = api.get(f"/api/sources/{source['id']}/files").json()["files"]
    assert [f["path"] for f in files] == ["handbook/alpha.md", "handbook/deep/gamma.txt"]

    # A bucket that is gone fails the run, removes nothing, and tells no secret.
    missing = create(
        api, name="missing", kind="s3", bucket="no-such-bucket-here", endpoint_url=s3_url,
        credentials="local",
    )  # fmt: skip
    failed = sync(api, missing["id"])
    assert failed["status"] == "failed" and "NoSuchBucket" in failed["error"]
    assert len(documents(api)) == 4

    said = json.dumps(
        [
            api.get("/api/sources").json(),
            api.get(f"/api/sources/{source['id']}/runs").json(),
            api.get(f"/api/sources/{missing['id']}/runs").json(),
            api.get(f"/api/sources/{source['id']}").json(),
            api.get("/schema/openapi.json").text,
        ]
    )
    logged = caplog.text
    for secret in (SECRET, TOKEN, ACCESS_KEY_ID):
        assert secret not in said
        assert secret not in logged
    assert "local" in said  # the credentials' name is shown; what it stands for is not


def test_credentials_are_named_never_given(api: TestClient[Any], bucket: Any, s3_url: str) -> None:
    base = {"name": "b", "kind": "s3", "bucket": bucket.name, "endpoint_url": s3_url}
    unknown = api.post("/api/sources", json={**base, "credentials": "nope"})
    assert unknown.status_code == 422 and "RAGDESK_SOURCE_CREDENTIALS" in unknown.text
    given = api.post("/api/sources", json={**base, "secret_access_key": SECRET})
    assert given.status_code in (400, 422)  # unknown field: secrets never come this way
    assert SECRET not in given.text
    for bad in ("ftp://x", "http://user:pw@127.0.0.1:9", "127.0.0.1:9000"):
        response = api.post("/api/sources", json={**base, "endpoint_url": bad})
        assert response.status_code == 422, bad
    for prefix in ("../up/", "/abs/"):
        assert api.post("/api/sources", json={**base, "prefix": prefix}).status_code == 422


# The server's own credentials, and where an admin may point the server


EMPTY_LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>docs</Name>'
    b"<Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys>"
    b"<IsTruncated>false</IsTruncated></ListBucketResult>"
)


@contextmanager
def recording_s3() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """An "S3 server" on loopback that lists an empty bucket and keeps the headers of
    every request: what an endpoint an admin named would receive."""
    seen: list[dict[str, str]] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({key.lower(): value for key, value in self.headers.items()})
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(EMPTY_LISTING)))
            self.end_headers()
            self.wfile.write(EMPTY_LISTING)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_the_servers_own_aws_credentials_never_reach_an_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A source without named credentials is read anonymously: never with the server's
    environment keys or instance role, which would go to whatever endpoint it names."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAAMBIENTSERVERKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ambient-secret-of-the-server")

    def chain(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("boto3's credential chain (environment, instance role) was used")

    monkeypatch.setattr(botocore.credentials, "create_credential_resolver", chain)
    named = SourceCredential(
        access_key_id=SecretStr(ACCESS_KEY_ID), secret_access_key=SecretStr(SECRET)
    )
    with recording_s3() as (url, seen):
        assert list(S3Reader("docs", endpoint_url=url).entries()) == []
        assert list(S3Reader("docs", endpoint_url=url, credential=named).entries()) == []
    anonymous, signed = seen
    assert "authorization" not in anonymous and "x-amz-security-token" not in anonymous
    assert "AKIAAMBIENTSERVERKEY" not in json.dumps(seen)
    assert f"Credential={ACCESS_KEY_ID}/" in signed["authorization"]


REFUSED_BY_DEFAULT = [
    "http://169.254.169.254",  # instance metadata (AWS, GCP, Azure …)
    "http://169.254.169.254:80/latest/",
    "http://[fd00:ec2::254]",  # AWS's metadata over IPv6
    "http://[::ffff:169.254.169.254]",  # the same, IPv4-mapped
    "http://2852039166",  # 169.254.169.254 written as one number: resolved first
    "http://[fe80::1]:9000",  # IPv6 link-local
]


def unknown_name(host: str, *args: Any, **kwargs: Any) -> Any:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_endpoints_are_checked_and_refusals_are_clear(
    api: TestClient[Any], bucket: Any, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {"name": "b", "kind": "s3", "bucket": bucket.name}
    for endpoint in REFUSED_BY_DEFAULT:
        refused = api.post("/api/sources", json={**base, "endpoint_url": endpoint})
        assert refused.status_code == 422, (endpoint, refused.text)
        assert "link-local" in refused.json()["error"]["detail"], endpoint
    malformed = ["http://[::1", "http://127.0.0.1:99999", "http://127.0.0.1:x", "http://"]
    for endpoint in malformed:  # urlsplit and .port raise on these: never a 500
        refused = api.post("/api/sources", json={**base, "endpoint_url": endpoint})
        assert refused.status_code == 422, (endpoint, refused.text)
    with monkeypatch.context() as offline:  # a name no DNS knows (none is asked)
        offline.setattr(socket, "getaddrinfo", unknown_name)
        unresolvable = api.post("/api/sources", json={**base, "endpoint_url": "http://s3.nx"})
    assert unresolvable.status_code == 422 and "resolve" in unresolvable.json()["error"]["detail"]
    loopback = api.post("/api/sources", json={**base, "endpoint_url": s3_url})  # moto's
    assert loopback.status_code == 201, loopback.text


def test_a_stored_source_whose_endpoint_is_refused_now_fails_its_run(
    api: TestClient[Any], bucket: Any
) -> None:
    """Checked again at every run: a source stored before the check (or before the
    operator's list changed) never reaches the endpoint."""
    scheduler = api.app.state.sources
    stored = scheduler.store.add(
        name="old", collection_id=1, kind="s3", location=bucket.name, prefix="",
        endpoint_url="http://169.254.169.254", region=None, credentials="local", interval_s=0,
    )  # fmt: skip
    started = api.post(f"/api/sources/{stored.id}/sync")
    assert started.status_code == 202, started.text
    url = f"/api/sources/{stored.id}/runs/{started.json()['id']}"
    # Not tests.test_sources.sync: this run may fail before the 202 reads it back.
    run = wait_for(lambda: (r := api.get(url).json())["status"] != "running" and r)
    assert run["status"] == "failed" and "link-local" in run["error"]


def test_an_operator_list_of_endpoints_allows_only_those(
    tmp_path: Path, bucket: Any, s3_url: str
) -> None:
    listed = [s3_url, "169.254.169.254"]  # a URL, and a host on any port
    with admin_api(tmp_path / "data", source_s3_endpoints=listed) as api:
        base = {"kind": "s3", "bucket": bucket.name, "credentials": "local"}
        create(api, name="moto", endpoint_url=s3_url + "/", **base)
        create(api, name="listed", endpoint_url="http://169.254.169.254:8080", **base)
        create(api, name="aws", **base)  # AWS itself: no endpoint_url
        port = int(s3_url.rsplit(":", 1)[1])
        for endpoint in (f"http://localhost:{port}", f"https://127.0.0.1:{port}"):
            refused = api.post("/api/sources", json={**base, "name": "x", "endpoint_url": endpoint})
            assert refused.status_code == 422, endpoint
            assert "RAGDESK_SOURCE_S3_ENDPOINTS" in refused.json()["error"]["detail"]
