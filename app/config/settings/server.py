"""The ``server`` section: the HTTP server and its data directory."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from app.config.settings.section import Section


class ServerSettings(Section):
    """The HTTP server and its data directory."""

    host: str = Field("127.0.0.1", description="Interface the HTTP server binds to.")
    port: int = Field(8000, ge=1, le=65535, description="TCP port of the HTTP server.")
    data_dir: Path = Field(
        Path("data"),
        description="Where the SQLite database, FAISS index, uploads and model files live.",
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

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together")
        return self
