"""Synced sources from a real directory: add, change, delete, unchanged; hand uploads into
the same collection untouched; symlinks and paths out of the root refused; admins only;
the scheduler; ``ragdesk sync``; and the throughput of a sync."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from app.config.settings import Settings
from app.sources.command import run_sync
from app.sources.readers import HARD_LINK, OUT_OF_ROOT
from retrieval.display import REPLACEMENT
from tests.conftest import add_key, add_user, fake_settings, signed_in, upload, wait_for

BINARY = b"\x00\x01\x02\x03 not text at all \xff\xfe"


def source_settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"source_roots": [tmp_path / "roots"], "sync_check_s": 0}
    values.update(overrides)
    return fake_settings(tmp_path / "data", **values)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "roots" / "docs"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient[Any]]:
    """An admin's API key on an app whose source roots are ``tmp_path/roots``."""
    with signed_in(source_settings(tmp_path)) as client:
        wait_for(lambda: client.get("/health/ready").status_code == 200)
        client.cookies.clear()
        client.headers["Authorization"] = f"Bearer {add_key(client)}"
        yield client


def write(folder: Path, files: dict[str, bytes | str]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)


def create(api: TestClient[Any], **fields: Any) -> dict[str, Any]:
    response = api.post("/api/sources", json=fields)
    assert response.status_code == 201, response.text
    source: dict[str, Any] = response.json()
    return source


def sync(api: TestClient[Any], source_id: int) -> dict[str, Any]:
    """Start a sync, wait for its run to end and for every document to be ingested."""
    started = api.post(f"/api/sources/{source_id}/sync")
    assert started.status_code == 202, started.text
    assert started.json()["status"] == "running"
    url = f"/api/sources/{source_id}/runs/{started.json()['id']}"

    def ended() -> dict[str, Any] | None:
        run: dict[str, Any] = api.get(url).json()
        return run if run["status"] != "running" else None

    run: dict[str, Any] = wait_for(ended)
    wait_for(lambda: all(d["status"] in ("indexed", "failed") for d in documents(api)))
    return run


