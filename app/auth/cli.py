"""``ragdesk users …`` and ``ragdesk keys …``: accounts from the command line.

Secrets (a generated password, a new key) are printed once on stdout and never stored;
``keys create`` prints the key and nothing else, so ``KEY=$(ragdesk keys create …)`` works.
Everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.auth.passwords import generate_password
from app.auth.service import Auth, open_auth
from app.auth.users import AccountError
from app.config.settings import Settings
from app.migrations import open_database
from retrieval.collections import CollectionError, Workspaces
from retrieval.store import DocumentStore


def add_commands(commands: Any) -> None:
    users = commands.add_parser("users", help="create and list user accounts")
    verbs = users.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="create a user; prints the generated password")
    create.add_argument("name")
    create.add_argument("--admin", action="store_true", help="the admin role (default: staff)")
    _collections(create, "make the user a member of this collection (repeatable)")
    create.add_argument("--write", action="store_true", help="members may upload and delete")
    grant = verbs.add_parser("grant", help="make a user a member of collections")
    grant.add_argument("name")
    _collections(grant, "collection (created if missing; repeatable)", required=True)
    grant.add_argument("--write", action="store_true", help="may upload and delete")
    reset = verbs.add_parser("reset-password", help="set a new generated password")
    reset.add_argument("name")
    verbs.add_parser("list", help="list users")
    for verb in (create, grant, reset, verbs.choices["list"]):
        _data_dir(verb)

    keys = commands.add_parser("keys", help="create, list and revoke API keys")
    verbs = keys.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="create a key; prints it (only) once")
    create.add_argument("--user", required=True, help="the user the key acts for")
    _collections(create, "limit the key to this collection (repeatable; default: all)")
    create.add_argument("--read-only", action="store_true", help="no uploads or deletions")
    create.add_argument("--name", default="", help="a label to recognise the key by")
    listing = verbs.add_parser("list", help="list keys (prefix, scope, last use)")
    listing.add_argument("--user")
    revoke = verbs.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id", type=int)
    for verb in (create, listing, revoke):
        _data_dir(verb)


def _collections(parser: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:
    parser.add_argument(
        "--collection", action="append", dest="collections", required=required, help=help
    )


def _data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="database and index (default ./data)")


def run(args: argparse.Namespace) -> int:
    values = {"data_dir": args.data_dir} if args.data_dir else {}
    settings = Settings(**values)
    settings.server.data_dir.mkdir(parents=True, exist_ok=True)
    db = open_database(settings)
    try:
        auth, store = open_auth(settings, db), DocumentStore(db)
        handler = _USERS if args.command == "users" else _KEYS
        return handler[args.verb](auth, store, args)
    except (AccountError, CollectionError) as exc:
        print(f"ragdesk: {exc}", file=sys.stderr)
        return 2
    finally:
        db.close()


def _user_create(auth: Auth, store: DocumentStore, args: argparse.Namespace) -> int:
    # The collections first: a name they refuse must not leave an account made without them.
    collection_ids = [Workspaces(store.db).ensure(name) for name in args.collections or ()]
    password = generate_password()
    user = auth.users.create(args.name, password, "admin" if args.admin else "staff")
    for collection_id in collection_ids:
        auth.members.add(collection_id, user.id, can_write=args.write)
    print(f"created {user.role} {user.name!r}; password (shown once):", file=sys.stderr)
    print(password)
    return 0


def _user_grant(auth: Auth, store: DocumentStore, args: argparse.Namespace) -> int:
    user = _require_user(auth, args.name)
    for name in args.collections:
        auth.members.add(Workspaces(store.db).ensure(name), user.id, can_write=args.write)
    access = "read and write" if args.write else "read"
    print(f"{user.name} may {access}: {', '.join(args.collections)}", file=sys.stderr)
    return 0


def _user_reset(auth: Auth, store: DocumentStore, args: argparse.Namespace) -> int:
    user = _require_user(auth, args.name)
    password = generate_password()
    auth.users.set_password(user.id, password)
    print(f"new password for {user.name!r} (shown once):", file=sys.stderr)
    print(password)
    return 0


def _user_list(auth: Auth, store: DocumentStore, args: argparse.Namespace) -> int:
    for user in auth.users.list():
        state = " (disabled)" if user.disabled else ""
        print(f"{user.id}\t{user.name}\t{user.role}{state}")
    return 0


def _key_create(auth: Auth, store: DocumentStore, args: argparse.Namespace) -> int:
    user = _require_user(auth, args.user)
    collections = None
    if args.collections:
        ids = {c.name: c.id for c in store.collections()}
        unknown = [name for name in args.collections if name not in ids]
        if unknown:
            raise AccountError(f"no collection named {', '.join(map(repr, unknown))}")
        collections = {ids[name] for name in args.collections}
    key, _ = auth.keys.create(
        user, name=args.name, read_only=args.read_only, collections=collections
    )
    print(key)
    return 0


def _key_list(auth: Auth, store: DocumentStore, args: argparse.Namespace) -> int:
    user_id = _require_user(auth, args.user).id if args.user else None
    names = {c.id: c.name for c in store.collections()}
    for key in auth.keys.list(user_id):
        scope = ",".join(sorted(names.get(c, str(c)) for c in key.collections or ())) or "all"
        state = "revoked" if key.revoked_at else ("read-only" if key.read_only else "read-write")
        used = f"{key.last_used_at:.0f}" if key.last_used_at else "never"
        print(f"{key.id}\t{key.display}\t{key.user_name}\t{key.name}\t{scope}\t{state}\t{used}")
    return 0


def _key_revoke(auth: Auth, store: DocumentStore, args: argparse.Namespace) -> int:
    if not auth.keys.revoke(args.id):
        raise AccountError(f"no active key with id {args.id}")
    print(f"revoked key {args.id}", file=sys.stderr)
    return 0


def _require_user(auth: Auth, name: str) -> Any:
    user = auth.users.by_name(name)
    if user is None:
        raise AccountError(f"no user named {name!r}")
    return user


_USERS = {
    "create": _user_create,
    "grant": _user_grant,
    "reset-password": _user_reset,
    "list": _user_list,
}
_KEYS = {"create": _key_create, "list": _key_list, "revoke": _key_revoke}
