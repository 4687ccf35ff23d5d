"""Hardening, round three: each regression test is named after what was found.

- ``/mcp`` held a GET open as a never-ending event stream, though the door is stateless,
  and refused an oversized message in plain text;
- collection names took invisible look-alikes (Hangul fillers, variation selectors, the
  combining grapheme joiner, braille blanks) and confusables of existing names;
- ``POST /api/documents`` ignored a ``collection`` form part;
- ``/api/usage.csv`` said ``charset=utf-8`` twice;
- readiness kept saying ``disk: full`` for a minute after space came back.
"""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from app.cli import main
from app.mcp_door.limits import MAX_BODY_BYTES
from retrieval.collections import clean_name
from retrieval.lookalikes import (
    DEFAULT_IGNORABLE,
    is_default_ignorable,
    look_alike,
    renders_blank,
    skeleton,
)
from tests.conftest import TEST_PASSWORD, add_key, add_user, fake_model, sse_events
from tests.test_mcp import Door, ok, served

JSON_RPC_INVALID_REQUEST = -32600


# --- /mcp: POST only, JSON-RPC refusals -------------------------------------------------------
@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    with served(tmp_path_factory.mktemp("mcp-round3") / "data") as door:
        auth = door.services.auth
        door.keys["boss"] = auth.keys.create(auth.users.create("boss", TEST_PASSWORD, "admin"))[0]
        yield door


def _mcp_headers(door: Door) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {door.keys['boss']}",
    }


def _json_rpc_refusal(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == JSON_RPC_INVALID_REQUEST
    message: str = body["error"]["message"]
    return message


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
def test_mcp_get_and_other_non_post_methods_are_405_allow_post_not_an_endless_stream(
    door: Door, method: str
) -> None:
    """A stateless server offers no stream of its own: the spec's answer to GET is 405
    (the SDK's transport held it open, pinging every 15 s); DELETE ends no session here."""
    headers = {**_mcp_headers(door), "Accept": "text/event-stream"}
    # A bounded read: the old endless stream fails this with a timeout, not a hang.
    response = httpx.request(method, f"{door.url}/mcp", headers=headers, timeout=10)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert "stateless" in _json_rpc_refusal(response)


def test_mcp_message_over_the_limit_is_413_with_a_json_rpc_error(door: Door) -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}
    padded = {**call, "params": {"name": "search", "arguments": {"query": "z" * MAX_BODY_BYTES}}}
    declared = httpx.post(f"{door.url}/mcp", json=padded, headers=_mcp_headers(door))
    assert declared.status_code == 413
    assert "256 KiB" in _json_rpc_refusal(declared)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body is counted as it comes
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"q": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"z" * 65536
        yield b'"}}'

    headers = {**_mcp_headers(door), "Content-Type": "application/json"}
    streamed = httpx.post(f"{door.url}/mcp", content=chunks(), headers=headers)
    assert streamed.status_code == 413
    assert "256 KiB" in _json_rpc_refusal(streamed)
    assert ok(door, "boss", "list_collections", {})["collections"]  # the door still serves


# --- collection names: invisible, blank and look-alike -----------------------------------------
INVISIBLE = {
    "hangul filler beside a name": ("Alpha-Team\u3164", "U+3164"),
    "hangul choseong filler": ("\u115fAlpha-Team", "U+115F"),
    "variation selector 16": ("Alpha-Team\ufe0f", "U+FE0F"),
    "combining grapheme joiner": ("Alpha\u034f-Team", "U+034F"),
    "halfwidth hangul filler": ("Alpha\uffa0Team", "U+FFA0"),
    "tag character": ("Alpha-Team\U000e0041", "U+E0041"),
    "zero width space": ("Alpha\u200b-Team", "U+200B"),
}
BLANK = ["\u2800", "\u2800\u2800\u2800", " \u2800 \u3000\u2800 "]


@pytest.mark.parametrize("name, code_point", INVISIBLE.values(), ids=INVISIBLE.keys())
def test_collection_names_with_a_default_ignorable_code_point_are_422_naming_it(
    client: TestClient[Any], name: str, code_point: str
) -> None:
    made = client.post("/api/collections", json={"name": name})
    assert made.status_code == 422, made.text
    detail = made.json()["error"]["detail"]
    assert "invisible" in detail and code_point in detail
    other = client.post("/api/collections", json={"name": "Other"}).json()
    renamed = client.patch(f"/api/collections/{other['id']}", json={"name": name})
    assert renamed.status_code == 422 and code_point in renamed.json()["error"]["detail"]
    assert name not in {c["name"] for c in client.get("/api/collections").json()["collections"]}


@pytest.mark.parametrize("name", BLANK)
def test_collection_names_that_render_blank_are_422(client: TestClient[Any], name: str) -> None:
    made = client.post("/api/collections", json={"name": name})
    assert made.status_code == 422, made.text
    assert "blank" in made.json()["error"]["detail"]


