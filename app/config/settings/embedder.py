"""The ``embedder`` section: the embedding model and its batcher."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from app.config.settings.section import Section


class EmbedderSettings(Section):
    """The embedding model and the batcher that shares its passes (retrieval/batching.py)."""

    embedder_backend: Literal["sentence-transformers", "onnx", "onnx-int8", "fake"] = Field(
        "sentence-transformers",
        description="'onnx' runs the same model on ONNX Runtime (exported on first use, same "
        "vectors); 'onnx-int8' quantises it (faster, re-embeds everything once); 'fake' is a "
        "deterministic hashing embedder.",
    )
    embedder_model: Path | None = Field(
        None,
        description="sentence-transformers model directory; unset = bundled all-MiniLM-L6-v2.",
    )
    embed_batch_size: int = Field(
        32, ge=1, le=1024, description="Chunks per embedding forward pass."
    )
    embed_max_wait_ms: float = Field(
        2.0,
        ge=0,
        le=1000,
        description="How long a part-full embedding batch waits for more "
        "callers (questions and ingestion share passes; questions first). 0 = no wait.",
    )
    embed_ingest_batch: int = Field(
        8,
        ge=1,
        le=1024,
        description="Chunks per ingestion forward pass: a question waits for one in flight at "
        "most, so smaller means faster answers during uploads (docs/BENCHMARKS.md).",
    )
    embed_query_threads: int = Field(
        0, ge=0, le=256, description="PyTorch threads for question batches (0 = default)."
    )
    embed_ingest_threads: int = Field(
        0,
        ge=0,
        le=256,
        description="PyTorch threads for ingestion batches (0 = default); "
        "fewer leaves cores to chat while documents are embedded.",
    )
    embed_ingest_yield_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="While a model is generating, each ingestion batch waits up to this long "
        "for it to finish, so answers do not share the CPU with ingestion (0 = never wait).",
    )
