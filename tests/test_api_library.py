"""The native JSON API beyond documents and search: collections, conversations, document
downloads, users and keys, and the OpenAPI schema that describes them."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import add_key, add_user, upload, wait_for, wait_indexed
from tests.test_permissions import ask_api


@pytest.fixture
def api(client: TestClient[Any]) -> TestClient[Any]:
    """An admin's API key (the conftest user is an admin)."""
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    client.cookies.clear()
    client.headers["Authorization"] = f"Bearer {add_key(client)}"
    return client


def test_collections_list_and_create(api: TestClient[Any]) -> None:
    created = api.post("/api/collections", json={"name": "handbooks"})
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "handbooks" and created.json()["documents"] == 0
    names = [c["name"] for c in api.get("/api/collections").json()["collections"]]
    assert {"default", "handbooks"} <= set(names)
    for bad in ("", "  ", None):
        assert api.post("/api/collections", json={"name": bad}).status_code == 422
    add_user(api, "sam")
    api.headers["Authorization"] = f"Bearer {add_key(api, 'sam')}"
    assert api.get("/api/collections").json()["collections"] == []  # sam is in none
    assert api.post("/api/collections", json={"name": "mine"}).status_code == 403


def test_download_returns_the_original(api: TestClient[Any]) -> None:
    document = upload(api, ("note.md", b"# Note\n\nHello there.")).json()["documents"][0]
    wait_indexed(api, document["id"])
    response = api.get(f"/api/documents/{document['id']}/download")
    assert response.status_code == 200 and response.content == b"# Note\n\nHello there."
    assert response.headers["content-disposition"].startswith("attachment;")
    assert api.get("/api/documents/999/download").status_code == 404


def test_conversations_list_get_delete(api: TestClient[Any]) -> None:
    upload(api, ("note.md", b"# Note\n\nThe canteen opens at noon."))
    done = ask_api(api, "When does the canteen open?")
    conversation_id = done["conversation_id"]
    listed = api.get("/api/conversations").json()["conversations"]
    assert [c["id"] for c in listed] == [conversation_id]
    detail = api.get(f"/api/conversations/{conversation_id}").json()
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant"]
    assert detail["messages"][1]["id"] == done["message_id"]
    add_user(api, "sam")
    own_key = api.headers["Authorization"]
    api.headers["Authorization"] = f"Bearer {add_key(api, 'sam')}"
    assert api.get("/api/conversations").json()["conversations"] == []
    assert api.get(f"/api/conversations/{conversation_id}").status_code == 404
    assert api.delete(f"/api/conversations/{conversation_id}").status_code == 404
    api.headers["Authorization"] = own_key
    assert api.delete(f"/api/conversations/{conversation_id}").status_code == 204
    assert api.get(f"/api/conversations/{conversation_id}").status_code == 404


def test_users_and_keys_for_admins(api: TestClient[Any]) -> None:
    created = api.post("/api/users", json={"name": "kim", "role": "staff"})
    assert created.status_code == 201, created.text
    assert created.json()["password"] and created.json()["role"] == "staff"
    assert api.post("/api/users", json={"name": "kim"}).status_code == 422  # taken
    assert "kim" in [u["name"] for u in api.get("/api/users").json()["users"]]
    api.post("/api/collections", json={"name": "team"})
    body = {"user": "kim", "name": "bot", "read_only": True, "collections": ["team"]}
    key = api.post("/api/keys", json=body)
    assert key.status_code == 201, key.text
    secret, key_id = key.json()["key"], key.json()["id"]
    assert secret.startswith("rdk_") and key.json()["read_only"]
    listed = api.get("/api/keys").json()["keys"]
    assert all("key" not in k for k in listed) and secret not in str(listed)
    assert api.post("/api/keys", json={**body, "collections": ["nope"]}).status_code == 422
    # kim's key is no admin key
    admin_key = api.headers["Authorization"]
    api.headers["Authorization"] = f"Bearer {secret}"
    assert api.get("/api/users").status_code == 403
    assert api.get("/api/keys").status_code == 403
    api.headers["Authorization"] = admin_key
    assert api.delete(f"/api/keys/{key_id}").status_code == 204
    assert api.delete(f"/api/keys/{key_id}").status_code == 404
    api.headers["Authorization"] = f"Bearer {secret}"
    assert api.get("/api/collections").status_code == 401


def test_the_openapi_schema_describes_the_api(api: TestClient[Any]) -> None:
    paths = api.get("/schema/openapi.json").json()["paths"]
    for path in (
        "/api/collections",
        "/api/documents",
        "/api/documents/{document_id}",
        "/api/documents/{document_id}/download",
        "/api/search",
        "/api/conversations",
        "/api/conversations/{conversation_id}",
        "/api/users",
        "/api/keys",
        "/api/keys/{key_id}",
        "/v1/chat/completions",
    ):
        assert path in paths, path
