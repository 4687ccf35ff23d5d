"""Local models: ``ragdesk models list|add|remove``, the admin's choice of the models chat
offers, and a conversation answered by the model chosen for it. Model files here are a
few bytes starting with the GGUF magic: nothing is ever loaded."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from app.chat.local_models import ChatModels, LocalModels, ModelError, added_models, name_for
from app.cli import main
from app.config.models import build_registry, loaders_for
from app.config.settings import Settings
from app.errors import AppError
from app.metrics import Metrics
from app.migrations import open_database
from llm.backend import FakeBackend
from llm.models import BUNDLED, installed
from tests.conftest import add_user, fake_settings, login, signed_in, upload, wait_indexed
from tests.pg_kit import store_under_test

DEFAULT = Settings().generation.bundled_model  # gemma-3-270m in the tests (tests/conftest.py)


def gguf(path: Path, body: bytes = b"\x03\x00\x00\x00 not a real model") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + body)
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(["models", *map(str, args)])
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def rows(out: str) -> dict[str, list[str]]:
    lines = [line.split("\t") for line in out.strip().splitlines()]
    assert lines[0] == ["name", "kind", "file", "size", "state", "chat"]
    return {line[0]: line[1:] for line in lines[1:]}


def observer() -> Metrics:
    return Metrics(lambda: [], lambda: None)


# --- the command line ---------------------------------------------------------------------------
def test_add_list_and_remove_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    source = gguf(tmp_path / "downloads" / "Tiny-Chat.Q4_K_M.gguf")
    code, _, err = cli(capsys, "add", source, "--data-dir", data)
    assert code == 0, err
    placed = data / "models" / "added" / "tiny-chat.q4_k_m.gguf"
    assert "added tiny-chat.q4_k_m" in err and placed.read_bytes() == source.read_bytes()

    code, out, _ = cli(capsys, "list", "--data-dir", data)
    listed = rows(out)
    assert listed["tiny-chat.q4_k_m"] == ["added", str(placed), "25 B", "present", "-"]
    assert listed[DEFAULT][0] == "bundled" and listed[DEFAULT][-1] == "default"
    assert set(BUNDLED) <= set(listed)
    assert next(iter(listed)) == DEFAULT  # the default first

    code, _, err = cli(capsys, "remove", "tiny-chat.q4_k_m", "--data-dir", data)
    assert code == 0, err
    assert not placed.exists() and source.exists()  # only our link or copy goes
    assert "tiny-chat.q4_k_m" not in rows(cli(capsys, "list", "--data-dir", data)[1])


def test_add_with_a_name_and_offered_shows_in_the_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert (
        cli(capsys, "add", gguf(tmp_path / "m.gguf"), "--name", "mini", "--data-dir", data)[0] == 0
    )
    settings = Settings(data_dir=data)
    db = open_database(settings)
    try:
        ChatModels(db, settings).set_offered(["mini"])
    finally:
        db.close()
    assert rows(cli(capsys, "list", "--data-dir", data)[1])["mini"][-1] == "offered"


@pytest.mark.parametrize(
    "name",
    [
        "../evil",
        "a/b",
        "Upper",
        "",
        "x" * 65,
        ".hidden",
        "-rf",
        "nul\x00l",
        "sp ace",
        "default",
        "rag",
        DEFAULT,
        "gemma-3-270m-q4_k_m",  # a bundled model's file
    ],
)
def test_hostile_and_taken_names_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    data = tmp_path / "data"
    code, _, err = cli(
        capsys, "add", gguf(tmp_path / "m.gguf"), f"--name={name}", "--data-dir", data
    )
    assert code == 2 and err.startswith("ragdesk models: "), err
    added = data / "models" / "added"
    assert not added.exists() or list(added.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "m.gguf"]


def test_what_is_not_a_gguf_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    text = tmp_path / "notes.gguf"
    text.write_bytes(b"GGU")  # too short, and not the magic
    (tmp_path / "folder.gguf").mkdir()
    for path in (text, tmp_path / "folder.gguf", tmp_path / "absent.gguf", Path("/dev/null")):
        code, _, err = cli(capsys, "add", path, "--name", "x", "--data-dir", data)
        assert code == 2 and ("not a GGUF" in err or "not a file" in err), (path, err)
    assert added_models(Settings(data_dir=data)) == {}


def test_duplicates_bundled_configured_and_default_models_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    source = gguf(tmp_path / "m.gguf")
    assert cli(capsys, "add", source, "--name", "mini", "--data-dir", data)[0] == 0
    code, _, err = cli(capsys, "add", source, "--name", "mini", "--data-dir", data)
    assert code == 2 and "taken by an added model" in err
    for name, why in [
        (DEFAULT, "is bundled"),
        ("qwen2.5-coder-0.5b", "is bundled"),
        ("nothing", "no added model"),
    ]:
        code, _, err = cli(capsys, "remove", name, "--data-dir", data)
        assert code == 2 and why in err, err
    settings = Settings(data_dir=data, chat_model="mini", models={"far": {"url": "http://x"}})
    db = open_database(settings)
    try:
        local = LocalModels(db, settings)
        with pytest.raises(ModelError, match="default chat model"):
            local.remove("mini")
        with pytest.raises(ModelError, match="configured in the settings"):
            local.remove("far")
        with pytest.raises(ModelError, match="taken by a configured model"):
            local.add(source, "far")
    finally:
        db.close()
    assert (data / "models" / "added" / "mini.gguf").is_file()


def test_names_made_of_file_names() -> None:
    assert name_for(Path("/x/Mistral-7B Instruct.Q4_K_M.gguf")) == "mistral-7b-instruct.q4_k_m"
    assert name_for(Path("../../..gguf")) == ""
    assert len(name_for(Path("a" * 200 + ".gguf"))) == 64


# --- the registry -------------------------------------------------------------------------------
def test_the_loaders_include_added_configured_and_installed_bundled_models(tmp_path: Path) -> None:
    data = tmp_path / "data"
    default = gguf(tmp_path / "own.gguf")
    settings = Settings(
        data_dir=data, generator_model=default, models={"far": {"url": "http://127.0.0.1:9"}}
    )
    assert added_models(settings) == {}  # no database yet
    db = open_database(settings)
    try:
        LocalModels(db, settings).add(gguf(tmp_path / "t.gguf"), "tiny")
    finally:
        db.close()
    assert added_models(settings) == {"tiny": data / "models" / "added" / "tiny.gguf"}
    loaders, default_name = loaders_for(settings, observer())  # nothing is loaded
    assert default_name == "own"
    bundled = {m.name for m in BUNDLED.values() if installed(m)}
    assert set(loaders) == {"own", "tiny", "far", *bundled}
    registry = build_registry(settings, observer())
    assert registry.resolve("default") == "own" and registry.resolve("tiny") == "tiny"
    assert registry.loaded() == []


@pytest.mark.skipif(
    store_under_test() == "postgresql",
    reason="a SQLite file from before m015 (PostgreSQL starts from chat's baseline)",
)
def test_a_database_from_before_the_table_has_no_added_models(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    tmp_path.mkdir(exist_ok=True)
    sqlite3.connect(settings.db_path).close()
    assert added_models(settings) == {}


def test_the_fake_generator_serves_a_fake_under_each_added_or_configured_name(
    tmp_path: Path,
) -> None:
    settings = fake_settings(tmp_path / "data", models={"far": {"url": "http://127.0.0.1:9"}})
    assert build_registry(settings, observer()).names == ["fake", "far"]
    plain = build_registry(fake_settings(tmp_path / "plain"), observer())
    assert plain.names == ["fake"] and plain.resolve("default") == "fake"
    backend = build_registry(settings, observer()).get("far")
    assert isinstance(backend, FakeBackend) and backend.name == "far"


def test_offering_and_choosing(tmp_path: Path) -> None:
    settings = fake_settings(tmp_path / "data")
    db = open_database(settings)
    try:
        models = ChatModels(db, settings)
        models.local.add(gguf(tmp_path / "t.gguf"), "tiny")
        models.local.add(gguf(tmp_path / "g.gguf"), "gone")
        (settings.models_dir / "added" / "gone.gguf").unlink()
        assert [m.name for m in models.offered()] == [DEFAULT]  # the default alone at first
        assert {m.name for m in models.offerable()} >= {"tiny"}
        with pytest.raises(ModelError, match="cannot offer 'gone'"):  # its file is missing
            models.set_offered(["gone"])
        with pytest.raises(ModelError, match="cannot offer 'nope'"):
            models.set_offered(["tiny", "nope"])
        assert models.offered_names() == set()
        models.set_offered(["tiny", DEFAULT])  # the default is offered anyway
        assert [m.name for m in models.offered()] == [DEFAULT, "tiny"]
        assert [m.name for m in models.offered(served={"fake"})] == [DEFAULT]
        assert models.choose("") is None and models.choose(DEFAULT) is None
        assert models.choose(" tiny ") == "tiny"
        with pytest.raises(AppError, match="not offered in chat") as refused:
            models.choose("qwen2.5-coder-0.5b")
        assert refused.value.status == 400
        models.local.remove("tiny")
        assert models.offered_names() == set()
    finally:
        db.close()


# --- the UI -------------------------------------------------------------------------------------
@pytest.fixture
def with_tiny(tmp_path: Path) -> Settings:
    """A data directory with the added model 'tiny' (the fake generator serves a fake 'tiny')."""
    settings = fake_settings(tmp_path / "data")
    db = open_database(settings)
    try:
        LocalModels(db, settings).add(gguf(tmp_path / "tiny.gguf"), "tiny")
    finally:
        db.close()
    return settings


def ask(client: TestClient[Any], **form: str) -> Any:
    return client.post("/ui/ask", data={"message": "When does the canteen open?", **form})


def answer(client: TestClient[Any], turn: Any) -> None:
    question_id = re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1)  # type: ignore[union-attr]
    assert "event: done" in client.get(f"/ui/answers/{question_id}/stream").text


def test_the_admin_offers_a_model_and_a_conversation_answers_with_it(with_tiny: Settings) -> None:
    with signed_in(with_tiny) as client:
        services = client.app.state.services
        models = services.require_models()
        assert 'id="model-choice"' not in client.get("/").text  # only the default is offered
        admin = client.get("/admin").text
        assert 'action="/admin/models"' in admin and 'value="tiny"' in admin
        saved = client.post("/admin/models", data={"offered": "tiny"}, follow_redirects=False)
        assert saved.status_code == 303 and saved.headers["location"] == "/admin"
        assert re.search(r'value="tiny" id="offer-\d+" checked', client.get("/admin").text)
        bad = client.post("/admin/models", data={"offered": ["tiny", "../x"]})
        assert bad.status_code == 422 and "cannot offer" in bad.text
        assert ChatModels(services.db, services.settings).offered_names() == {"tiny"}

        home = client.get("/").text
        assert '<label for="model-choice">Model</label>' in home
        assert f'<option value="" selected>{DEFAULT} (default)</option>' in home
        assert '<option value="tiny">tiny</option>' in home

        document = upload(client, ("canteen.md", b"# Canteen\n\nThe canteen opens at noon."))
        wait_indexed(client, document.json()["documents"][0]["id"])
        turn = ask(client, model="tiny")
        assert turn.status_code == 200
        conversation_id = int(turn.headers["hx-push-url"].removeprefix("/c/"))
        assert services.conversations.get(conversation_id).model == "tiny"
        answer(client, turn)
        assert len(models.get("tiny").history) == 1 and models.get("fake").history == []
        page = client.get(f"/c/{conversation_id}").text
        assert '<option value="tiny" selected>tiny</option>' in page

        refused = ask(client, conversation_id=str(conversation_id), model="qwen-nope")
        assert refused.status_code == 400 and "not offered in chat" in refused.text
        assert len(services.conversations.messages(conversation_id)) == 2  # nothing recorded

        turn = ask(client, conversation_id=str(conversation_id))  # no field: unchanged
        answer(client, turn)
        assert len(models.get("tiny").history) == 2

        client.post("/admin/models", data={})  # no longer offered: the default answers
        assert services.chat.model_for(conversation_id) == "default"
        answer(client, ask(client, conversation_id=str(conversation_id)))
        assert len(models.get("fake").history) == 1
        assert 'id="model-choice"' not in client.get(f"/c/{conversation_id}").text

        client.post("/admin/models", data={"offered": "tiny"})
        assert services.chat.model_for(conversation_id) == "tiny"  # remembered
        ask(client, conversation_id=str(conversation_id), model="")  # back to the default
        assert services.conversations.get(conversation_id).model is None


def test_staff_cannot_choose_what_chat_offers(with_tiny: Settings) -> None:
    with signed_in(with_tiny) as client:
        add_user(client, "ann")
        client.cookies.clear()
        login(client, "ann")
        assert client.post("/admin/models", data={"offered": "tiny"}).status_code == 403
        assert ChatModels(client.app.state.services.db, with_tiny).offered_names() == set()