def test_the_default_ignorable_ranges_are_unicodes() -> None:
    """The constant against an independent reading of DerivedCoreProperties (the regex
    module's ``\\p{DI}``), over every code point: a range mistyped would show here."""
    regex = pytest.importorskip("regex")
    property_ = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    differ = [
        hex(code)
        for code in range(sys.maxunicode + 1)
        if bool(property_.match(chr(code))) != is_default_ignorable(chr(code))
    ]
    assert differ == []
    assert len(DEFAULT_IGNORABLE) == 17


def test_visible_names_stay_accepted() -> None:
    for name in ("HR", "Café policies", "Équipe Alpha", "人事部", "Отдел кадров", "Team 🚀"):
        assert clean_name(name) == name
    assert not renders_blank("a\u2800")


def test_skeletons_match_uts39_for_well_known_confusables() -> None:
    assert skeleton("p\u0430yp\u0430l") == skeleton("paypal")  # Cyrillic а
    assert skeleton("rn") == skeleton("m")
    assert skeleton("AIpha") == skeleton("Alpha")  # capital I, small L
    assert skeleton("Alpha\u200b") == skeleton("Alpha")  # ignorables dropped
    assert look_alike("Alpha-Team", "\u0430lpha-team")  # confusable once case is folded
    assert look_alike("Alpha Team", "Alpha\u2800Team")  # a braille blank reads as a space
    assert not look_alike("Team A", "Team B") and not look_alike("HR", "Finance")


def test_a_confusable_of_an_existing_collection_name_is_409_naming_it(
    client: TestClient[Any],
) -> None:
    alpha = client.post("/api/collections", json={"name": "Alpha-Team"})
    assert alpha.status_code == 201
    for lookalike in ("\u0410lpha-Team", "AIpha-Team", "Alpha-Tea\u217f", "\u0430lpha-team"):
        refused = client.post("/api/collections", json={"name": lookalike})
        assert refused.status_code == 409, (lookalike, refused.text)
        detail = refused.json()["error"]["detail"]
        assert "'Alpha-Team'" in detail and f"id {alpha.json()['id']}" in detail
    again = client.post("/api/collections", json={"name": "Alpha-Team"})
    assert again.status_code == 201 and again.json()["id"] == alpha.json()["id"]  # "ensure"
    beta = client.post("/api/collections", json={"name": "Beta"}).json()
    renamed = client.patch(f"/api/collections/{beta['id']}", json={"name": "Alpha-Te\u0430m"})
    assert renamed.status_code == 409 and "'Alpha-Team'" in renamed.json()["error"]["detail"]
    own = client.patch(f"/api/collections/{alpha.json()['id']}", json={"name": "ALPHA-TEAM"})
    assert own.status_code == 200  # its own name in another case is no look-alike of itself
    names = {c["name"] for c in client.get("/api/collections").json()["collections"]}
    assert {"ALPHA-TEAM", "Beta"} <= names and len(names & {"\u0410lpha-Team", "AIpha-Team"}) == 0


def test_the_new_collection_form_refuses_look_alikes_with_the_reason(
    client: TestClient[Any],
) -> None:
    assert client.post("/collections", data={"name": "Finance"}).status_code == 200
    refused = client.post("/collections", data={"name": "Fin\u0430nce"})
    assert "looks the same" in refused.text and "Finance" in refused.text
    blank = client.post("/collections", data={"name": "\u2800\u2800"})
    assert "blank" in blank.text
    assert "HX-Redirect" not in refused.headers and "HX-Redirect" not in blank.headers


def test_the_cli_refuses_invisible_blank_and_look_alike_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")

    def cli(*argv: str) -> tuple[int, str]:
        with pytest.raises(SystemExit) as exited:
            main(["collections", *argv, "--data-dir", data])
        return int(exited.value.code or 0), capsys.readouterr().err

    assert cli("create", "Legal")[0] == 0
    code, err = cli("create", "Legal\u3164")
    assert code == 2 and "U+3164" in err
    code, err = cli("create", "\u2800")
    assert code == 2 and "blank" in err
    code, err = cli("create", "Lega\u04c0")  # Cyrillic palochka, drawn as "l"
    assert code == 2 and "looks the same" in err
    assert cli("create", "People")[0] == 0
    code, err = cli("rename", "People", "\u217cegal")  # small roman numeral fifty
    assert code == 2 and "looks the same" in err


