"""``/health/live`` and ``/health/ready``: public status for probes, the detail for admins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from app.factory import create_app
from tests.conftest import add_key, add_user, fake_settings, login


def broken_generator_app(tmp_path: Path) -> TestClient[Any]:
    settings = fake_settings(
        tmp_path, generator_backend="llama-cpp", generator_model=tmp_path / "secret-model.gguf"
    )
    return TestClient(create_app(settings))


def test_a_ready_server_says_only_ready(anonymous_client: TestClient[Any]) -> None:
    assert anonymous_client.get("/health/live").json() == {"status": "ok", "detail": None}
    ready = anonymous_client.get("/health/ready")
    assert ready.status_code == 200 and ready.json() == {
        "status": "ready",
        "detail": None,
        "disk": "ok",
    }


def test_anonymous_probes_get_the_kind_of_problem_and_admins_its_text(tmp_path: Path) -> None:
    with broken_generator_app(tmp_path) as client:
        client.app.state.services.wait_until_loaded(30)
        add_user(client, "ann")  # staff
        add_user(client, "root", "admin")
        anonymous = client.get("/health/ready")
        assert anonymous.status_code == 503 and anonymous.headers["retry-after"] == "5"
        assert anonymous.json() == {
            "status": "failed",
            "detail": "the generator failed to load",
            "disk": "ok",
        }
        assert "secret-model" not in anonymous.text and str(tmp_path) not in anonymous.text
        login(client, "ann")
        assert client.get("/health/ready").json() == anonymous.json()  # staff: the same
        client.cookies.clear()
        staff_key = {"Authorization": f"Bearer {add_key(client, 'ann')}"}
        assert client.get("/health/ready", headers=staff_key).json() == anonymous.json()
        login(client, "root")
        detail = client.get("/health/ready").json()["detail"]
        assert "generator failed to load" in detail and "secret-model.gguf" in detail
        client.cookies.clear()
        admin_key = {"Authorization": f"Bearer {add_key(client, 'root', read_only=True)}"}
        admin = client.get("/health/ready", headers=admin_key)
        assert admin.status_code == 503 and "secret-model.gguf" in admin.json()["detail"]


def test_each_kind_of_problem_is_told_in_fixed_words(anonymous_client: TestClient[Any]) -> None:
    services = anonymous_client.app.state.services
    services.load_errors.append("the embedder failed to load: OSError: /srv/models/x: denied")
    services.parser.problem = "the parser process does not start (/opt/secret/python)"
    body = anonymous_client.get("/health/ready").json()
    assert body == {
        "status": "failed",
        "detail": "the embedder failed to load; the document parser does not start",
        "disk": "ok",
    }
    services.load_errors[:] = ["something unforeseen at /srv/secret"]
    services.parser.problem = None
    assert anonymous_client.get("/health/ready").json()["detail"] == "a component failed to load"
    services.load_errors.clear()
    assert anonymous_client.get("/health/ready").status_code == 200


def test_a_bad_key_on_a_probe_is_anonymous(tmp_path: Path) -> None:
    with broken_generator_app(tmp_path) as client:
        client.app.state.services.wait_until_loaded(30)
        bad = client.get("/health/ready", headers={"Authorization": "Bearer rdk_nope"})
        assert bad.status_code == 503 and "secret-model" not in bad.text


def test_the_status_bar_tells_staff_the_kind_of_problem_and_admins_its_text(
    tmp_path: Path,
) -> None:
    """The UI's status bar is no back door to what ``/health/ready`` keeps from staff."""
    with broken_generator_app(tmp_path) as client:
        client.app.state.services.wait_until_loaded(30)
        add_user(client, "ann")  # staff
        add_user(client, "root", "admin")
        htmx = {"HX-Request": "true"}
        login(client, "ann")
        for page in (client.get("/ui/status", headers=htmx), client.get("/")):
            assert page.status_code == 200
            assert "the generator failed to load" in page.text
            assert "secret-model" not in page.text and str(tmp_path) not in page.text
        login(client, "root")
        for page in (client.get("/ui/status", headers=htmx), client.get("/")):
            assert page.status_code == 200 and "secret-model.gguf" in page.text


def test_requests_that_need_a_failed_model_get_its_kind_not_its_text(tmp_path: Path) -> None:
    """Asking a question while the generator failed to load is a 503 that names no file."""
    with broken_generator_app(tmp_path) as client:
        client.app.state.services.wait_until_loaded(30)
        add_user(client, "root", "admin")
        key = {"Authorization": f"Bearer {add_key(client, 'root')}"}
        chat = client.post("/api/chat", json={"message": "When is lunch?"}, headers=key)
        assert chat.status_code == 503 and "the generator failed to load" in chat.text
        messages = [{"role": "user", "content": "hi"}]
        for path, body in (
            ("/v1/chat/completions", {"model": "default", "messages": messages}),
            ("/api/completions", {"prompt": "Hello"}),
        ):
            response = client.post(path, json=body, headers=key)  # a load is tried again
            assert response.status_code == 503, (path, response.text)
            assert "could not be loaded" in response.text, path
            assert str(tmp_path) not in response.text and ".gguf" not in response.text
        assert str(tmp_path) not in chat.text and ".gguf" not in chat.text
