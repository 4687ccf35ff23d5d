"""Rows of the sources' tables, as typed values."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

SourceKind = Literal["directory", "s3"]
RunStatus = Literal["running", "done", "failed", "interrupted"]
MAX_PROBLEMS = 200  # per run: the first ones are kept, the rest only counted


@dataclass(frozen=True)
class Source:
    id: int
    name: str
    collection_id: int
    kind: SourceKind
    location: str  # the directory, or the bucket
    prefix: str
    endpoint_url: str | None
    region: str | None
    credentials: str | None  # a name in RAGDESK_SOURCE_CREDENTIALS, never a secret
    interval_s: float
    created_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Source:
        return cls(**row)


@dataclass(frozen=True)
class SourceFile:
    source_id: int
    path: str
    document_id: int
    content_hash: str
    size: int
    version: str
    first_seen_at: float
    last_seen_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SourceFile:
        return cls(**row)


@dataclass(frozen=True)
class Problem:
    path: str
    outcome: Literal["failed", "skipped"]
    reason: str


@dataclass
class Tally:
    """What one run did, counted as it goes."""

    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = 0
    problems: list[Problem] = field(default_factory=list)

    def fail(self, path: str, reason: str) -> None:
        self.failed += 1
        self._note(Problem(path, "failed", reason))

    def skip(self, path: str, reason: str) -> None:
        self.skipped += 1
        self._note(Problem(path, "skipped", reason))

    def _note(self, problem: Problem) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    def problems_json(self) -> str:
        return json.dumps([p.__dict__ for p in self.problems])


@dataclass(frozen=True)
class SyncRun:
    id: int
    source_id: int
    trigger: str
    status: RunStatus
    started_at: float
    finished_at: float | None
    added: int
    changed: int
    removed: int
    unchanged: int
    failed: int
    skipped: int
    error: str | None
    problems: tuple[Problem, ...]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SyncRun:
        values = dict(row)
        values["problems"] = tuple(Problem(**p) for p in json.loads(values["problems"]))
        return cls(**values)
