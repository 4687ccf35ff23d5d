"""Holes an adversarial run found, each pinned: deep JSON, NUL paths, Host tricks, key
guessing, direction-changing file names, HEAD on downloads, multipart part counts,
the prompt's param name in /v1 context errors, HSTS over TLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from litestar.testing import TestClient

from app.documents.intake import MAX_PARTS_PER_REQUEST
from app.factory import create_app
from tests.conftest import add_key, add_user, fake_settings, upload, wait_indexed

RLO = "\u202e"  # right-to-left override


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "path", ["/api/chat", "/api/search", "/api/completions", "/v1/chat/completions"]
)
def test_json_nested_too_deep_is_a_400(client: TestClient[Any], path: str) -> None:
    body = '{"question": ' + nested(5000) + "}"
    reply = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert "nested too deeply" in reply.text


@pytest.mark.parametrize("path", ["/static/%00", "/static/app.js%00.db"])
def test_a_nul_in_the_path_is_a_400_for_anyone(
    anonymous_client: TestClient[Any], path: str
) -> None:
    reply = anonymous_client.get(path)
    assert reply.status_code == 400 and "NUL" in reply.json()["error"]["detail"]
    assert anonymous_client.get("/api/documents/%00").status_code == 404  # no such route


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:8241@evil.test", "127.0.0.1@evil.test", "127.0.0.1:80:81", "evil.test"],
)
def test_a_host_header_with_anything_after_the_port_is_refused(
    anonymous_client: TestClient[Any], host: str
) -> None:
    reply = anonymous_client.get("/health/live", headers={"Host": host})
    assert reply.status_code == 400 and "unknown host" in reply.text


def test_a_well_formed_host_with_a_port_is_served(anonymous_client: TestClient[Any]) -> None:
    assert anonymous_client.get("/health/live", headers={"Host": "127.0.0.1:8241"}).is_success


@pytest.fixture
def guessing(tmp_path: Path) -> Iterator[TestClient[Any]]:
    settings = fake_settings(tmp_path / "data", key_max_failures_per_address=5)
    with TestClient(create_app(settings)) as test_client:
        test_client.app.state.services.wait_until_loaded(30)
        yield test_client


def test_wrong_keys_from_one_address_are_rate_limited(guessing: TestClient[Any]) -> None:
    add_user(guessing, "ann")
    good = add_key(guessing, "ann")
    wrong_secret = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    unknown = "rdk_000000000000_" + "A" * 43
    statuses = [
        guessing.get("/api/documents", headers={"Authorization": f"Bearer {key}"}).status_code
        for key in [wrong_secret, unknown, "nonsense"] * 2
    ]
    assert statuses == [401] * 5 + [429]
    blocked = guessing.get("/api/documents", headers={"Authorization": f"Bearer {good}"})
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) >= 1


def test_direction_controls_in_names_are_shown_neutralised(client: TestClient[Any]) -> None:
    name = f"invoice{RLO}txt.exe.md"
    document = upload(client, (name, b"# Invoice\n\nTotal due: 12 crowns.")).json()["documents"][0]
    shown = wait_indexed(client, document["id"])
    assert RLO not in shown["filename"] and "\ufffd" in shown["filename"]
    row = client.get(f"/ui/documents/{document['id']}/table-row").text
    assert RLO not in row and "\ufffd" in row
    download = client.get(f"/api/documents/{document['id']}/download")
    assert download.headers["Content-Disposition"].endswith(quote(name, safe=""))


def test_head_on_a_download_gives_its_headers(client: TestClient[Any]) -> None:
    document = upload(client, ("notes.txt", b"hello there")).json()["documents"][0]
    for path in (
        f"/api/documents/{document['id']}/download",
        f"/documents/{document['id']}/original",
    ):
        reply = client.head(path)
        assert reply.status_code == 200 and reply.content == b""
        assert reply.headers["Content-Length"] == "11"
        assert "notes.txt" in reply.headers["Content-Disposition"]
    assert client.head("/api/documents/999999/download").status_code == 404


def test_too_many_multipart_parts_says_so(client: TestClient[Any]) -> None:
    files = [("file", (f"f{i}.txt", b"x")) for i in range(MAX_PARTS_PER_REQUEST + 5)]
    reply = client.post("/api/documents", files=files)
    assert reply.status_code == 400
    assert "parts" in reply.text and "Too Large" not in reply.text


def test_a_v1_completions_context_error_names_the_prompt(client: TestClient[Any]) -> None:
    body = {"model": "default", "prompt": "word " * 5000, "max_tokens": 8}
    reply = client.post("/v1/completions", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"


def test_hsts_only_over_https(tmp_path: Path) -> None:
    settings = fake_settings(tmp_path / "data")
    with TestClient(create_app(settings), base_url="https://localhost") as https:
        assert https.get("/health/live").headers["Strict-Transport-Security"].startswith("max-age=")
    with TestClient(create_app(settings), base_url="http://localhost") as http:
        assert "Strict-Transport-Security" not in http.get("/health/live").headers
