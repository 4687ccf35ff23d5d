"""Fair ingestion (#30 N2): how long a one-page upload to another collection waits while a
large DOCX is being embedded, against the same upload on an idle server, in one run.

    python -m bench.fair_ingest [--passages 40000] [--rounds 3]

A real ``ragdesk serve`` (the real embedder, the sandboxed parser; the fake chat model,
which plays no part here) gets a DOCX of ``--passages`` short clauses, each under its own
heading, into the default collection. Once that document is being embedded, a one-page
text file is uploaded to another collection, ``--rounds`` times (each a new file), and
timed from the upload request to ``indexed``. The same one-page uploads are
timed first on the idle server: the baseline. Reported: each time, the longest of
each, and how far the large document had got meanwhile (still embedding: the small
uploads did not wait for it).
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

import httpx

from tests.server import ServerProcess

BODY_START = "<w:body>"
BODY_END = "<w:sectPr"


def large_docx(passages: int) -> bytes:
    """A DOCX of ``passages`` clauses, each a Heading 2 and one paragraph (one passage
    each). Word's own styles come from python-docx's template; the body is written as XML
    directly (python-docx takes minutes to add 80,000 paragraphs)."""
    import docx

    template = io.BytesIO()
    docx.Document().save(template)
    paragraphs = "".join(
        f'<w:p><w:pPr><w:pStyle w:val="Heading2"/></w:pPr><w:r><w:t>Clause {i}</w:t></w:r></w:p>'
        f"<w:p><w:r><w:t>{escape(_clause(i))}</w:t></w:r></w:p>"
        for i in range(passages)
    )
    out = io.BytesIO()
    with zipfile.ZipFile(template) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for entry in source.infolist():
            data = source.read(entry.filename)
            if entry.filename == "word/document.xml":
                xml = data.decode()
                start = xml.index(BODY_START) + len(BODY_START)
                data = (xml[:start] + paragraphs + xml[xml.index(BODY_END, start) :]).encode()
            z.writestr(entry, data)
    return out.getvalue()


def _clause(i: int) -> str:
    return (
        f"Clause {i} of the supplier agreement: deliveries of item {i} arrive within "
        f"{i % 30 + 1} days and invoices are paid net {i % 60 + 10}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    big = large_docx(args.passages)
    with tempfile.TemporaryDirectory(prefix="ragdesk-fair-") as scratch:
        data_dir = Path(scratch) / "data"
        create_collection(data_dir, "other")
        server = ServerProcess(data_dir, Path(scratch) / "server.log", generator_backend="fake")
        server.start(600)
        client = httpx.Client(base_url=server.url, headers=server.headers, timeout=120)
        try:
            idle = [_small_upload(client, f"idle {n}") for n in range(args.rounds)]
            big_id = _upload(client, "contracts.docx", big, None)
            started = time.monotonic()
            _wait_for(client, big_id, "embedding", 600)
            print(
                f"large DOCX: {len(big) / 1e6:.1f} MB, parsed and stored in "
                f"{time.monotonic() - started:.1f} s; now embedding"
            )
            busy = [_small_upload(client, f"busy {n}") for n in range(args.rounds)]
            still = client.get(f"/api/documents/{big_id}").json()["status"]
            passages = client.get(f"/api/documents/{big_id}").json()["chunks"]
        finally:
            client.close()
            server.stop()
    print(
        f"\nOne-page upload to another collection, request -> indexed ({args.rounds} "
        f"each), with a {args.passages:,}-passage DOCX embedding and on an idle server:\n"
    )
    print("| server | times s | longest s |")
    print("| --- | --- | --- |")
    for name, times in (("idle", idle), ("large DOCX embedding", busy)):
        shown = ", ".join(f"{t:.1f}" for t in times)
        print(f"| {name} | {shown} | {max(times):.1f} |")
    print(
        f"\nlongest wait {max(busy):.1f} s against {max(idle):.1f} s idle (bar: 30 s); the "
        f"large DOCX ({passages} passages) was still '{still}' after the last upload"
    )


def create_collection(data_dir: Path, name: str) -> None:
    from app.config.settings import Settings
    from app.migrations import open_database
    from retrieval.store import DocumentStore

    data_dir.mkdir(parents=True)
    db = open_database(Settings(data_dir=data_dir).db_path)
    try:
        DocumentStore(db).ensure_collection(name)
    finally:
        db.close()


def _small_upload(client: httpx.Client, label: str) -> float:
    text = f"Visitor parking ({label}): the barrier code is 4711 and parking costs 4 euros."
    acknowledged = time.monotonic()
    document_id = _upload(client, f"{label}.txt", text.encode(), "other")
    _wait_for(client, document_id, "indexed", 600)
    return time.monotonic() - acknowledged


def _upload(client: httpx.Client, name: str, data: bytes, collection: str | None) -> int:
    params = {"collection": collection} if collection else {}
    response = client.post("/api/documents", params=params, files=[("file", (name, data))])
    response.raise_for_status()
    return int(response.json()["documents"][0]["id"])


def _wait_for(client: httpx.Client, document_id: int, status: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (now := client.get(f"/api/documents/{document_id}").json()["status"]) != status:
        assert now != "failed", f"document {document_id} failed"
        assert time.monotonic() < deadline, f"document {document_id} still {now}"
        time.sleep(0.1)


if __name__ == "__main__":
    main()
