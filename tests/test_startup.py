"""Start-up: uploads work while models load; a broken model setting gives clear 503s."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import fake_settings, signed_in, upload, wait_indexed


def test_a_broken_generator_is_reported_and_documents_still_flow(tmp_path: Path) -> None:
    settings = fake_settings(
        tmp_path, generator_backend="llama-cpp", generator_model=tmp_path / "missing.gguf"
    )
    with signed_in(settings) as client:
        client.app.state.services.wait_until_loaded(30)
        ready = client.get("/health/ready")
        assert ready.status_code == 503
        assert ready.json()["status"] == "failed" and "missing.gguf" in ready.json()["detail"]
        assert ready.headers["retry-after"]
        chat = client.post("/api/chat", json={"message": "anything"})
        assert chat.status_code == 503 and "generator failed" in chat.json()["error"]["detail"]
        # Ingestion and search do not need the generator.
        accepted = upload(client, ("notes.txt", b"notes about the quarterly budget"))
        assert accepted.status_code == 201
        assert wait_indexed(client, accepted.json()["documents"][0]["id"])["status"] == "indexed"
        hits = client.post("/api/search", json={"query": "quarterly budget"}).json()["hits"]
        assert hits and "budget" in hits[0]["text"]
        assert "the generator failed to load" in client.get("/").text


def test_queued_uploads_are_ingested_on_the_next_good_start(tmp_path: Path) -> None:
    broken = fake_settings(
        tmp_path, embedder_backend="sentence-transformers", embedder_model=tmp_path / "nope"
    )
    with signed_in(broken) as client:
        client.app.state.services.wait_until_loaded(30)
        document_id = upload(client, ("a.txt", b"resumed later")).json()["documents"][0]["id"]
        assert "embedder failed" in client.get("/health/ready").json()["detail"]
        assert client.post("/api/search", json={"query": "later"}).status_code == 503
        assert client.get(f"/api/documents/{document_id}").json()["status"] == "queued"
    with signed_in(fake_settings(tmp_path)) as client:
        client.app.state.services.wait_until_loaded(30)
        assert wait_indexed(client, document_id)["status"] == "indexed"


def test_samples_are_indexed_on_first_start_only(tmp_path: Path) -> None:
    settings = fake_settings(tmp_path, load_samples=True)
    with signed_in(settings) as client:
        client.app.state.services.wait_until_loaded(30)
        documents = client.get("/api/documents").json()["documents"]
        assert sorted(d["filename"] for d in documents) == [
            "ragdesk-faq.html",
            "ragdesk-user-guide.md",
        ]
        for document in documents:
            client.delete(f"/api/documents/{document['id']}")
    with signed_in(settings) as client:
        client.app.state.services.wait_until_loaded(30)
        assert client.get("/api/documents").json()["documents"] == []  # deletion respected
