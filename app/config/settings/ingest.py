"""The ``ingest`` section: chunking, parsing, checkpoints, the embedding cache."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr

from app.config.settings.section import Section, flat_alias
from retrieval.ingest import IngestConfig
from retrieval.parsers.ocr import OcrOptions


class SourceCredential(BaseModel):
    """Keys for an S3-compatible bucket, named by synced sources (app/sources): secrets are
    never logged, shown or returned."""

    model_config = {"extra": "forbid", "frozen": True}

    access_key_id: SecretStr
    secret_access_key: SecretStr
    session_token: SecretStr | None = None


class IngestSettings(Section):
    """Ingestion: chunking, the sandboxed parsers, checkpoints, the embedding cache
    (retrieval.ingest.IngestConfig)."""

    chunk_tokens: int = Field(200, ge=16, le=2048, description="Largest chunk, in embedder tokens.")
    chunk_overlap_tokens: int = Field(
        40, ge=0, le=512, description="Tokens repeated between neighbouring chunks."
    )
    checkpoint_seconds: float = Field(
        5.0,
        ge=0.0,
        validation_alias=flat_alias("index_checkpoint_seconds", "checkpoint_seconds"),
        description="Quiet period after ingestion before the FAISS file is saved.",
    )
    parse_timeout_s: float = Field(
        120.0, gt=0, le=3600, description="Time budget to parse one document; then it fails."
    )
    parse_memory_mb: int = Field(
        2048,
        ge=256,
        description="Memory cap of each parser process (bombs fail, not the server).",
    )
    parse_processes: int = Field(
        2,
        ge=1,
        le=64,
        description="Documents parsed at once, each in its own sandboxed process, taken in "
        "turn from each collection: one collection's slow file never holds up the others.",
    )
    max_document_passages: int = Field(
        100_000,
        ge=1,
        description="Most passages one document may be cut into; a larger one fails with a "
        "reason (split it). Bounds the memory and time one upload can take.",
    )
    ocr: bool = Field(
        True,
        description="Read scanned PDF pages (no text layer, or one of glyph soup) by OCR, in "
        "the parser processes (on/off).",
    )
    ocr_page_timeout_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Time each scanned page adds to its document's parse budget.",
    )
    ocr_max_pages: int = Field(
        300,
        ge=1,
        description="Most scanned pages OCR reads in one PDF; a PDF with more fails with a reason.",
    )
    ocr_document_budget_s: float = Field(
        1800.0,
        gt=0,
        le=86400,
        description="Most time OCR spends on one document; the scanned pages not read by "
        "then are skipped, and the document is indexed with the others and a note saying so.",
    )
    ocr_threads: int = Field(
        1, ge=1, le=64, description="Threads each parser process uses for OCR."
    )
    embedding_cache_max_mb: int = Field(
        128,
        ge=0,
        description="Cached vectors that no passage needs now (deleted documents, models "
        "used before a reindex) are kept up to this size, least recently used evicted "
        "first; vectors of live passages are always kept (0 = keep none).",
    )
    lease_s: float = Field(
        60.0,
        ge=1.0,
        le=3600.0,
        validation_alias=flat_alias("ingest_lease_s", "lease_s"),
        description="A document being ingested is held by one process under a lease of this "
        "long, renewed every third of it while it works; a process that dies holding one "
        "leaves the document to another when the lease runs out.",
    )
    poll_s: float = Field(
        2.0,
        gt=0.0,
        le=600.0,
        validation_alias=flat_alias("ingest_poll_s", "poll_s"),
        description="How often an ingestion worker looks in the database for documents "
        "nobody works on (another server's uploads, leases that ran out).",
    )

    source_roots: list[Path] = Field(
        default_factory=list,
        description="Directories under which synced directory sources may be created "
        "(JSON list); none: directory sources are refused.",
    )
    source_credentials: dict[str, SourceCredential] = Field(
        default_factory=dict,
        description="S3 credentials that synced bucket sources name (JSON object: name -> "
        "access_key_id, secret_access_key, optional session_token).",
    )
    source_s3_endpoints: list[str] = Field(
        default_factory=list,
        description="The only S3 endpoints bucket sources may name (JSON list of endpoint "
        "URLs, or host names for any port); empty: any http(s) endpoint except link-local "
        "addresses (cloud instance metadata). AWS itself (no endpoint_url) is always allowed.",
    )
    sync_check_s: float = Field(
        15.0,
        ge=0,
        le=3600,
        description="How often the server looks for synced sources due for their scheduled "
        "sync (0: scheduled syncs off; on-demand syncs still run).",
    )

    @property
    def embedding_cache_max_bytes(self) -> int:
        return self.embedding_cache_max_mb << 20

    @property
    def parse_memory_bytes(self) -> int:
        return self.parse_memory_mb << 20

    def ocr_options(self) -> OcrOptions | None:
        """How the parser processes read scanned pages; None when OCR is off."""
        return self.ocr_tuning() if self.ocr else None

    def ocr_tuning(self) -> OcrOptions:
        """How scanned pages are read when OCR runs: by default (``ocr``) or for the files
        of a collection whose own switch turns it on."""
        return OcrOptions(
            threads=self.ocr_threads,
            max_pages=self.ocr_max_pages,
            page_timeout_s=self.ocr_page_timeout_s,
            document_budget_s=self.ocr_document_budget_s,
        )

    def config(self) -> IngestConfig:
        """The ingest worker's config (``parse_processes``: one slot per parser process)."""
        return IngestConfig(
            **self._shared_with(IngestConfig),
            embedding_cache_max_bytes=self.embedding_cache_max_bytes,
        )