def documents(api: TestClient[Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.get("/api/documents").json()["documents"]
    return found


def found(api: TestClient[Any], words: str) -> set[str]:
    """Titles of the documents whose passages a search for ``words`` returns."""
    hits = api.post("/api/search", json={"query": words, "k": 10}).json()["hits"]
    return {hit["title"] for hit in hits if words.split()[0] in hit["text"]}


def counts(run: dict[str, Any]) -> tuple[int, ...]:
    keys = ("added", "changed", "removed", "unchanged", "failed", "skipped")
    return tuple(run[key] for key in keys)


def test_a_directory_syncs_adds_changes_removes_and_leaves_hand_uploads(
    api: TestClient[Any], root: Path
) -> None:
    write(
        root,
        {
            "alpha.md": "# Alpha\n\nThe zebrafish canteen opens at noon.",
            "beta.md": "# Beta\n\nThe okapi parking is behind the building.",
            "deep/gamma.txt": "Gamma: the narwhal printer is on floor two.",
            "same-as-hand.md": "# Shared\n\nThe axolotl rule applies to everyone.",
            "picture.gif": b"GIF89a\x01\x00",  # a type no parser takes: skipped, never read
            "binary.md": BINARY,  # the parsers refuse its content: skipped with the reason
            ".git/HEAD.md": "hidden: never listed",
        },
    )
    # Uploaded by hand into the same collection: one unique, one with a synced file's bytes.
    hand = upload(api, ("hand.md", b"# Hand\n\nThe quokka form is uploaded by hand."))
    shared = upload(api, ("shared.md", (root / "same-as-hand.md").read_bytes()))
    hand_ids = {hand.json()["documents"][0]["id"], shared.json()["documents"][0]["id"]}

    source = create(api, name="handbook", kind="directory", path=str(root))
    assert source["path"] == str(root.resolve()) and source["files"] == 0
    first = sync(api, source["id"])
    assert first["status"] == "done", first
    assert counts(first) == (4, 0, 0, 0, 0, 2)
    skipped = {p["path"]: p["reason"] for p in first["problems"]}
    assert set(skipped) == {"picture.gif", "binary.md"}
    assert "unsupported" in skipped["picture.gif"] and "binary file" in skipped["binary.md"]
    assert {d["status"] for d in documents(api)} == {"indexed"}
    assert len(documents(api)) == 5  # 3 synced + 2 by hand (the shared bytes are one document)
    assert found(api, "zebrafish canteen") == {"Alpha"}
    files = {f["path"]: f for f in api.get(f"/api/sources/{source['id']}/files").json()["files"]}
    assert set(files) == {"alpha.md", "beta.md", "deep/gamma.txt", "same-as-hand.md"}
    assert files["same-as-hand.md"]["document_id"] == shared.json()["documents"][0]["id"]

    # Nothing changed: nothing is read, nothing re-ingested.
    again = sync(api, source["id"])
    assert counts(again) == (0, 0, 0, 4, 0, 2)
    assert again["finished_at"] >= files["alpha.md"]["last_seen_at"]

    # Change one, touch one without changing it, delete two (one holds the hand upload's bytes).
    (root / "alpha.md").write_text("# Alpha\n\nThe zebrafish canteen now opens at one.")
    os.utime(root / "deep/gamma.txt", (time.time() + 5, time.time() + 5))
    (root / "beta.md").unlink()
    (root / "same-as-hand.md").unlink()
    third = sync(api, source["id"])
    assert counts(third) == (0, 1, 2, 1, 0, 2)
    assert found(api, "okapi parking") == set()  # removed from search
    assert any("opens at one" in h["text"] for h in search(api, "zebrafish canteen"))
    assert not any("opens at noon" in h["text"] for h in search(api, "zebrafish canteen"))
    remaining = {d["id"] for d in documents(api)}
    assert hand_ids <= remaining  # hand uploads are never a sync's to delete
    assert found(api, "axolotl rule") == {"Shared"}
    assert found(api, "quokka form") == {"Hand"}
    runs = api.get(f"/api/sources/{source['id']}/runs").json()["runs"]
    assert [r["id"] for r in runs] == [third["id"], again["id"], first["id"]]
    listed = api.get("/api/sources").json()["sources"]
    assert [(s["name"], s["files"], s["last_run"]["id"]) for s in listed] == [
        ("handbook", 2, third["id"])
    ]


def search(api: TestClient[Any], words: str) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = api.post("/api/search", json={"query": words, "k": 10}).json()[
        "hits"
    ]
    return hits


def test_symlinks_out_of_the_root_are_refused(
    api: TestClient[Any], root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    write(outside, {"secret.md": "# Secret\n\nThe wombat password is hunter2."})
    write(root, {"inside.md": "# Inside\n\nThe capybara desk is by the window."})
    (root / "leak.md").symlink_to(outside / "secret.md")
    (root / "leakdir").symlink_to(outside, target_is_directory=True)
    (root / "alias.md").symlink_to(root / "inside.md")  # inside the root: followed
    source = create(api, name="links", kind="directory", path=str(root))
    run = sync(api, source["id"])
    assert run["status"] == "done"
    refused = {p["path"]: p["reason"] for p in run["problems"]}
    assert refused == {"leak.md": OUT_OF_ROOT, "leakdir": OUT_OF_ROOT}
    assert (run["added"], run["skipped"]) == (2, 2)
    assert found(api, "wombat password") == set()
    assert all("wombat" not in d["filename"] for d in documents(api))


def test_n_hard_links_in_a_synced_directory_are_refused(
    api: TestClient[Any], root: Path, tmp_path: Path
) -> None:
    """#30: a hard link inside the synced directory to a file outside it was ingested."""
    outside = tmp_path / "outside"
    write(outside, {"secret.md": "# Secret\n\nThe wombat password is hunter2."})
    write(root, {"inside.md": "# Inside\n\nThe capybara desk is by the window."})
    os.link(outside / "secret.md", root / "leak.md")
    (root / "via.md").symlink_to(root / "leak.md")  # a symlink inside to the hard link
    source = create(api, name="links", kind="directory", path=str(root))
    run = sync(api, source["id"])
    problems = {p["path"]: p["reason"] for p in run["problems"]}
    assert problems == {"leak.md": HARD_LINK, "via.md": HARD_LINK}
    assert found(api, "wombat password") == set()
    assert found(api, "capybara desk") == {"Inside"}


def test_n_a_source_path_with_nul_is_422_not_500(api: TestClient[Any], root: Path) -> None:
    response = api.post(
        "/api/sources", json={"name": "x", "kind": "directory", "path": f"{root}/a\u0000b"}
    )
    assert response.status_code == 422
    assert "NUL" in response.json()["error"]["detail"]


def test_paths_out_of_the_roots_are_refused(api: TestClient[Any], root: Path) -> None:
    traversal = f"{root}/../../../etc"
    for path, words in [
        (traversal, "not under"),
        ("/etc", "not under"),
        ("docs", "absolute"),
        (str(root / "missing"), "not a directory"),
    ]:
        response = api.post("/api/sources", json={"name": "x", "kind": "directory", "path": path})
        assert response.status_code == 422, path
        assert words in response.json()["error"]["detail"], (path, response.text)
    (root / "escape").symlink_to("/etc", target_is_directory=True)
    escape = {"name": "x", "kind": "directory", "path": str(root / "escape")}
    assert api.post("/api/sources", json=escape).status_code == 422
    assert api.get("/api/sources").json()["sources"] == []


def test_without_roots_directory_sources_are_off(tmp_path: Path, root: Path) -> None:
    with signed_in(fake_settings(tmp_path / "data")) as client:
        response = client.post(
            "/api/sources", json={"name": "x", "kind": "directory", "path": str(root)}
        )
        assert response.status_code == 422
        assert "RAGDESK_SOURCE_ROOTS" in response.json()["error"]["detail"]


def test_only_admins_manage_sources(api: TestClient[Any], root: Path) -> None:
    source = create(api, name="handbook", kind="directory", path=str(root))
    admin_key = api.headers["Authorization"]
    add_user(api, "sam")
    read_only = add_key(api, read_only=True)
    for key in (add_key(api, "sam"), read_only):
        api.headers["Authorization"] = f"Bearer {key}"
        assert api.get("/api/sources").status_code == 403
        assert api.post(f"/api/sources/{source['id']}/sync").status_code == 403
        assert api.get(f"/api/sources/{source['id']}/runs").status_code == 403
        assert api.delete(f"/api/sources/{source['id']}").status_code == 403
        assert api.post("/api/sources", json={"name": "y", "kind": "s3"}).status_code == 403
    del api.headers["Authorization"]
    assert api.get("/api/sources").status_code == 401
    api.headers["Authorization"] = admin_key
    assert api.get("/api/sources/999").status_code == 404
    assert api.post("/api/sources/999/sync").status_code == 404


def test_an_unmounted_directory_fails_the_run_and_removes_nothing(
    api: TestClient[Any], root: Path
) -> None:
    write(root, {"alpha.md": "# Alpha\n\nThe zebrafish canteen opens at noon."})
    source = create(api, name="mount", kind="directory", path=str(root))
    assert sync(api, source["id"])["added"] == 1
    root.rename(root.with_name("elsewhere"))
    run = sync(api, source["id"])
    assert run["status"] == "failed" and "not a directory" in run["error"]
    assert run["removed"] == 0 and len(documents(api)) == 1
    assert found(api, "zebrafish canteen") == {"Alpha"}


def test_an_empty_mount_point_fails_the_run_and_removes_nothing(
    api: TestClient[Any], root: Path
) -> None:
    """An unmounted share is usually an empty directory, not a missing one."""
    write(root, {"alpha.md": "# Alpha\n\nThe zebrafish canteen opens at noon."})
    source = create(api, name="share", kind="directory", path=str(root))
    assert sync(api, source["id"])["added"] == 1
    (root / "alpha.md").rename(root.parent / "alpha.md")  # the share's files are gone
    run = sync(api, source["id"])
    assert run["status"] == "failed" and "unmounted" in run["error"]
    assert run["removed"] == 0 and found(api, "zebrafish canteen") == {"Alpha"}


def test_a_hand_upload_of_a_synced_files_bytes_outlives_the_file(
    api: TestClient[Any], root: Path
) -> None:
    write(
        root,
        {
            "alpha.md": "# Alpha\n\nThe zebrafish canteen opens at noon.",
            "beta.md": "# Beta\n\nThe okapi parking is behind the building.",
        },
    )
    source = create(api, name="handbook", kind="directory", path=str(root))
    assert sync(api, source["id"])["added"] == 2
    again = upload(api, ("mine.md", (root / "alpha.md").read_bytes()))  # synced first
    assert again.json()["documents"][0]["duplicate"] is True
    (root / "alpha.md").unlink()
    run = sync(api, source["id"])
    assert run["removed"] == 1  # the file left the source ...
    assert found(api, "zebrafish canteen") == {"Alpha"}  # ... but a person uploaded it too


def test_deleting_a_source_removes_its_documents_only(api: TestClient[Any], root: Path) -> None:
    write(root, {"alpha.md": "# Alpha\n\nThe zebrafish canteen opens at noon."})
    upload(api, ("hand.md", b"# Hand\n\nThe quokka form is uploaded by hand."))
    source = create(api, name="gone", kind="directory", path=str(root))
    sync(api, source["id"])
    assert len(documents(api)) == 2
    assert api.delete(f"/api/sources/{source['id']}").status_code == 204
    assert [d["filename"] for d in documents(api)] == ["hand.md"]
    assert found(api, "zebrafish canteen") == set()
    assert api.get(f"/api/sources/{source['id']}").status_code == 404


def test_invalid_sources_are_422(api: TestClient[Any], root: Path) -> None:
    good = {"name": "ok", "kind": "directory", "path": str(root)}
    for change in (
        {"name": "../x"},
        {"interval_s": 3},
        {"collection": "nope"},
        {"bucket": "b"},
        {"kind": "ftp"},
        {"unknown": 1},
    ):
        assert api.post("/api/sources", json={**good, **change}).status_code in (400, 422)
    create(api, **good)
    assert api.post("/api/sources", json=good).status_code == 422  # the name is taken


def test_the_scheduler_syncs_sources_when_due(tmp_path: Path, root: Path) -> None:
    write(root, {"alpha.md": "# Alpha\n\nThe zebrafish canteen opens at noon."})
    with signed_in(source_settings(tmp_path, sync_check_s=0.1)) as client:
        source = create(client, name="timed", kind="directory", path=str(root), interval_s=10)
        runs = f"/api/sources/{source['id']}/runs"
        wait_for(lambda: client.get(runs).json()["runs"], timeout=20)
        run = wait_for(lambda: (r := client.get(runs).json()["runs"][0])["status"] == "done" and r)
        assert run["trigger"] == "schedule" and run["added"] == 1
        time.sleep(0.5)  # not due again for 10 s
        assert len(client.get(runs).json()["runs"]) == 1


def test_ragdesk_sync_syncs_and_ingests_without_the_server(tmp_path: Path, root: Path) -> None:
    settings = source_settings(tmp_path)
    write(root, {"alpha.md": "# Alpha\n\nThe zebrafish canteen opens at noon."})
    with signed_in(settings) as client:
        source = create(client, name="cli", kind="directory", path=str(root))
    write(root, {"beta.md": "# Beta\n\nThe okapi parking is behind the building."})
    assert run_sync(settings, "cli") == 0
    assert run_sync(settings, "nope") == 2
    (root / "alpha.md").unlink()
    assert run_sync(settings, str(source["id"])) == 0
    with signed_in(settings) as client:
        assert [d["filename"] for d in documents(client)] == ["beta.md"]
        assert {d["status"] for d in documents(client)} == {"indexed"}
        assert found(client, "okapi parking") == {"Beta"}
        assert found(client, "zebrafish canteen") == set()
        runs = client.get(f"/api/sources/{source['id']}/runs").json()["runs"]
        assert [(r["trigger"], r["added"], r["removed"]) for r in runs] == [
            ("cli", 0, 1),
            ("cli", 2, 0),
        ]


def test_sync_throughput(api: TestClient[Any], root: Path) -> None:
    """200 small Markdown files: the first sync (read, hash, store, queue), ingestion to
    indexed with the fake embedder, and an unchanged re-sync (stat only). Printed (-s)."""
    files = 200
    write(
        root,
        {f"n{i:03}.md": f"# Note {i}\n\nPassage {i} about item {i * 7}." for i in range(files)},
    )
    source = create(api, name="bench", kind="directory", path=str(root))
    started = time.perf_counter()
    first = sync(api, source["id"])
    indexed_s = time.perf_counter() - started
    assert first["added"] == files
    first_s = first["finished_at"] - first["started_at"]
    again = sync(api, source["id"])
    assert again["unchanged"] == files
    again_s = again["finished_at"] - again["started_at"]
    print(
        f"\nsync of {files} new files: {first_s:.2f} s ({files / first_s:.0f} files/s); "
        f"to all indexed (fake embedder): {indexed_s:.2f} s ({files / indexed_s:.0f} files/s); "
        f"unchanged re-sync: {again_s * 1000:.0f} ms ({files / again_s:.0f} files/s)"
    )
    assert again_s < first_s


def test_trigger_reports_the_run_as_running_even_when_it_fails_at_once() -> None:
    """The run is read before its thread starts: a sync that fails in microseconds (an
    unmounted directory) is still ``running`` to the caller that started it."""
    import threading
    from contextlib import nullcontext
    from types import SimpleNamespace

    from app.sources.scheduler import SyncScheduler

    finished = threading.Event()
    statuses: dict[int, str] = {}

    class Store:
        db = SimpleNamespace(held=lambda name, key: nullcontext(True))  # the lock is free

        def start_run(self, source_id: int, trigger: str) -> int:
            statuses[1] = "running"
            return 1

        def run(self, run_id: int) -> SimpleNamespace:
            finished.wait(0.5)  # a read after the thread started sees its end
            return SimpleNamespace(id=run_id, status=statuses[run_id])

    class Syncer:
        stopping = threading.Event()

        def run(self, source: object, trigger: str, run_id: int) -> None:
            statuses[run_id] = "failed"
            finished.set()

    sources = SimpleNamespace(store=Store(), syncer=Syncer())
    scheduler = SyncScheduler(sources, check_s=0, ready=lambda: True)  # type: ignore[arg-type]
    run = scheduler.trigger(SimpleNamespace(id=7, name="share"))  # type: ignore[arg-type]
    assert run.status == "running"
    assert finished.wait(5) and statuses[1] == "failed"
    scheduler.stop()


def test_n_u202e_bel_and_newlines_in_synced_paths_are_not_raw_on_the_history(
    api: TestClient[Any], root: Path
) -> None:
    write(
        root,
        {
            "re\u202eport\x07.md": "# Report\n\nThe okapi budget is 12 euros.",
            "two\nlines.md": "x" * 0,
        },
    )
    source = create(api, name="odd-names", kind="directory", path=str(root))
    sync(api, source["id"])
    for page in (
        api.get(f"/admin/sources/{source['id']}/history").text,
        api.get("/admin/sources").text,
    ):
        assert "\u202e" not in page and "\x07" not in page
        assert "two\nlines" not in page
    history = api.get(f"/admin/sources/{source['id']}/history").text
    assert f"re{REPLACEMENT}port{REPLACEMENT}.md" in history
    assert f"two{REPLACEMENT}lines.md" in history
