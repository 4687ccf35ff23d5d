"""Removing what an interrupted write left behind, each file logged (the KV cache's temp
files, a model assembly's partial file)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)


def remove_leftovers(paths: Iterable[Path], interrupted: str) -> list[Path]:
    """Remove ``paths`` (left by an interrupted ``interrupted``), logging each; returns
    the ones removed (a path already gone is skipped)."""
    removed = []
    for path in paths:
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        log.warning("removed %s, left by an interrupted %s (%d bytes)", path, interrupted, size)
        removed.append(path)
    return removed
