"""The ``server`` section: the HTTP server and its data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from app.config.settings.section import Section

# What a server does (``ragdesk serve --role``): HTTP, ingestion, or both.
Role = Literal["all", "web", "worker"]


class ServerSettings(Section):
    """The HTTP server and its data directory."""

    host: str = Field("127.0.0.1", description="Interface the HTTP server binds to.")
    port: int = Field(8000, ge=1, le=65535, description="TCP port of the HTTP server.")
    data_dir: Path = Field(
        Path("data"),
        description="Where the SQLite database, FAISS index, uploads and model files live.",
    )
    database_url: SecretStr | None = Field(
        None,
        description=(
            "postgresql://user:password@host:5432/db puts every table (and the vectors, with"
            " pgvector) in PostgreSQL, so several fronts can share it; unset: SQLite and"
            " FAISS in the data directory."
        ),
    )
    database_pool_size: int = Field(
        10, ge=2, le=200, description="PostgreSQL connections one front keeps at most."
    )
    database_timeout_s: float = Field(
        30.0,
        gt=0,
        description=(
            "Longest any wait on PostgreSQL may take (a statement, a pooled connection, a"
            " server that stopped answering; connecting: at most 10 s) before the request"
            " gets 503."
        ),
    )
    max_upload_bytes: int = Field(
        50 * 1024 * 1024, gt=0, description="Largest accepted request body; larger gets 413."
    )
    load_samples: bool = Field(
        True, description="Index the bundled user guide and FAQ on the very first start."
    )
    tls_certfile: Path | None = Field(
        None, description="PEM certificate: serve HTTPS (with tls_keyfile)."
    )
    tls_keyfile: Path | None = Field(None, description="PEM private key of tls_certfile.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses (or CIDR ranges) of reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed; empty = none.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=lambda: ["localhost", "127.0.0.1", "[::1]"],
        description="Host header values served (others get 400); the bind address is added; "
        "'*.example.org' matches subdomains. No wildcard by default.",
    )
    drain_s: float = Field(
        20.0,
        ge=0,
        description="On SIGTERM, how long running answers may take to finish (seconds) before "
        "they are ended with an error event; new ones get 503 meanwhile.",
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Other web origins whose scripts may call the API with a key; empty = none.",
    )
    role: Role = Field(
        "all",
        description="What this server does: 'web' serves HTTP and queues uploads but "
        "ingests nothing; 'worker' ingests (and runs scheduled syncs) and serves only "
        "/health/live, /health/ready and /metrics; 'all' both. Several web and worker "
        "servers share one database (ragdesk serve --role).",
    )
    blob_url: str | None = Field(
        None,
        description="Where uploaded originals live, for several servers sharing one library: "
        "s3://bucket/prefix, or an absolute directory (path or file:// URL: a shared volume); "
        "unset = <data_dir>/uploads.",
    )
    blob_endpoint_url: str | None = Field(
        None, description="S3 endpoint of an s3:// blob_url (MinIO, Ceph …); unset = AWS."
    )
    blob_region: str | None = Field(
        None, description="Region of the blob_url bucket; unset = us-east-1."
    )
    blob_access_key_id: SecretStr | None = Field(
        None,
        description="Access key of the blob_url bucket (with blob_secret_access_key); unset = "
        "boto3's own chain (an instance or pod role). Never logged or shown.",
    )
    blob_secret_access_key: SecretStr | None = Field(
        None, description="Secret of blob_access_key_id. Never logged or shown."
    )

    @field_validator("database_url")
    @classmethod
    def _postgresql_only(cls, url: SecretStr | None) -> SecretStr | None:
        if url is None or not url.get_secret_value():
            return None
        if not url.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("database_url must start with postgresql:// (or be unset)")
        return url

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together")
        return self

    @model_validator(mode="after")
    def _blob_store(self) -> ServerSettings:
        url = self.blob_url
        if url is not None and not (
            (url.startswith("s3://") and url[5:].split("/", 1)[0])
            or Path(url.removeprefix("file://")).is_absolute()
        ):
            raise ValueError("blob_url is s3://bucket/prefix or an absolute directory path")
        if (self.blob_access_key_id is None) != (self.blob_secret_access_key is None):
            raise ValueError("blob_access_key_id and blob_secret_access_key go together")
        return self
