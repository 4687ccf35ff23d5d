"""The ``ragdesk`` command."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ragdesk", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the web server")
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="TCP port (default 8000)")
    serve.add_argument("--data-dir", type=Path, help="database, index, uploads (default ./data)")
    args = parser.parse_args(argv)
    if args.command == "serve":
        _serve(host=args.host, port=args.port, data_dir=args.data_dir)


def _serve(**overrides: Any) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import uvicorn

    from app.factory import create_app
    from app.settings import Settings

    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    print(f"Ragdesk on http://{settings.host}:{settings.port} (data in {settings.data_dir})")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
