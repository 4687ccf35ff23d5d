"""The ``embedder`` section: the embedding model and its batcher."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from app.config.settings.section import Section


class EmbedderSettings(Section):
    """The embedding model and the batcher that shares its passes (retrieval/batching.py)."""

    embedder_backend: Literal["sentence-transformers", "onnx", "onnx-int8", "fake"] = Field(
        "sentence-transformers",
        description="'onnx' runs the same model on ONNX Runtime (exported on first use, same "
        "vectors); 'onnx-int8' quantises it (faster, re-embeds everything once); 'fake' is a "
        "deterministic hashing embedder.",
    )
    fake_embed_delay_s: float = Field(
        0.0, ge=0.0, le=5.0, description="Pause per call of the 'fake' embedder (tests)."
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
    embedder_url: str | None = Field(
        None,
        description="OpenAI-compatible embedding endpoint(s) (other Ragdesk processes, vLLM): "
        "one URL or a JSON list of URLs; set = embed there instead of locally.",
    )
    embedder_remote_model: str | None = Field(
        None,
        description="The model name sent to RAGDESK_EMBEDDER_URL (needed with it); vectors "
        "are tagged remote:<name>, so changing it re-embeds everything.",
    )
    embedder_api_key: SecretStr | None = Field(
        None, description="Bearer key sent to every RAGDESK_EMBEDDER_URL endpoint."
    )
    embedder_remote_same_as_local: bool = Field(
        False,
        description="The endpoints serve the local model (RAGDESK_EMBEDDER_MODEL): checked at "
        "start by comparing their vectors with the local model's; then vectors keep its tag, "
        "and switching between local and remote re-embeds nothing.",
    )
    embedder_remote_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="How long an embedding request (with its retries on other endpoints) "
        "and the start-up probe of each endpoint may take.",
    )

    @field_validator("embedder_url", mode="before")
    @classmethod
    def _url_list_as_json(cls, value: Any) -> Any:
        return json.dumps(list(value)) if isinstance(value, list | tuple) else value

    @model_validator(mode="after")
    def _remote_needs_a_model(self) -> EmbedderSettings:
        if self.embedder_url is not None:
            self.remote_urls()  # raises on a bad list
            if not self.embedder_remote_model:
                raise ValueError("RAGDESK_EMBEDDER_URL needs RAGDESK_EMBEDDER_REMOTE_MODEL")
        return self

    def remote_urls(self) -> tuple[str, ...]:
        """The embedding endpoints; () = embed locally."""
        raw = (self.embedder_url or "").strip()
        if not raw:
            return ()
        urls = json.loads(raw) if raw.startswith("[") else [raw]
        if (
            not urls
            or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls)
            or len(set(urls)) != len(urls)
        ):
            raise ValueError("RAGDESK_EMBEDDER_URL: an http(s) URL or a JSON list of distinct ones")
        return tuple(urls)
