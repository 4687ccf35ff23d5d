"""``ragdesk models list|add|remove``: the local models, from the command line.

``list`` prints one model a line, tab-separated (name, kind, file or URL, size, state,
and whether it is the default and offered in chat) under a header; ``add`` and
``remove`` say what they did on stderr. A running server loads models added since it
started once it is restarted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.chat.local_models import NAME_RULE, ChatModels, ModelError
from app.config.settings import Settings
from app.migrations import open_database


def add_commands(commands: Any) -> None:
    models = commands.add_parser("models", help="list, add and remove local models")
    verbs = models.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="list the models: bundled, added, configured")
    add = verbs.add_parser("add", help="add a GGUF file (hard-linked or copied into the data)")
    add.add_argument("path", type=Path, metavar="PATH.gguf")
    add.add_argument("--name", help=f"its name ({NAME_RULE}; default: from the file's name)")
    remove = verbs.add_parser("remove", help="remove an added model and its file")
    remove.add_argument("name")
    for verb in (listing, add, remove):
        verb.add_argument("--data-dir", type=Path, help="database and models (default ./data)")


def run(args: argparse.Namespace) -> int:
    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    settings.server.data_dir.mkdir(parents=True, exist_ok=True)
    db = open_database(settings)
    try:
        models = ChatModels(db, settings)
        if args.verb == "list":
            return _list(models)
        if args.verb == "add":
            added = models.local.add(args.path, args.name)
            path = models.local.path(added)
            print(f"added {added.name} ({path}, {_size(added.size)})", file=sys.stderr)
            print("a running server loads it once restarted", file=sys.stderr)
            return 0
        removed = models.local.remove(args.name)
        print(f"removed {removed.name} and {models.local.path(removed)}", file=sys.stderr)
        return 0
    except (ModelError, OSError) as exc:
        print(f"ragdesk models: {exc}", file=sys.stderr)
        return 2
    finally:
        db.close()


def _list(models: ChatModels) -> int:
    offered = {m.name for m in models.offered()}
    print("name\tkind\tfile\tsize\tstate\tchat")
    for model in models.known():
        chat = "default" if model.default else ("offered" if model.name in offered else "-")
        size = _size(model.size) if model.size is not None else "-"
        print(f"{model.name}\t{model.kind}\t{model.location or '-'}\t{size}\t{model.state}\t{chat}")
    return 0


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
