"""The collection audit: who created, renamed, changed or deleted which collection, when.

Kept apart from the answer audit (``app.auth.audit``): this one records administration,
that one what the model was shown. Rows outlive what they name, so a deleted collection's
record still says what it was called and who deleted it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.auth.principal import Principal
from retrieval.db import Database


@dataclass(frozen=True)
class CollectionEvent:
    collection_id: int
    collection_name: str
    action: str  # created, renamed, changed, deleted, member added …
    detail: str
    user_id: int | None
    key_id: int | None
    at: float


class CollectionAudit:
    def __init__(self, db: Database):
        self.db = db

    def record(
        self,
        principal: Principal | None,
        collection_id: int,
        collection_name: str,
        action: str,
        detail: str = "",
    ) -> None:
        """One administrative change; ``principal`` None: the command line (no user)."""
        user = principal.user.id if principal is not None else None
        key = principal.key_id if principal is not None else None
        with self.db.write() as db:
            db.execute(
                "INSERT INTO collection_audit"
                " (collection_id, collection_name, action, detail, user_id, key_id, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [collection_id, collection_name, action, detail, user, key, time.time()],
            )

    def of(self, collection_id: int, limit: int = 50) -> list[CollectionEvent]:
        """The collection's latest events, newest first."""
        rows = self.db.read().execute(
            "SELECT collection_id, collection_name, action, detail, user_id, key_id, at"
            " FROM collection_audit WHERE collection_id = ? ORDER BY at DESC, id DESC LIMIT ?",
            [collection_id, limit],
        )
        return [CollectionEvent(*tuple(r)) for r in rows]
