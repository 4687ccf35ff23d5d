"""The ``index`` section: the FAISS index structure."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.config.settings.section import Section, flat_alias
from retrieval.index_types import IndexSpec


class IndexSettings(Section):
    """The FAISS index structure (retrieval.index_types.IndexSpec)."""

    kind: Literal["auto", "flat", "ivf"] = Field(
        "auto",
        validation_alias=flat_alias("index_type", "kind"),
        description="FAISS structure: 'flat' is exact; 'ivf' clusters vectors and searches "
        "the nearest lists; 'auto' is flat below ivf_threshold vectors, IVF from there.",
    )
    ivf_threshold: int = Field(
        50_000, ge=1000, description="Vectors from which 'auto' builds an IVF index."
    )
    nprobe: int = Field(
        64,
        ge=1,
        le=65536,
        validation_alias=flat_alias("ivf_nprobe", "nprobe"),
        description="IVF lists a query visits (more: better recall, slower).",
    )
    use_gpu: bool = Field(
        True,
        validation_alias=flat_alias("faiss_gpu", "use_gpu"),
        description="Search on the GPUs when FAISS reports any (faiss-gpu build).",
    )
    mmap_above_mb: float = Field(
        512.0,
        ge=0,
        validation_alias=flat_alias("index_mmap_above_mb", "mmap_above_mb"),
        description="Search FAISS checkpoints of this size or more memory-mapped from disk "
        "instead of loading them into memory (0: always).",
    )

    def spec(self) -> IndexSpec:
        return IndexSpec(**self._shared_with(IndexSpec))
