"""``ragdesk reindex``: re-embed every passage into a new index and switch to it.

Use it after changing the embedding model (``RAGDESK_EMBEDDER_*``) or the index settings,
with the server stopped: the live index stays valid and in place until the new one is
complete, and an interrupted run loses nothing (vectors already computed are cached).
On PostgreSQL the stored vectors are the index (pgvector): one transaction switches them,
and every front searches with the new model once restarted with its settings.
"""

from __future__ import annotations

import json
import sys
import time

from app.config.retrieval import build_embedder
from app.config.settings import Settings
from app.interrupts import INTERRUPTED, sigterm_interrupts


def run_reindex(settings: Settings, *, batch: int) -> int:
    from app.migrations import open_database
    from retrieval.reindex import reindex
    from retrieval.store import DocumentStore

    if batch < 1:
        print("ragdesk reindex: --batch must be at least 1", file=sys.stderr)
        return 2
    # A SQLite file that is not there means the wrong --data-dir (opening would create
    # one); a PostgreSQL database is the operator's, and opening it sets it up.
    if settings.server.database_url is None and not settings.db_path.exists():
        print(
            f"ragdesk reindex: no Ragdesk database in {settings.server.data_dir}", file=sys.stderr
        )
        return 2
    sigterm_interrupts()
    db = open_database(settings)
    started = time.monotonic()
    tty = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-9)
        line = f"embedded {done}/{total} passages ({rate:.0f}/s)"
        sys.stderr.write(f"\r\x1b[2K{line}" if tty else f"{line}\n")
        sys.stderr.flush()

    try:
        embedder = build_embedder(settings)
        index, report = reindex(
            DocumentStore(db),
            embedder,
            settings.index_dir,
            spec=settings.index.spec(),
            batch=batch,
            progress=progress,
        )
    except KeyboardInterrupt:
        print(
            "\ninterrupted: the live index is unchanged; run again to continue "
            "(passages embedded so far are cached)",
            file=sys.stderr,
        )
        return INTERRUPTED
    finally:
        db.close()
    if tty:
        sys.stderr.write("\n")
    summary = {
        "model_id": index.model_id,
        "index": report.kind,
        "passages": report.chunks,
        "embedded": report.embedded,
        "from_cache": report.reused,
        "seconds": round(report.seconds, 1),
    }
    print(json.dumps(summary, indent=2))
    return 0
