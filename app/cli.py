"""The ``ragdesk`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.auth import cli as auth_commands
from app.chat import models_cli as model_commands
from app.config.settings import Settings
from app.documents import collections_cli as collection_commands


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ragdesk", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the web server")
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="TCP port (default 8000)")
    serve.add_argument("--data-dir", type=Path, help="database, index, uploads (default ./data)")
    serve.add_argument("--certfile", type=Path, help="PEM certificate: serve HTTPS")
    serve.add_argument("--keyfile", type=Path, help="PEM private key of --certfile")
    serve.add_argument(
        "--role",
        choices=["all", "web", "worker"],
        help="web: HTTP only, no ingestion; worker: ingestion (and scheduled syncs), HTTP "
        "only for health and metrics; all: both (default, or RAGDESK_ROLE)",
    )
    prepare = commands.add_parser("prepare", help="put the default models in place, then exit")
    prepare.add_argument("--data-dir", type=Path, help="where models are kept (default ./data)")
    ingest = commands.add_parser(
        "ingest", help="add files and directories (recursively) to a collection, then exit"
    )
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    ingest.add_argument("--collection", default="default", help="collection name")
    ingest.add_argument("--data-dir", type=Path, help="database, index, uploads (default ./data)")
    ingest.add_argument("--batch", type=int, default=16, help="documents embedded together")
    evaluate = commands.add_parser(
        "eval", help="recall@k, MRR, answer containment and latency on a golden set (JSONL)"
    )
    evaluate.add_argument("golden", nargs="?", type=Path, metavar="GOLDEN.jsonl")
    evaluate.add_argument("--collection", help="search this collection only (default: all)")
    evaluate.add_argument("--k", type=int, default=5, help="passages retrieved per question")
    evaluate.add_argument("--history", action="store_true", help="list earlier runs")
    evaluate.add_argument(
        "--answers",
        action="store_true",
        help="score the answers chat gives (correctness, citations, abstention, time)",
    )
    evaluate.add_argument("--model", help="with --answers: the model to answer with")
    evaluate.add_argument("--data-dir", type=Path, help="database, index (default ./data)")
    auth_commands.add_commands(commands)
    model_commands.add_commands(commands)
    collection_commands.add_commands(commands)
    reindex = commands.add_parser(
        "reindex", help="re-embed every passage into a new index, then switch to it"
    )
    reindex.add_argument("--data-dir", type=Path, help="database, index (default ./data)")
    reindex.add_argument("--batch", type=int, default=256, help="passages per progress step")
    backup = commands.add_parser(
        "backup", help="copy the data directory consistently, even while the server runs"
    )
    backup.add_argument("dest", type=Path, metavar="DEST", help="a new or empty directory")
    backup.add_argument("--data-dir", type=Path, help="the data directory (default ./data)")
    restore = commands.add_parser(
        "restore", help="check a backup and copy it into a new data directory"
    )
    restore.add_argument("source", type=Path, metavar="SRC", help="what ragdesk backup made")
    restore.add_argument(
        "--data-dir", type=Path, required=True, help="the new data directory (absent or empty)"
    )
    move = commands.add_parser(
        "migrate-store",
        help="copy a SQLite installation's database into an empty PostgreSQL database",
    )
    move.add_argument("--from-data-dir", type=Path, required=True, metavar="DIR")
    move.add_argument("--to", required=True, metavar="postgresql://…", help="the target")
    sync = commands.add_parser(
        "sync", help="sync synced sources (all, or one by name or id) and ingest, then exit"
    )
    sync.add_argument("source", nargs="?", metavar="SOURCE", help="a source's name or id")
    sync.add_argument("--list", action="store_true", help="list sources and their last run")
    sync.add_argument("--data-dir", type=Path, help="database, index, uploads (default ./data)")
    args = parser.parse_args(argv)
    _stay_offline()
    if args.command == "serve":
        _serve(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            tls_certfile=args.certfile,
            tls_keyfile=args.keyfile,
            role=args.role,
        )
    elif args.command == "prepare":
        _prepare(data_dir=args.data_dir)
    elif args.command == "ingest":
        from app.documents.ingest_command import run_ingest

        settings = _settings(data_dir=args.data_dir)
        with _owning(settings, "ragdesk ingest"):
            status = run_ingest(
                settings, args.paths, collection=args.collection, batch_documents=args.batch
            )
        sys.exit(status)
    elif args.command == "eval":
        from app.documents.eval_command import run_eval

        settings = _settings(data_dir=args.data_dir)
        options = {
            "collection": args.collection,
            "k": args.k,
            "history": args.history,
            "answers": args.answers,
            "model": args.model,
        }
        sys.exit(run_eval(settings, args.golden, **options))
    elif args.command == "reindex":
        from app.documents.reindex_command import run_reindex

        settings = _settings(data_dir=args.data_dir)
        with _owning(settings, "ragdesk reindex"):
            status = run_reindex(settings, batch=args.batch)
        sys.exit(status)
    elif args.command in ("backup", "restore"):
        sys.exit(_backup_or_restore(args))
    elif args.command == "migrate-store":
        sys.exit(_migrate_store(args.from_data_dir, args.to))
    elif args.command in ("users", "keys"):
        sys.exit(auth_commands.run(args))
    elif args.command == "models":
        sys.exit(model_commands.run(args))
    elif args.command == "collections":
        sys.exit(collection_commands.run(args))
    elif args.command == "sync":
        from app.sources.command import run_sync

        settings = _settings(data_dir=args.data_dir)
        with _owning(settings, "ragdesk sync"):  # while the server runs: its /api/sources
            status = run_sync(settings, args.source, list_only=args.list)
        sys.exit(status)


def _stay_offline() -> None:
    """Models load from installed packages or local paths; never from a model hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@contextmanager
