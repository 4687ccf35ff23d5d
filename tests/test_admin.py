"""Account and admin pages: keys made in the UI (shown once), users, membership, roles."""

from __future__ import annotations

import re
from typing import Any

from litestar.testing import TestClient

from tests.conftest import TEST_PASSWORD, add_user, login

ADMIN_ONLY = [
    ("GET", "/admin", None),
    ("POST", "/admin/users", {"name": "eve", "role": "admin"}),
    ("POST", "/admin/users/1/disabled", {"disabled": "on"}),
    ("POST", "/admin/members", {"user": "ann", "collection": "x", "can_write": "on"}),
    ("POST", "/admin/members/remove", {"collection_id": "1", "user_id": "1"}),
    ("POST", "/admin/keys/1/revoke", {}),
    ("POST", "/admin/models", {"offered": "default"}),
    ("GET", "/admin/sources", None),
    ("POST", "/admin/sources", {"name": "s", "kind": "directory", "collection": "default"}),
    ("GET", "/admin/groups", None),
    ("POST", "/admin/groups", {"name": "eng"}),
]


def test_a_key_made_in_the_ui_is_shown_once_and_works(client: TestClient[Any]) -> None:
    created = client.post("/account/keys", data={"name": "script", "read_only": "on"})
    assert created.status_code == 200
    key = re.search(r'id="new-key-value">(rdk_[^<]+)<', created.text).group(1)  # type: ignore[union-attr]
    page = client.get("/account").text
    assert key not in page and "script" in page and "read-only" in page
    stored = client.app.state.services.db.read().execute("SELECT key_hash FROM api_keys")
    assert key not in str([tuple(r) for r in stored])
    anonymous = {"Authorization": f"Bearer {key}"}
    client.cookies.clear()
    assert client.get("/api/documents", headers=anonymous).status_code == 200
    files = [("file", ("a.md", b"# A\n\ntext"))]
    assert client.post("/api/documents", files=files, headers=anonymous).status_code == 403


def test_revoking_ones_own_key_in_the_ui(client: TestClient[Any]) -> None:
    client.post("/account/keys", data={"name": "old"})
    key_id = client.app.state.services.auth.keys.list()[0].id
    assert client.post(f"/account/keys/{key_id}/revoke").status_code == 200  # → /account
    assert client.app.state.services.auth.keys.get(key_id).revoked_at is not None
    assert client.post("/account/keys/999/revoke").status_code == 404


def test_admin_creates_a_user_and_grants_a_collection(client: TestClient[Any]) -> None:
    created = client.post("/admin/users", data={"name": "dave", "role": "staff"})
    password = re.search(r'id="new-user-password">([^<]+)<', created.text).group(1)  # type: ignore[union-attr]
    assert client.post("/admin/users", data={"name": "dave"}).status_code == 422
    assert client.post("/admin/users", data={"name": "../x"}).status_code == 422
    typo = client.post("/admin/members", data={"user": "dave", "collection": "hr"})
    assert typo.status_code == 422 and "create it if it is new" in typo.text  # asked, not made
    assert all(c.name != "hr" for c in client.app.state.services.store.collections())
    granted = client.post(
        "/admin/members", data={"user": "dave", "collection": "hr", "create": "on"}
    )
    assert granted.status_code == 200 and "dave (read)" in granted.text
    again = client.post("/admin/members", data={"user": "dave", "collection": "HR"})
    assert again.status_code == 200  # an existing one, in any case, needs no box
    client.cookies.clear()
    login(client, "dave", password)
    assert "hr" in client.get("/").text


def test_staff_get_403_on_every_admin_route_and_keys_of_others_are_404(
    client: TestClient[Any],
) -> None:
    client.post("/account/keys", data={"name": "admins"})
    add_user(client, "ann")
    client.cookies.clear()
    login(client, "ann")
    for method, path, data in ADMIN_ONLY:
        response = client.request(method, path, data=data)
        assert response.status_code == 403, path
    assert client.post("/account/keys/1/revoke").status_code == 404  # the admin's key
    assert client.app.state.services.auth.keys.get(1).revoked_at is None
    assert 'href="/admin"' not in client.get("/").text


def test_an_admin_route_walk_finds_admin_handlers(client: TestClient[Any]) -> None:
    admin_paths = {
        route.path
        for route in client.app.routes
        for handler in getattr(route, "route_handlers", [])
        if handler.opt.get("admin")
    }
    assert {p for _, p, _ in ADMIN_ONLY} <= {re.sub(r"\{\w+:int\}", "1", p) for p in admin_paths}


def test_changing_ones_password_ends_every_session(client: TestClient[Any]) -> None:
    token = client.headers["X-CSRF-Token"]
    wrong = client.post("/account/password", data={"current": "nope", "new": "x" * 20})
    assert wrong.status_code == 422
    short = client.post("/account/password", data={"current": TEST_PASSWORD, "new": "short"})
    assert short.status_code == 422 and "12" in short.text
    changed = client.post(
        "/account/password",
        data={"current": TEST_PASSWORD, "new": "a much better passphrase", "csrf_token": token},
        follow_redirects=False,
    )
    assert changed.status_code == 303 and changed.headers["location"] == "/login"
    assert client.get("/api/documents").status_code == 401  # this session ended too
    login(client, "tester", "a much better passphrase")
    assert client.get("/api/documents").status_code == 200
