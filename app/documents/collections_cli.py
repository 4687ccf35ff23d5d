"""``ragdesk collections …``: workspaces from the command line.

``list`` prints one collection a line, tab-separated (id, name, documents, OCR, default
model, description's first line), for scripts; everything else reports on stderr. The
same rules as the API apply (``app.documents.workspaces``): names checked, the default
collection kept. ``delete`` needs ``--yes`` and the data directory to itself (it exits
2 while the server runs: use the app or ``DELETE /api/collections/{id}`` then, so the
server's vector index drops the passages at once). Changes are audited with no user.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.chat.conversations import Conversations
from app.config.originals import open_originals
from app.config.settings import Settings
from app.documents import workspaces
from app.errors import AppError
from app.migrations import open_database
from retrieval.collections import CollectionSettings, Workspaces
from retrieval.data_lock import DataDirBusy, exclusive
from retrieval.db import Database
from retrieval.library import Library
from retrieval.store import DocumentStore


def add_commands(commands: Any) -> None:
    parser = commands.add_parser("collections", help="create, rename, describe, delete collections")
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", help="list collections (tab-separated)")
    create = verbs.add_parser("create", help="create a collection")
    create.add_argument("name")
    create.add_argument("--description", help="what it holds, for people")
    rename = verbs.add_parser("rename", help="rename a collection")
    rename.add_argument("collection", help="its name or id")
    rename.add_argument("new_name")
    describe = verbs.add_parser("describe", help="set a collection's description and settings")
    describe.add_argument("collection", help="its name or id")
    describe.add_argument("--description", help="what it holds, for people")
    describe.add_argument("--instructions", help="added to the model's rules when answering")
    describe.add_argument("--ocr", choices=("on", "off", "default"), help="read scanned PDFs")
    describe.add_argument("--default-model", help="a model chat offers ('' for the default)")
    delete = verbs.add_parser("delete", help="delete a collection and all its documents")
    delete.add_argument("collection", help="its name or id")
    delete.add_argument("--yes", action="store_true", help="really delete (required)")
    for verb in verbs.choices.values():
        verb.add_argument("--data-dir", type=Path, help="database and index (default ./data)")


def run(args: argparse.Namespace) -> int:
    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    settings.server.data_dir.mkdir(parents=True, exist_ok=True)
    db = open_database(settings)
    try:
        return _run(args, _desk(settings, db))
    except (AppError, DataDirBusy) as exc:
        print(f"ragdesk collections: {getattr(exc, 'detail', exc)}", file=sys.stderr)
        return 2
    finally:
        db.close()


def _desk(settings: Settings, db: Database) -> workspaces.Desk:
    store = DocumentStore(db)
    library = Library(store, open_originals(settings))
    return workspaces.Desk(db, settings, library, Conversations(db), store.ensure_collection())


def _run(args: argparse.Namespace, desk: workspaces.Desk) -> int:
    verb = args.verb
    if verb == "list":
        for c in Workspaces(desk.db).every():
            print(_row(c))
        return 0
    if verb == "create":
        made, created = workspaces.create(desk, None, args.name)
        if args.description is not None:
            made = workspaces.change(
                desk, None, made.id, workspaces.Changes(description=args.description)
            )
        print(f"{'created' if created else 'exists already:'} {made.name} (id {made.id})",
              file=sys.stderr)  # fmt: skip
        return 0
    collection = _find(desk, args.collection)
    if verb == "rename":
        renamed = workspaces.change(
            desk, None, collection.id, workspaces.Changes(name=args.new_name)
        )
        print(f"renamed {collection.name} to {renamed.name}", file=sys.stderr)
        return 0
    if verb == "describe":
        changes = workspaces.Changes(
            description=args.description,
            instructions=args.instructions,
            ocr=args.ocr,
            default_model=args.default_model,
        )
        print(_row(workspaces.change(desk, None, collection.id, changes)))
        return 0
    if not args.yes:
        print(
            f"ragdesk collections: deleting {collection.name} deletes its "
            f"{collection.document_count} documents; run again with --yes",
            file=sys.stderr,
        )
        return 1
    with exclusive(desk.settings.server.data_dir, "ragdesk collections delete"):
        gone = workspaces.delete(desk, None, collection.id)
    print(f"deleted {collection.name} and {len(gone.document_ids)} documents", file=sys.stderr)
    return 0


def _find(desk: workspaces.Desk, name_or_id: str) -> CollectionSettings:
    book = Workspaces(desk.db)
    # an id within the stores' 64-bit integers (a longer run of digits can only be a name)
    is_id = name_or_id.isdecimal() and len(name_or_id) < 19
    found = book.get(int(name_or_id)) if is_id else None
    found = found or book.by_name(name_or_id)
    if found is None:
        raise AppError(f"no collection named {name_or_id[:100]!r}")
    return found


def _row(c: CollectionSettings) -> str:
    ocr = "default" if c.ocr is None else ("on" if c.ocr else "off")
    summary = c.description.splitlines()[0] if c.description else ""
    fields = [str(c.id), c.name, str(c.document_count), ocr, c.default_model or "-", summary]
    return "\t".join(fields)