def _owning(settings: Settings, holder: str) -> Iterator[None]:
    """Hold the data directory (see retrieval.data_lock), or exit 2 saying who holds it."""
    from retrieval.data_lock import DataDirBusy, exclusive

    try:
        with exclusive(settings.server.data_dir, holder):
            yield
    except DataDirBusy as exc:
        print(f"ragdesk: {exc}", file=sys.stderr)
        sys.exit(2)


def _migrate_store(data_dir: Path, url: str) -> int:
    """Exit 0 when every table's count matched; a refusal is one line on stderr."""
    from app.ops.migrate_store import TargetNotEmpty, migrate_store
    from retrieval.pg import StoreUnavailable

    if not url.startswith(("postgresql://", "postgres://")):
        print("ragdesk: --to must be a postgresql:// URL", file=sys.stderr)
        return 2
    try:
        return migrate_store(data_dir, url)
    except (TargetNotEmpty, StoreUnavailable) as exc:
        print(f"ragdesk: {exc}", file=sys.stderr)
        return 1


def _backup_or_restore(args: argparse.Namespace) -> int:
    """Both print what they did; a refusal is one line on stderr and exit status 1."""
    from app.interrupts import INTERRUPTED, sigterm_interrupts
    from app.ops.backup import BackupError, take_backup
    from app.ops.restore import RestoreRefused, restore

    sigterm_interrupts()
    try:
        if args.command == "backup":
            data_dir = _settings(data_dir=args.data_dir).server.data_dir
            manifest = take_backup(data_dir, args.dest, say=print)
            print(f"backed up {len(manifest.files)} files from {data_dir} to {args.dest}")
        else:
            count = restore(args.source, args.data_dir)
            print(f"restored {count} files, each checked, into {args.data_dir}")
    except (BackupError, RestoreRefused, OSError) as exc:
        print(f"ragdesk {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.command == "backup":
            outcome = (
                f"{args.dest} is incomplete (restore refuses a backup without its manifest):"
                " remove it and run the command again"
            )
        else:
            outcome = f"nothing was restored; {args.data_dir} is as it was"
        print(f"\nragdesk {args.command}: interrupted; {outcome}", file=sys.stderr)
        return INTERRUPTED
    return 0


def _settings(**overrides: Any) -> Settings:
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def _prepare(**overrides: Any) -> None:
    from llm.engine.guard import GuardUnavailable, build_guard
    from llm.models import ModelAssemblyError, bundled_model
    from retrieval.embedder import bundled_embedder_dir

    settings = _settings(**overrides)
    if settings.generation.generator_model is None:
        try:
            path = bundled_model(settings.models_dir, settings.generation.bundled_model)
        except ModelAssemblyError as exc:
            print(f"ragdesk prepare: {exc}", file=sys.stderr)
            sys.exit(1)
        print(f"generator: {path}")
    if settings.embedder.embedder_model is None:
        print(f"embedder: {bundled_embedder_dir()}")
    try:
        print(f"sampler guard: {build_guard()}")
    except GuardUnavailable as exc:  # the server still runs; grammars are refused
        print(f"sampler guard: not built ({exc}); grammars and JSON schemas are refused")


def _serve(**overrides: Any) -> None:
    from app.factory import create_app
    from app.ops.server import run

    settings = _settings(**overrides)
    server = settings.server
    scheme = "https" if server.tls_certfile else "http"
    role = "" if server.role == "all" else f", role {server.role}"
    print(f"Ragdesk on {scheme}://{server.host}:{server.port} (data in {server.data_dir}{role})")
    with _owning(settings, f"ragdesk serve on port {server.port}"):
        app = create_app(settings)
        run(  # uvicorn, draining on SIGTERM first (app/ops/server.py)
            app,
            app.state.drain,
            host=server.host,
            port=server.port,
            log_level="info",
            timeout_graceful_shutdown=10,
            ssl_certfile=server.tls_certfile,
            ssl_keyfile=server.tls_keyfile,
            # Forwarded client address and scheme only from the proxies named in the
            # settings (uvicorn would otherwise believe 127.0.0.1).
            proxy_headers=bool(server.trusted_proxies),
            forwarded_allow_ips=server.trusted_proxies or [],
        )
    if getattr(app.state, "work_left_running", False):
        # A thread still inside native code (an embedding slice) past the stop's bound:
        # finalising the interpreter under it aborts (SIGABRT). SQLite has everything and
        # the work resumes on the next start, so end here, as a clean stop.
        logging.shutdown()
        os._exit(0)


# Files and directories Ragdesk creates are its owner's alone (0600 and 0700): the
# database, uploads, the index, backups and manifests alike (docs/SECURITY.md).
PRIVATE_UMASK = 0o077


def run() -> None:
    """The ``ragdesk`` command: :func:`main` with private file modes. (Tests call main()
    in their own process, whose umask they keep.)"""
    os.umask(PRIVATE_UMASK)
    main()


if __name__ == "__main__":
    run()
