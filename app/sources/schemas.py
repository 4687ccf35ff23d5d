"""What the sources API takes and returns. No secret is ever in one: a source names its
credentials, and errors are told with secrets blanked out (app/sources/s3.py)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from app.sources.records import Source, SourceFile, SyncRun

Text = Annotated[str, msgspec.Meta(max_length=1024)]


class SourceIn(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    kind: Literal["directory", "s3"]
    collection: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] = "default"
    path: Text | None = None  # directory: absolute, under RAGDESK_SOURCE_ROOTS
    bucket: Annotated[str, msgspec.Meta(max_length=63)] | None = None
    prefix: Text = ""
    endpoint_url: Text | None = None  # S3-compatible servers (MinIO …); AWS without it
    region: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    credentials: Annotated[str, msgspec.Meta(max_length=64)] | None = None  # a name only
    interval_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0  # 0: on demand only


class ProblemOut(msgspec.Struct):
    path: str
    outcome: str
    reason: str


class RunOut(msgspec.Struct):
    id: int
    source_id: int
    trigger: str
    status: str
    started_at: float
    finished_at: float | None
    added: int
    changed: int
    removed: int
    unchanged: int
    failed: int
    skipped: int
    error: str | None
    problems: list[ProblemOut]

    @classmethod
    def of(cls, run: SyncRun) -> RunOut:
        problems = [ProblemOut(p.path, p.outcome, p.reason) for p in run.problems]
        return cls(
            run.id, run.source_id, run.trigger, run.status, run.started_at, run.finished_at,
            run.added, run.changed, run.removed, run.unchanged, run.failed, run.skipped,
            run.error, problems,
        )  # fmt: skip


class SourceOut(msgspec.Struct):
    id: int
    name: str
    kind: str
    collection: str
    path: str | None
    bucket: str | None
    prefix: str
    endpoint_url: str | None
    region: str | None
    credentials: str | None
    interval_s: float
    created_at: float
    files: int
    syncing: bool
    last_run: RunOut | None

    @classmethod
    def of(
        cls, source: Source, collection: str, files: int, syncing: bool, last: SyncRun | None
    ) -> SourceOut:
        directory = source.kind == "directory"
        return cls(
            id=source.id,
            name=source.name,
            kind=source.kind,
            collection=collection,
            path=source.location if directory else None,
            bucket=None if directory else source.location,
            prefix=source.prefix,
            endpoint_url=source.endpoint_url,
            region=source.region,
            credentials=source.credentials,
            interval_s=source.interval_s,
            created_at=source.created_at,
            files=files,
            syncing=syncing,
            last_run=RunOut.of(last) if last is not None else None,
        )


class SourceList(msgspec.Struct):
    sources: list[SourceOut]


class RunList(msgspec.Struct):
    runs: list[RunOut]


class FileOut(msgspec.Struct):
    path: str
    document_id: int
    content_hash: str
    size: int
    first_seen_at: float
    last_seen_at: float

    @classmethod
    def of(cls, file: SourceFile) -> FileOut:
        return cls(
            file.path, file.document_id, file.content_hash, file.size, file.first_seen_at,
            file.last_seen_at,
        )  # fmt: skip


class FileList(msgspec.Struct):
    files: list[FileOut]
