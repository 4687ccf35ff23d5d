"""Deployment guards: allowed hosts, CORS origins, Secure cookies over HTTPS, TLS settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient
from pydantic import ValidationError

from app.auth.hosts import host_allowed, host_name
from app.config.settings import Settings
from app.factory import create_app
from tests.conftest import TEST_PASSWORD, TEST_USER, add_key, add_user, fake_settings, signed_in


def test_host_names_and_patterns() -> None:
    assert host_name("Example.org:8000") == "example.org"
    assert host_name("[::1]:8000") == "[::1]" and host_name("[::1]") == "[::1]"
    assert host_allowed("a.example.org", ["*.example.org"])
    assert not host_allowed("example.org.evil", ["*.example.org", "example.org"])
    assert Settings(host="10.0.0.5").served_hosts[-1] == "10.0.0.5"
    assert "0.0.0.0" not in Settings(host="0.0.0.0").served_hosts


def test_unknown_hosts_get_400(client: TestClient[Any]) -> None:
    assert client.get("/api/documents").status_code == 200
    refused = client.get("/api/documents", headers={"Host": "rebound.evil.example"})
    assert refused.status_code == 400 and refused.json()["error"]["detail"] == "unknown host"
    assert client.get("/health/live", headers={"Host": "localhost:8000"}).status_code == 200


def test_cors_only_for_listed_origins(tmp_path: Path) -> None:
    settings = fake_settings(tmp_path, cors_origins=["https://tools.example"])
    with signed_in(settings) as client:
        key = add_key(client)
        client.cookies.clear()
        preflight = {
            "Origin": "https://tools.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        }
        allowed = client.options("/api/search", headers=preflight)
        assert allowed.status_code in (200, 204)
        assert allowed.headers["access-control-allow-origin"] == "https://tools.example"
        other = client.options(
            "/api/search", headers={**preflight, "Origin": "https://evil.example"}
        )
        assert other.headers.get("access-control-allow-origin") != "https://evil.example"
        call = client.get(
            "/api/documents",
            headers={"Origin": "https://tools.example", "Authorization": f"Bearer {key}"},
        )
        assert call.status_code == 200
        assert "access-control-allow-credentials" not in call.headers  # keys, never cookies
    with signed_in(fake_settings(tmp_path)) as client:  # the default: no cross-origin callers
        response = client.get("/api/documents", headers={"Origin": "https://tools.example"})
        assert "access-control-allow-origin" not in response.headers


def test_the_session_cookie_is_secure_over_https(tmp_path: Path) -> None:
    app = create_app(fake_settings(tmp_path))
    with TestClient(app, base_url="https://testserver.local") as client:
        client.app.state.services.wait_until_loaded(30)
        add_user(client, TEST_USER, "admin")
        response = client.post(
            "/login", data={"name": TEST_USER, "password": TEST_PASSWORD}, follow_redirects=False
        )
        assert response.status_code == 303
        assert "secure" in response.headers["set-cookie"].lower()


def test_tls_needs_both_files(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="go together"):
        Settings(tls_certfile=tmp_path / "cert.pem")
    both = Settings(tls_certfile=tmp_path / "c.pem", tls_keyfile=tmp_path / "k.pem")
    assert both.server.tls_keyfile == tmp_path / "k.pem"
