"""Retrieval objects configured from Settings, shared by the server and the CLI commands."""

from __future__ import annotations

from app.settings import Settings
from retrieval.index_types import IndexSpec


def index_spec(settings: Settings) -> IndexSpec:
    return IndexSpec(
        kind=settings.index_type,
        ivf_threshold=settings.ivf_threshold,
        nprobe=settings.ivf_nprobe,
        use_gpu=settings.faiss_gpu,
    )
