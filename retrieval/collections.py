"""Collections as workspaces: their names, descriptions, instructions and switches.

A collection's row (``m021_collection_settings``) holds what its workspace says about
itself: a description for people, instructions for the model (added to the grounded
prompt of conversations scoped to it), whether its scanned PDFs are read by OCR (None:
the deployment's setting) and the chat model its conversations default to. Names are
unique regardless of case, so "HR" and "hr" can never both appear in the sidebar.

Deleting a collection deletes its documents in the same transaction as the row, exactly
as deleting each document would (``Library.delete_collection`` then drops their vectors
and unused originals): ingestion of one of them stops at its next step, as for a
document deleted alone.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from retrieval.db import Database
from retrieval.index import IdArray
from retrieval.lookalikes import describe, first_default_ignorable, look_alike, renders_blank
from retrieval.sql import IntegrityError, RawConnection
from retrieval.store import NEXT_COLLECTION_ID

MAX_NAME_CHARS = 100
MAX_DESCRIPTION_CHARS = 2000
MAX_INSTRUCTIONS_CHARS = 2000
# Invisible or control characters: a name must look like what it is (no bidi overrides
# that show "HR" for another name, no zero-width twins of an existing one).
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_TEXT_CONTROLS_KEPT = frozenset("\n\t")


class CollectionError(Exception):
    """A collection change refused; the message says why, in words for the user."""


class InvalidCollectionInput(CollectionError):
    """A name, description or instruction that cannot be stored."""


class CollectionNameTaken(CollectionError):
    """Another collection has this name (compared regardless of case)."""


class CollectionNameConfusable(CollectionNameTaken):
    """Another collection's name looks the same (the same UTS #39 skeleton): readers
    could not tell the two apart in a list."""


class CollectionMissing(CollectionError):
    """No such collection (deleted meanwhile, or never there)."""


class CollectionInUse(CollectionError):
    """Other records still need the collection (a synced source fills it)."""


@dataclass(frozen=True)
class CollectionSettings:
    id: int
    name: str
    description: str
    instructions: str
    ocr: bool | None  # None: the deployment's RAGDESK_OCR
    default_model: str | None  # None: the deployment's chat model
    document_count: int
    created_at: float
    updated_at: float

    @classmethod
    def from_row(cls, row: Any) -> CollectionSettings:
        ocr = row["ocr"]
        return cls(
            id=int(row["id"]),
            name=str(row["name"]),
            description=str(row["description"]),
            instructions=str(row["instructions"]),
            ocr=None if ocr is None else bool(ocr),
            default_model=row["default_model"],
            document_count=int(row["document_count"]),
            created_at=float(row["created_at"]),
            updated_at=float(row["updated_at"] or row["created_at"]),
        )


@dataclass(frozen=True)
class DeletedCollection:
    """What deleting a collection removed from the database: its documents' passages (to drop
    from the vector index) and their stored originals (to delete when no longer used)."""

    settings: CollectionSettings
    document_ids: tuple[int, ...]
    chunk_ids: IdArray
    stored_names: frozenset[str]


def clean_name(raw: str) -> str:
    """A collection name as stored: NFC, trimmed, 1 to 100 visible characters."""
    name = unicodedata.normalize("NFC", raw).strip()
    if not name:
        raise InvalidCollectionInput("a collection name cannot be blank")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidCollectionInput(
            f"a collection name is at most {MAX_NAME_CHARS} characters (this one has {len(name)})"
        )
    hidden = first_default_ignorable(name) or next(
        (c for c in name if unicodedata.category(c) in _HIDDEN_CATEGORIES), None
    )
    if hidden is not None:
        raise InvalidCollectionInput(
            "a collection name cannot hold control or invisible formatting characters "
            f"(it holds {describe(hidden)})"
        )
    if renders_blank(name):  # braille blanks: not spaces, so strip() left them
        raise InvalidCollectionInput(
            "a collection name cannot be blank: it shows no visible character"
        )
    return name


def clean_text(raw: str, what: str, limit: int) -> str:
    """A description or instructions as stored: NFC, trimmed, lines kept, no other
    control characters, at most ``limit`` characters."""
    text = unicodedata.normalize("NFC", raw.replace("\r\n", "\n").replace("\r", "\n")).strip()
    if len(text) > limit:
        raise InvalidCollectionInput(f"the {what} is at most {limit} characters")
    hidden = {"Cc", "Cs", "Co", "Cn"}
    if any(unicodedata.category(c) in hidden and c not in _TEXT_CONTROLS_KEPT for c in text):
        raise InvalidCollectionInput(f"the {what} cannot hold control characters")
    return text


_SELECT = """SELECT c.id, c.name, c.description, c.instructions, c.ocr, c.default_model,
    c.created_at, c.updated_at,
    (SELECT COUNT(*) FROM documents d WHERE d.collection_id = c.id) AS document_count
    FROM collections c"""


class Workspaces:
    """The collections table as workspaces: read anywhere, written on the one writer."""

    def __init__(self, db: Database):
        self.db = db

    def ensure(self, raw_name: str) -> int:
        """The id of the collection named ``raw_name``, made if there is none: for the command
        line's ``--collection``, under the same name rules as every other door."""
        return self.create(raw_name)[0].id

    def get(self, collection_id: int) -> CollectionSettings | None:
        rows = self.db.read().execute(f"{_SELECT} WHERE c.id = ?", [collection_id])
        row = rows.fetchone()
        return CollectionSettings.from_row(row) if row else None

    def by_name(self, name: str) -> CollectionSettings | None:
        """The collection called ``name``, compared regardless of case."""
        wanted = unicodedata.normalize("NFC", name).strip().casefold()
        return next((c for c in self.every() if c.name.casefold() == wanted), None)

    def every(self) -> list[CollectionSettings]:
        """Every collection by name, in code point order on both stores (a PostgreSQL
        server's collation may sort text otherwise)."""
        rows = self.db.read().execute(_SELECT)
        return sorted((CollectionSettings.from_row(r) for r in rows), key=lambda c: c.name)

    def create(self, raw_name: str) -> tuple[CollectionSettings, bool]:
        """A new collection, or (``created`` False) the one with exactly this name: a
        script that creates its collection at every start needs no check first. Another
        collection spelt with other case is a :class:`CollectionNameTaken`."""
        name = clean_name(raw_name)
        now = time.time()
        with self.db.write() as db:
            existing = self._named(db.conn, name)
            if existing is not None and existing[1] != name:
                raise CollectionNameTaken(f"a collection named {existing[1]!r} exists already")
            if existing is None:
                self._refuse_lookalike(db.conn, name, renaming=None)
                db.execute(
                    "INSERT INTO collections (id, name, created_at, updated_at)"  # noqa: S608
                    f" VALUES ({NEXT_COLLECTION_ID}, ?, ?, ?)",
                    [name, now, now],
                )
        found = self.by_name(name)
        assert found is not None
        return found, existing is None

    def rename(self, collection_id: int, raw_name: str) -> CollectionSettings:
        name = clean_name(raw_name)
        with self.db.write() as db:
            existing = self._named(db.conn, name)
            if existing is not None and existing[0] != collection_id:
                raise CollectionNameTaken(f"a collection named {existing[1]!r} exists already")
            self._refuse_lookalike(db.conn, name, renaming=collection_id)
            cursor = db.execute(
                "UPDATE collections SET name = ?, updated_at = ? WHERE id = ?",
                [name, time.time(), collection_id],
            )
        return self._updated(collection_id, cursor.rowcount)

    def describe(
        self,
        collection_id: int,
        *,
        description: str | None = None,
        instructions: str | None = None,
    ) -> CollectionSettings:
        """Change the description and/or the instructions (None: left as they are)."""
        changes: dict[str, Any] = {}
        if description is not None:
            changes["description"] = clean_text(description, "description", MAX_DESCRIPTION_CHARS)
        if instructions is not None:
            changes["instructions"] = clean_text(
                instructions, "instructions", MAX_INSTRUCTIONS_CHARS
            )
        return self._set(collection_id, changes)

    def set_ocr(self, collection_id: int, ocr: bool | None) -> CollectionSettings:
        return self._set(collection_id, {"ocr": None if ocr is None else int(ocr)})

    def set_default_model(self, collection_id: int, model: str | None) -> CollectionSettings:
        """The model its conversations default to (checked by the caller against what chat
        offers: that list is the app's, not retrieval's)."""
        return self._set(collection_id, {"default_model": model or None})

    def ocr_of(self, collection_id: int) -> bool | None:
        """Whether the collection's scanned pages are read by OCR; None: as deployed."""
        row = (
            self.db.read()
            .execute("SELECT ocr FROM collections WHERE id = ?", [collection_id])
            .fetchone()
        )
        return None if row is None or row[0] is None else bool(row[0])

    def instructions_for(self, collection_ids: Collection[int]) -> list[tuple[str, str]]:
        """(name, instructions) of those of ``collection_ids`` that have instructions, by
        name: the same order every turn, so the prompt's cached prefix stays valid."""
        if not collection_ids:
            return []
        marks = ",".join("?" * len(collection_ids))
        rows = self.db.read().execute(
            f"SELECT name, instructions FROM collections WHERE id IN ({marks})"  # noqa: S608
            " AND instructions != ''",
            sorted(collection_ids),
        )
        return sorted((str(r[0]), str(r[1])) for r in rows)  # code points, as every()

    def default_models(self, collection_ids: Collection[int]) -> set[str]:
        """The distinct default models set on these collections."""
        if not collection_ids:
            return set()
        marks = ",".join("?" * len(collection_ids))
        rows = self.db.read().execute(
            f"SELECT DISTINCT default_model FROM collections WHERE id IN ({marks})"  # noqa: S608
            " AND default_model IS NOT NULL",
            sorted(collection_ids),
        )
        return {str(r[0]) for r in rows}

    def delete(self, collection_id: int) -> DeletedCollection:
        """Delete the collection with its documents, passages and vectors in the database, in one
        transaction; the caller drops the passages from the vector index and deletes the
        originals no other document names. Raises :class:`CollectionMissing`, and
        :class:`CollectionInUse` while other records (a synced source) need it."""
        settings = self.get(collection_id)
        if settings is None:
            raise CollectionMissing("no such collection")
        try:
            with self.db.write() as db:
                documents = db.execute(
                    "SELECT id, stored_name FROM documents WHERE collection_id = ?",
                    [collection_id],
                ).fetchall()
                chunks = db.execute(
                    "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
                    " WHERE d.collection_id = ?",
                    [collection_id],
                ).fetchall()
                # On ``db.conn``: sqlite-utils' ``execute`` would commit the first delete
                # alone, and a refused second one would leave the documents deleted.
                db.conn.execute("DELETE FROM documents WHERE collection_id = ?", [collection_id])
                cursor = db.conn.execute("DELETE FROM collections WHERE id = ?", [collection_id])
        except IntegrityError:  # a synced source's row names it (either store)
            raise CollectionInUse(
                "other records still use this collection (a synced source fills it)"
            ) from None
        if cursor.rowcount == 0:
            raise CollectionMissing("no such collection")
        return DeletedCollection(
            settings,
            tuple(int(r[0]) for r in documents),
            np.asarray([int(r[0]) for r in chunks], dtype=np.int64),
            frozenset(str(r[1]) for r in documents),
        )

    def _named(self, conn: RawConnection, name: str) -> tuple[int, str] | None:
        """(id, name) of the collection called ``name`` regardless of case, read on the
        writer connection inside its transaction (no other writer can add one meanwhile)."""
        wanted = name.casefold()
        for row in conn.execute("SELECT id, name FROM collections"):
            if str(row[1]).casefold() == wanted:
                return int(row[0]), str(row[1])
        return None

    def _refuse_lookalike(self, conn: RawConnection, name: str, renaming: int | None) -> None:
        """Refuse ``name`` when another collection's name looks the same, read on the
        writer inside its transaction as :meth:`_named` is (the same name in another case
        was refused before). Two skeletons per collection: cheap for the hundreds a desk has."""
        for row in conn.execute("SELECT id, name FROM collections"):
            other_id, other = int(row[0]), str(row[1])
            if other_id != renaming and look_alike(name, other):
                raise CollectionNameConfusable(
                    f"{name!r} looks the same as the collection {other!r} (id {other_id}): "
                    "readers could not tell them apart; choose a name that differs visibly"
                )

    def _set(self, collection_id: int, changes: dict[str, Any]) -> CollectionSettings:
        if not changes:
            return self._updated(collection_id, 1)
        assignments = ", ".join(f"{column} = ?" for column in changes)
        with self.db.write() as db:
            cursor = db.execute(
                f"UPDATE collections SET {assignments}, updated_at = ? WHERE id = ?",  # noqa: S608
                [*changes.values(), time.time(), collection_id],
            )
        return self._updated(collection_id, cursor.rowcount)

    def _updated(self, collection_id: int, rowcount: int) -> CollectionSettings:
        found = self.get(collection_id) if rowcount else None
        if found is None:
            raise CollectionMissing("no such collection")
        return found
