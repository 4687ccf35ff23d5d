"""Creating, checking and deleting sources, and opening their readers, by the settings:
directories only under ``RAGDESK_SOURCE_ROOTS``, credentials only by a name in
``RAGDESK_SOURCE_CREDENTIALS``, bucket endpoints as ``endpoints.py`` allows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app.config.settings.ingest import IngestSettings
from app.sources.endpoints import EndpointRefused, check_endpoint
from app.sources.readers import DirectoryReader, Reader, SourceUnavailable, unsafe_key, within
from app.sources.records import Source, SourceKind
from app.sources.store import SourceExists, SourceStore
from app.sources.sync import Syncer
from retrieval.library import Library

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
MIN_INTERVAL_S = 10.0


class InvalidSource(Exception):
    """What an admin asked for is not a source this server may sync (the API: 422)."""


@dataclass(frozen=True)
class SourceSpec:
    name: str
    collection_id: int
    kind: SourceKind
    path: str | None = None
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    credentials: str | None = None
    interval_s: float = 0.0


class Sources:
    """The sources of a data directory, under the settings' roots and credentials."""

    def __init__(
        self, store: SourceStore, library: Library, settings: IngestSettings, max_bytes: int
    ):
        self.store = store
        self.library = library
        self.settings = settings
        self.syncer = Syncer(store, library, self.open_reader, max_bytes)

    def create(self, spec: SourceSpec) -> Source:
        if not NAME.fullmatch(spec.name):
            raise InvalidSource("a source name is 1 to 64 of A-Z a-z 0-9 . _ - (not first)")
        if not (spec.interval_s == 0 or MIN_INTERVAL_S <= spec.interval_s <= 30 * 86400):
            raise InvalidSource(
                f"interval_s is 0 (on demand only) or {MIN_INTERVAL_S:g} s to 30 days"
            )
        if spec.kind == "directory":
            location, prefix = self._directory(spec.path), ""
            if spec.bucket or spec.endpoint_url or spec.credentials or spec.prefix:
                raise InvalidSource("a directory source takes a path, not bucket settings")
        else:
            location, prefix = self._bucket(spec)
        try:
            return self.store.add(
                name=spec.name,
                collection_id=spec.collection_id,
                kind=spec.kind,
                location=location,
                prefix=prefix,
                endpoint_url=spec.endpoint_url,
                region=spec.region,
                credentials=spec.credentials,
                interval_s=spec.interval_s,
            )
        except SourceExists:
            raise InvalidSource(f"a source named {spec.name!r} exists already") from None

    def delete(self, source_id: int) -> None:
        """The source, its runs and the documents its syncs brought in (hand uploads stay)."""
        for document_id in self.store.delete(source_id):
            self.syncer.release(document_id)

    def open_reader(self, source: Source) -> Reader:
        if source.kind == "directory":
            # Checked again at every run: the roots may have changed since it was created.
            self._directory(source.location)
            return DirectoryReader(Path(source.location))
        from app.sources.s3 import S3Reader  # boto3, on use

        if source.endpoint_url is not None:
            # Again at every run: the operator's list (or the name's address) may have
            # changed since, and a source stored before the check was never checked.
            try:
                check_endpoint(source.endpoint_url, self.settings.source_s3_endpoints)
            except EndpointRefused as exc:
                raise SourceUnavailable(str(exc)) from None
        credential = None
        if source.credentials is not None:
            credential = self.settings.source_credentials.get(source.credentials)
            if credential is None:
                raise SourceUnavailable(
                    f"no credentials named {source.credentials!r} in RAGDESK_SOURCE_CREDENTIALS"
                )
        return S3Reader(
            source.location,
            source.prefix,
            endpoint_url=source.endpoint_url,
            region=source.region,
            credential=credential,
        )

    def _directory(self, path: str | None) -> str:
        """The real path of a directory under one of the roots (``..`` and symlinks resolved
        first, so neither leads out of them)."""
        if not path or not Path(path).is_absolute():
            raise InvalidSource("a directory source needs an absolute 'path'")
        if "\0" in path:  # no file system holds one; resolve() would raise
            raise InvalidSource("a directory source's 'path' cannot contain a NUL character")
        roots = [root.resolve() for root in self.settings.source_roots]
        if not roots:
            raise InvalidSource("directory sources are off: list roots in RAGDESK_SOURCE_ROOTS")
        real = Path(path).resolve()
        if not any(within(real, root) for root in roots):
            raise InvalidSource(f"{path} is not under a directory of RAGDESK_SOURCE_ROOTS")
        if not real.is_dir():
            raise InvalidSource(f"{path} is not a directory")
        return str(real)

    def _bucket(self, spec: SourceSpec) -> tuple[str, str]:
        if spec.path:
            raise InvalidSource("an s3 source takes a bucket, not a path")
        if not spec.bucket or not BUCKET.fullmatch(spec.bucket):
            raise InvalidSource("an s3 source needs a valid 'bucket' name")
        if spec.endpoint_url is not None:
            try:
                check_endpoint(spec.endpoint_url, self.settings.source_s3_endpoints)
            except EndpointRefused as exc:
                raise InvalidSource(str(exc)) from None
        if (
            spec.credentials is not None
            and spec.credentials not in self.settings.source_credentials
        ):
            raise InvalidSource(
                f"no credentials named {spec.credentials!r} in RAGDESK_SOURCE_CREDENTIALS"
            )
        if spec.prefix and unsafe_key(spec.prefix.rstrip("/") or ".") is not None:
            raise InvalidSource("the prefix must be a plain relative key prefix")
        return spec.bucket, spec.prefix
