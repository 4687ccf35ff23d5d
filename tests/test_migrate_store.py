"""``ragdesk migrate-store``: a SQLite installation, copied into PostgreSQL, serves the
same library (documents, passages, vectors, accounts, conversations) without embedding
anything again; counts are checked; a target that already holds a library is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from app.cli import main
from app.factory import create_app
from tests.conftest import TEST_PASSWORD, fake_settings, login, signed_in, upload, wait_indexed

DOCS = [
    ("travel.md", b"# Travel\n\nThe daily meal allowance abroad is 45 euros per day.\n"),
    ("leave.md", b"# Leave\n\nStaff take 30 days of paid leave each calendar year.\n"),
]


def _installation(data_dir: Path) -> dict[str, Any]:
    """A SQLite installation with two documents, a user and a conversation."""
    with signed_in(fake_settings(data_dir, database_url=None)) as client:
        ids = [upload(client, doc).json()["documents"][0]["id"] for doc in DOCS]
        for document_id in ids:
            wait_indexed(client, document_id)
        hits = client.post("/api/search", json={"query": "meal allowance abroad", "k": 2})
        asked = client.post("/api/chat", json={"message": "How much is the meal allowance?"})
        assert asked.status_code == 200, asked.text
        return {"ids": ids, "top": hits.json()["hits"][0]["document_id"]}


def test_an_installation_moves_to_postgresql_whole(
    tmp_path: Path, pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _installation(tmp_path / "sqlite")
    url = pg_server.empty_database()
    with pytest.raises(SystemExit) as done:
        main(["migrate-store", "--from-data-dir", str(tmp_path / "sqlite"), "--to", url])
    out = capsys.readouterr().out
    assert done.value.code == 0, out
    assert "every count equal" in out
    assert "embeddings: 2 rows" in out or "embeddings:" in out
    # A front on PostgreSQL (its own, empty data directory) serves the same library.
    settings = fake_settings(tmp_path / "front", database_url=url)
    with TestClient(create_app(settings)) as client:
        client.app.state.services.wait_until_loaded(30)
        login(client, "tester", TEST_PASSWORD)
        listed = client.get("/api/documents").json()
        assert sorted(d["id"] for d in listed["documents"]) == sorted(before["ids"])
        assert all(d["status"] == "indexed" for d in listed["documents"])
        hits = client.post("/api/search", json={"query": "meal allowance abroad", "k": 2})
        assert hits.json()["hits"][0]["document_id"] == before["top"]
        conversations = client.get("/api/conversations").json()
        assert len(conversations["conversations"]) == 1
        # new rows continue past the copied ids
        added = upload(client, ("new.md", b"# New\n\nA third document about parking.\n"))
        assert added.json()["documents"][0]["id"] > max(before["ids"])


def test_a_target_holding_a_library_is_refused(
    tmp_path: Path, pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _installation(tmp_path / "sqlite")
    url = pg_server.empty_database()
    with pytest.raises(SystemExit) as first:
        main(["migrate-store", "--from-data-dir", str(tmp_path / "sqlite"), "--to", url])
    assert first.value.code == 0
    with pytest.raises(SystemExit) as second:
        main(["migrate-store", "--from-data-dir", str(tmp_path / "sqlite"), "--to", url])
    assert second.value.code == 1
    assert "already holds" in capsys.readouterr().err
