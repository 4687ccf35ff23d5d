"""Start-up: uploads work while models load; a broken model setting gives clear 503s."""

from __future__ import annotations

from pathlib import Path

from litestar.testing import TestClient

from app.factory import create_app
from tests.conftest import fake_settings, upload


def test_missing_model_file_is_reported_not_crashed(tmp_path: Path) -> None:
    settings = fake_settings(
        tmp_path, generator_backend="llama-cpp", generator_model=tmp_path / "missing.gguf"
    )
    with TestClient(create_app(settings)) as client:
        client.app.state.services.wait_until_loaded(30)
        ready = client.get("/health/ready")
        assert ready.status_code == 503
        assert ready.json()["status"] == "failed" and "missing.gguf" in ready.json()["detail"]
        assert ready.headers["retry-after"]
        search = client.post("/api/search", json={"query": "anything"})
        assert search.status_code == 503 and "failed to load" in search.json()["error"]["detail"]
        # Documents are still accepted and wait, queued, for a working configuration.
        accepted = upload(client, ("notes.txt", b"kept safe until the models load"))
        assert accepted.status_code == 201
        assert accepted.json()["documents"][0]["status"] == "queued"
        assert "the models failed to load" in client.get("/").text


def test_queued_uploads_are_ingested_on_the_next_good_start(tmp_path: Path) -> None:
    broken = fake_settings(
        tmp_path, generator_backend="llama-cpp", generator_model=tmp_path / "missing.gguf"
    )
    with TestClient(create_app(broken)) as client:
        client.app.state.services.wait_until_loaded(30)
        document_id = upload(client, ("a.txt", b"resumed later")).json()["documents"][0]["id"]
    with TestClient(create_app(fake_settings(tmp_path))) as client:
        client.app.state.services.wait_until_loaded(30)
        from tests.conftest import wait_indexed

        assert wait_indexed(client, document_id)["status"] == "indexed"


def test_samples_are_indexed_on_first_start_only(tmp_path: Path) -> None:
    settings = fake_settings(tmp_path, load_samples=True)
    with TestClient(create_app(settings)) as client:
        client.app.state.services.wait_until_loaded(30)
        documents = client.get("/api/documents").json()["documents"]
        assert sorted(d["filename"] for d in documents) == [
            "ragdesk-faq.html",
            "ragdesk-user-guide.md",
        ]
        for document in documents:
            client.delete(f"/api/documents/{document['id']}")
    with TestClient(create_app(settings)) as client:
        client.app.state.services.wait_until_loaded(30)
        assert client.get("/api/documents").json()["documents"] == []  # deletion respected
