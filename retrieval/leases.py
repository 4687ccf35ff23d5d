"""Leases on documents to ingest: several processes on one database, none working twice.

Any process that ingests (``ragdesk serve`` in the ``all`` or ``worker`` role, ``ragdesk
ingest``, ``ragdesk sync``) takes a document before it parses it: it writes its replica id
into ``documents.claimed_by`` and a deadline into ``claimed_until``, renews the deadline
while it works, and clears both when it is done. A document another live replica holds is
left alone; one whose replica died is taken over once its lease has run out.

A claim is one ``UPDATE … WHERE`` that checks the lease is free, judged by its row count,
inside a write transaction: writes are serialized across processes (SQLite's single
writer; on PostgreSQL the adapter takes a global advisory lock per write transaction), so
two replicas never both see a free lease. The SQL is portable: ``?`` placeholders and
standard SQL only, the same on SQLite and PostgreSQL.

Deadlines are wall-clock seconds (``time.time()``): the hosts' clocks must agree to well
within a lease (NTP does).

A process that held a data directory is dead when another one holds it (the directory's
lock, ``retrieval.data_lock``): the next process on that directory releases the leases of
the one before it at once (``handover``) instead of waiting for them to run out, so a crash
and restart resumes as quickly as before there were leases.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Collection
from pathlib import Path

from retrieval.db import Database
from retrieval.types import DocumentStatus

log = logging.getLogger(__name__)

# The statuses the ingest worker takes a document in (it resumes parsing and embedding).
WORKED_ON = (DocumentStatus.QUEUED, DocumentStatus.PARSING, DocumentStatus.EMBEDDING)
_WORKED_ON = tuple(status.value for status in WORKED_ON)
_IN_WORKED_ON = f"status IN ({', '.join('?' * len(WORKED_ON))})"
# A lease may be taken when nobody holds it, when it has run out, or when it is ours.
_FREE = "(claimed_until IS NULL OR claimed_until < ? OR claimed_by = ?)"
# Ids per statement when renewing or releasing many (well under every bound on parameters).
_CHUNK = 500

# The file in a data directory naming the replica that last ingested from it.
HANDOVER_FILE = ".ragdesk.replica"

_replica: tuple[int, str] | None = None  # (pid, id): a forked child makes its own


def replica_id() -> str:
    """This process's replica id: host name, pid and a random suffix (pids repeat across
    containers and restarts), made once per process."""
    global _replica
    pid = os.getpid()
    if _replica is None or _replica[0] != pid:
        _replica = (pid, f"{socket.gethostname()}:{pid}:{secrets.token_hex(4)}")
    return _replica[1]


class Leases:
    """Claims, renewals and releases of document leases for one replica.

    ``handover``: the data directory's file naming the replica that ingested from it
    before (see the module's docstring); None: leases of dead replicas just run out.
    """

    def __init__(
        self,
        db: Database,
        *,
        lease_s: float = 60.0,
        replica: str | None = None,
        handover: Path | None = None,
    ):
        self.db = db
        self.lease_s = lease_s
        self.replica = replica or replica_id()
        self.handover = handover
        self._taken_over = False
        self._lock = threading.Lock()

    def claim(self, document_id: int, now: float | None = None) -> bool:
        """Take the document's lease; False when another live replica holds it, or it is
        gone or finished (indexed, failed)."""
        now = time.time() if now is None else now
        with self.db.write() as conn:
            cursor = conn.execute(
                "UPDATE documents SET claimed_by = ?, claimed_until = ?"  # noqa: S608
                f" WHERE id = ? AND {_IN_WORKED_ON} AND {_FREE}",
                [self.replica, now + self.lease_s, document_id, *_WORKED_ON, now, self.replica],
            )
            return int(cursor.rowcount) == 1

    def claim_next(self, now: float | None = None) -> int | None:
        """Take the lease of the oldest document needing work that nobody holds; its id, or
        None when there is none."""
        now = time.time() if now is None else now
        with self.db.write() as conn:
            rows = conn.execute(
                f"SELECT id FROM documents WHERE {_IN_WORKED_ON}"  # noqa: S608
                " AND (claimed_until IS NULL OR claimed_until < ?) ORDER BY id LIMIT 16",
                [*_WORKED_ON, now],
            ).fetchall()
            for (document_id,) in rows:
                cursor = conn.execute(
                    "UPDATE documents SET claimed_by = ?, claimed_until = ?"  # noqa: S608
                    f" WHERE id = ? AND {_IN_WORKED_ON}"
                    " AND (claimed_until IS NULL OR claimed_until < ?)",
                    [self.replica, now + self.lease_s, document_id, *_WORKED_ON, now],
                )
                if cursor.rowcount == 1:
                    return int(document_id)
        return None

    def claimable(self, per_owner: int, now: float | None = None) -> list[tuple[int, int]]:
        """(id, collection id) of documents needing work that nobody else holds, oldest
        first, at most ``per_owner`` of each collection (one collection's backlog never
        hides another's upload); nothing is claimed."""
        now = time.time() if now is None else now
        rows = self.db.read().execute(
            f"""SELECT id, collection_id FROM (
                    SELECT id, collection_id,
                           ROW_NUMBER() OVER (PARTITION BY collection_id ORDER BY id) AS turn
                    FROM documents WHERE {_IN_WORKED_ON}
                    AND (claimed_until IS NULL OR claimed_until < ?)
                ) AS waiting WHERE turn <= ? ORDER BY id""",  # noqa: S608
            [*_WORKED_ON, now, per_owner],
        )
        return [(int(row[0]), int(row[1])) for row in rows]

    def renew(self, document_ids: Collection[int], now: float | None = None) -> set[int]:
        """Push back the deadline of these leases; the ids still held (a document deleted,
        or taken over after the lease ran out, is not)."""
        now = time.time() if now is None else now
        ids = sorted(document_ids)
        held: set[int] = set()
        with self.db.write() as conn:
            for start in range(0, len(ids), _CHUNK):
                part = ids[start : start + _CHUNK]
                marks = ", ".join("?" * len(part))
                conn.execute(
                    "UPDATE documents SET claimed_until = ?"  # noqa: S608
                    f" WHERE claimed_by = ? AND id IN ({marks})",
                    [now + self.lease_s, self.replica, *part],
                )
                rows = conn.execute(
                    f"SELECT id FROM documents WHERE claimed_by = ? AND id IN ({marks})",  # noqa: S608
                    [self.replica, *part],
                ).fetchall()
                held.update(int(row[0]) for row in rows)
        return held

    def release(self, document_ids: Collection[int]) -> None:
        """Give these leases back (those this replica holds): any replica may take them."""
        ids = sorted(document_ids)
        if not ids:
            return
        with self.db.write() as conn:
            for start in range(0, len(ids), _CHUNK):
                part = ids[start : start + _CHUNK]
                marks = ", ".join("?" * len(part))
                conn.execute(
                    "UPDATE documents SET claimed_by = NULL, claimed_until = NULL"  # noqa: S608
                    f" WHERE claimed_by = ? AND id IN ({marks})",
                    [self.replica, *part],
                )

    def take_over(self) -> int:
        """Once per Leases: release every lease of the replica that ingested from this data
        directory before (``handover``; it is dead: this process holds the directory now),
        and name this one in its place. Returns how many were released."""
        with self._lock:
            if self._taken_over or self.handover is None:
                return 0
            self._taken_over = True
            try:
                previous = self.handover.read_text().strip()
            except FileNotFoundError:
                previous = ""
            released = 0
            if previous and previous != self.replica:
                with self.db.write() as conn:
                    cursor = conn.execute(
                        "UPDATE documents SET claimed_by = NULL, claimed_until = NULL"
                        " WHERE claimed_by = ?",
                        [previous],
                    )
                    released = int(cursor.rowcount)
                if released:
                    log.info("took over %d documents %s was ingesting", released, previous)
            try:
                _write_atomically(self.handover, self.replica)
            except OSError:  # a full disk: its leases will run out instead, after a crash
                log.warning("could not record this replica in %s", self.handover, exc_info=True)
            return released


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        staged.write_text(text + "\n")
        staged.replace(path)
    finally:
        staged.unlink(missing_ok=True)
