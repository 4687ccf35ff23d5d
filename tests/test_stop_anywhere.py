"""#30 item 3: SIGTERM at any moment of the server's background work exits 0, and the
interrupted work finishes after the next start. Ingestion's embedding is in
tests/test_drain.py (N3); here: a parse busy with OCR, and a sync of a directory source."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.scans import scanned_page, scanned_pdf
from tests.server import ServerProcess, http

STOP_BOUND_S = 60  # the drain time (20 s by default) plus a bounded grace


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.2)
    return found


def stop_with_sigterm(server: ServerProcess) -> int:
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    return server.exit_code(STOP_BOUND_S)


def test_sigterm_while_ocr_reads_a_scan_exits_0_and_the_scan_is_read_after_restart(
    tmp_path: Path,
) -> None:
    server = ServerProcess(
        tmp_path / "data",
        tmp_path / "server.log",
        generator_backend="fake",
        embedder_backend="fake",
    ).start()
    pages = [scanned_page([f"Page {n}: the okapi budget is {n} euros."]) for n in range(4)]
    reply = http.post(
        f"{server.url}/api/documents", files=[("file", ("scan.pdf", scanned_pdf(pages)))]
    )
    document_id = reply.json()["documents"][0]["id"]
    url = f"{server.url}/api/documents/{document_id}"
    # parsing (OCR at work), or past it on a machine fast enough: either way, stop now
    until(lambda: http.get(url).json()["status"] != "queued", 120, "the parse started")
    assert stop_with_sigterm(server) == 0
    assert "terminate called" not in server.log_path.read_text()

    server.start()
    try:
        done = until(
            lambda: (s := http.get(url).json())["status"] in ("indexed", "failed") and s,
            600,
            "read",
        )
        assert done["status"] == "indexed", done
        assert done["pages"] == 4
    finally:
        server.stop()


def test_sigterm_during_a_sync_exits_0_and_the_next_sync_brings_every_file(
    tmp_path: Path,
) -> None:
    root = tmp_path / "share"
    (root / "handbook").mkdir(parents=True)
    for n in range(300):
        (root / "handbook" / f"note-{n:03}.md").write_text(f"# Note {n}\n\nRule {n} applies.\n")
    server = ServerProcess(
        tmp_path / "data",
        tmp_path / "server.log",
        generator_backend="fake",
        embedder_backend="fake",
        source_roots=json.dumps([str(root)]),
    ).start()
    created = http.post(
        f"{server.url}/api/sources",
        json={"name": "handbook", "kind": "directory", "path": str(root / "handbook")},
    )
    assert created.status_code == 201, created.text
    source = created.json()["id"]
    started = http.post(f"{server.url}/api/sources/{source}/sync")
    assert started.status_code == 202, started.text
    run_url = f"{server.url}/api/sources/{source}/runs/{started.json()['id']}"
    until(lambda: http.get(f"{server.url}/api/documents").json()["documents"], 120, "a file came")
    assert stop_with_sigterm(server) == 0
    assert "Traceback" not in server.log_path.read_text()

    server.start()
    try:
        interrupted = http.get(run_url).json()
        assert interrupted["status"] != "running", interrupted  # never left "running"
        again = http.post(f"{server.url}/api/sources/{source}/sync")
        assert again.status_code == 202, again.text
        again_url = f"{server.url}/api/sources/{source}/runs/{again.json()['id']}"
        until(lambda: http.get(again_url).json()["status"] != "running", 300, "the sync ended")
        documents = until(
            lambda: (
                (d := http.get(f"{server.url}/api/documents").json()["documents"])
                and all(x["status"] == "indexed" for x in d)
                and d
            ),
            300,
            "every file indexed",
        )
        assert len(documents) == 300
    finally:
        server.stop()