def test_the_commands_that_make_a_collection_on_the_way_refuse_the_same_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ragdesk ingest --collection`` and ``ragdesk users create/grant --collection`` made
    their collection without any of the name rules; they go through the same door now."""
    data = str(tmp_path / "data")
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe okapi budget is 12 euros.")

    def cli(*argv: str) -> tuple[int, str]:
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--data-dir", data])
        return int(exited.value.code or 0), capsys.readouterr().err

    code, err = cli("ingest", "--collection", "Legal\u3164", str(note))
    assert code == 2 and "U+3164" in err
    code, err = cli("users", "create", "ann", "--collection", "\u2800")
    assert code == 2 and "blank" in err


# --- POST /api/documents honours a "collection" form part ------------------------------------
def _upload(client: TestClient[Any], **form: str) -> httpx.Response:
    files = [("file", ("note.md", b"# Note\n\nThe okapi budget is 12 euros.\n"))]
    response: httpx.Response = client.post("/api/documents", files=files, data=form)
    return response


def _collection_of(client: TestClient[Any], response: httpx.Response) -> int:
    [document] = response.json()["documents"]
    record = client.app.state.services.store.get_document(document["id"])
    return int(record.collection_id)


def test_upload_form_part_collection_by_id_or_name_is_where_the_file_lands(
    client: TestClient[Any],
) -> None:
    team = client.post("/api/collections", json={"name": "Team-B"}).json()
    by_id = _upload(client, collection=str(team["id"]))
    assert by_id.status_code == 201 and _collection_of(client, by_id) == team["id"]
    files = [("file", ("other.md", b"# Other\n\nThe tapir budget is 7 euros.\n"))]
    by_name = client.post("/api/documents", files=files, data={"collection": "Team-B"})
    assert by_name.status_code == 201 and _collection_of(client, by_name) == team["id"]
    default = client.app.state.services.collection_id
    empty = _upload(client, collection="")  # the dialog's "default" choice: the default one
    assert empty.status_code == 201 and _collection_of(client, empty) == default


def test_upload_to_an_unknown_or_ambiguous_collection_is_refused_and_nothing_stored(
    client: TestClient[Any],
) -> None:
    before = len(client.get("/api/documents").json()["documents"])
    unknown = _upload(client, collection="Nowhere")
    assert unknown.status_code == 404 and "Nowhere" in unknown.json()["error"]["detail"]
    assert _upload(client, collection="987654").status_code == 404
    team = client.post("/api/collections", json={"name": "Team-C"}).json()
    files = [("file", ("x.md", b"# X\n\ntext\n"))]
    twice = client.post(
        "/api/documents?collection=default", files=files, data={"collection": "Team-C"}
    )
    assert twice.status_code == 422 and "more than one collection" in twice.text
    same = client.post(
        "/api/documents?collection=Team-C", files=files, data={"collection": str(team["id"])}
    )
    assert same.status_code == 201  # the query and the form name the same one
    assert len(client.get("/api/documents").json()["documents"]) == before + 1


def test_upload_form_part_to_a_collection_a_reader_may_not_write_is_403(
    client: TestClient[Any],
) -> None:
    services = client.app.state.services
    team = client.post("/api/collections", json={"name": "Readers"}).json()
    secret = client.post("/api/collections", json={"name": "Secret"}).json()
    kim = add_user(client, "kim")
    services.auth.members.add(team["id"], kim.id, can_write=False)
    key = add_key(client, "kim")
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    client.headers["Authorization"] = f"Bearer {key}"
    read_only = _upload(client, collection=str(team["id"]))
    assert read_only.status_code == 403
    unreadable = _upload(client, collection="Secret")  # not told apart from a missing one
    assert unreadable.status_code == 404
    assert _upload(client, collection=str(secret["id"])).status_code == 404
    assert all(d.collection_id != team["id"] for d in services.store.list_documents())


# --- one charset in every text response --------------------------------------------------------
@pytest.mark.parametrize("path", ["/api/usage.csv", "/api/usage?format=csv"])
def test_usage_csv_content_type_names_its_charset_once(client: TestClient[Any], path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.text.startswith("section,")


def test_metrics_and_the_markdown_export_name_their_charset_once(client: TestClient[Any]) -> None:
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    fake_model(client).enqueue(["Nothing to cite."])
    asked = client.post("/api/chat", json={"message": "Anything?"})
    done = json.loads(next(data for name, data in sse_events(asked.text) if name == "done"))
    export = client.get(f"/ui/conversations/{done['conversation_id']}/export")
    assert export.status_code == 200
    assert export.headers["content-type"] == "text/markdown; charset=utf-8"


# --- readiness: the disk re-checked when asked ------------------------------------------------
def _disk_reported(client: TestClient[Any]) -> str:
    ready = client.get("/health/ready")
    assert ready.status_code == 200
    disk: str = ready.json()["disk"]
    return disk


def test_readiness_disk_full_clears_as_soon_as_space_comes_back(
    client: TestClient[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = client.app.state.services.disk
    free = {"bytes": 1 << 20}  # 1 MiB: under the floor
    monkeypatch.setattr(disk, "free_bytes", lambda: free["bytes"])
    assert _disk_reported(client) == "full"
    assert disk.saw(OSError(errno.ENOSPC, "No space left on device"))
    assert _disk_reported(client) == "full"
    free["bytes"] = 50 << 30  # the operator deleted old backups
    assert _disk_reported(client) == "ok"  # now, not a minute later
    assert "ragdesk_disk_full 0.0" in client.get("/metrics").text


def test_readiness_keeps_a_failed_write_when_no_space_came_back(
    client: TestClient[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quota (EDQUOT) leaves statvfs's free space as it was: with nothing freed since
    the failure, the failure still counts, as before."""
    disk = client.app.state.services.disk
    monkeypatch.setattr(disk, "free_bytes", lambda: 50 << 30)
    assert _disk_reported(client) == "ok"
    assert disk.saw(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert _disk_reported(client) == "full"
    assert _disk_reported(client) == "full"
