"""#30, smaller findings: each regression test is named after what was found."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from retrieval.display import REPLACEMENT, shown_line, shown_text
from tests.conftest import add_key, add_user
from tests.pg_kit import store_under_test
from tests.server import REPO
from tests.test_feedback import HX, answered
from tests.test_ui_routes import indexed_document

HOSTILE = "in\u202ecod\x07e\nnext line"


@pytest.mark.parametrize(
    "path",
    ["/static/" + "a" * 300, "/static/" + "é" * 200 + ".css", "/static/a%00b.css"],
)
def test_n_static_path_no_file_system_holds_is_a_4xx_not_500(
    anonymous_client: TestClient[Any], path: str
) -> None:
    response = anonymous_client.get(path)
    assert response.status_code in (400, 404), response.text
    assert anonymous_client.get("/static/app.js").status_code == 200  # real files still served


def test_n_controls_are_made_visible_in_one_line_names_and_in_comments() -> None:
    assert shown_line(HOSTILE) == f"in{REPLACEMENT}cod{REPLACEMENT}e{REPLACEMENT}next line"
    assert shown_text(HOSTILE) == f"in{REPLACEMENT}cod{REPLACEMENT}e\nnext line"
    assert shown_text("tabs\tand accents é stay") == "tabs\tand accents é stay"


def test_n_u202e_and_bel_in_feedback_comments_are_not_raw_on_admin_feedback(
    client: TestClient[Any],
) -> None:
    indexed_document(client)
    _, answer = answered(client, "When does the canteen open?", "At noon [1].")
    sent = client.post(
        f"/ui/messages/{answer}/feedback", data={"rating": "down", "comment": HOSTILE}, headers=HX
    )
    assert sent.status_code == 200
    page = client.get("/admin/feedback").text
    assert "\u202e" not in page and "\x07" not in page
    assert f"in{REPLACEMENT}cod{REPLACEMENT}e" in page


def test_n_the_database_and_originals_are_not_world_readable(tmp_path: Path) -> None:
    """#30: the database and originals were 0644 while manifests were 0600. The ``ragdesk``
    command (app.cli:run) creates everything 0600/0700; an upload through it shows that."""
    data = tmp_path / "data"
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe okapi budget is 12 euros.\n")
    script = (
        "import sys; from app.cli import run; "
        f"sys.argv = ['ragdesk', 'ingest', {str(note)!r}, '--data-dir', {str(data)!r}]; run()"
    )
    env = {**os.environ, "RAGDESK_EMBEDDER_BACKEND": "fake", "RAGDESK_GENERATOR_BACKEND": "fake"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    made = [data, *data.rglob("*")]
    if store_under_test() == "sqlite":  # on PostgreSQL the database is no file here
        assert any(path.name.endswith(".db") for path in made)
    assert any("uploads" in path.parts for path in made if path.is_file())
    for path in made:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"


def test_n_a_staff_key_cannot_make_the_server_load_a_model_nobody_offered(
    client: TestClient[Any],
) -> None:
    """#30: a staff key named a bundled model chat does not offer; the server assembled
    and loaded it (1.1 GB written, +2 GB of memory). Now only an admin may."""
    from llm.backend import FakeBackend

    models = client.app.state.services.require_models()
    loads: list[str] = []

    def load_other() -> FakeBackend:
        loads.append("other")
        return FakeBackend(name="other-bundled")

    models._loaders["other-bundled"] = load_other
    add_user(client, "sam")
    staff = {"Authorization": f"Bearer {add_key(client, 'sam')}"}
    body = {"model": "other-bundled", "prompt": "Hello", "max_tokens": 2}
    for path, payload in (
        ("/v1/completions", body),
        ("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": "Hi"}]}),
        ("/api/completions", body),
    ):
        refused = client.post(path, json=payload, headers=staff)
        assert refused.status_code == 404, (path, refused.text)
    assert loads == []  # nothing was loaded
    listed = [m["id"] for m in client.get("/v1/models", headers=staff).json()["data"]]
    assert "other-bundled" not in listed and "default" in listed
    assert client.get("/v1/models/other-bundled", headers=staff).status_code == 404
    restricted = {"Authorization": f"Bearer {add_key(client, read_only=True)}"}  # an admin's
    assert client.post("/v1/completions", json=body, headers=restricted).status_code == 404

    admin = {"Authorization": f"Bearer {add_key(client)}"}
    assert client.post("/v1/completions", json=body, headers=admin).status_code == 200
    assert loads == ["other"]
    ok = client.post("/v1/completions", json={**body, "model": "default"}, headers=staff)
    assert ok.status_code == 200  # what is offered stays open to everyone


def test_snippets_end_at_a_word_with_an_ellipsis() -> None:
    """#26 item 8: snippets were cut mid-word with no ellipsis."""
    from retrieval.display import excerpt

    text = "The travel policy covers hotels, meals and trains for every trip abroad."
    assert excerpt(text, 200) == text
    cut = excerpt(text, 30)
    assert cut == "The travel policy covers…" and len(cut) <= 30
    assert excerpt("x" * 50, 20) == "x" * 19 + "…"  # one long word: cut where it must be
