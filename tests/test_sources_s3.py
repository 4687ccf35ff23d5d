"""Synced sources from an S3-compatible bucket: a real S3 server (moto in server mode) on
127.0.0.1, driven through boto3 as any bucket would be. The same scenario as a directory,
keys with ``..`` refused, and credentials never in a response, a run or the log."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from litestar.testing import TestClient
from moto.server import ThreadedMotoServer

from tests.conftest import add_key, fake_settings, signed_in, upload, wait_for
from tests.test_sources import BINARY, counts, create, documents, found, sync

ACCESS_KEY_ID = "AKIARAGDESKTEST0001"
SECRET = "s3cr3t/never+shown-anywhere-0001"
TOKEN = "session-token-never-shown-0001"


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_url: str, request: pytest.FixtureRequest) -> Any:
    s3 = boto3.resource(
        "s3",
        endpoint_url=s3_url,
        region_name="us-east-1",
        aws_access_key_id="setup",
        aws_secret_access_key="setup",
    )
    name = "rd-" + request.node.name.replace("_", "-")[:40].lower().strip("-")
    made = s3.create_bucket(Bucket=name)
    yield made
    made.objects.all().delete()
    made.delete()


@pytest.fixture
def api(tmp_path: Any) -> Iterator[TestClient[Any]]:
    credentials = {
        "local": {
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET,
            "session_token": TOKEN,
        }
    }
    settings = fake_settings(tmp_path / "data", source_credentials=credentials, sync_check_s=0)
    with signed_in(settings) as client:
        wait_for(lambda: client.get("/health/ready").status_code == 200)
        client.cookies.clear()
        client.headers["Authorization"] = f"Bearer {add_key(client)}"
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
