"""Evaluation runs kept in the database (migration m009), so runs can be compared over
time."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from retrieval.db import Database
from retrieval.evaluation import EvalReport
from retrieval.sql import insert_row


@dataclass(frozen=True)
class EvalRun:
    id: int
    created_at: float
    golden: str
    collection: str | None
    k: int
    mode: str
    model_id: str
    questions: int
    recall: float
    mrr: float
    answer_containment: float | None
    latency_p50_ms: float
    latency_p95_ms: float


def save_run(
    db: Database,
    report: EvalReport,
    *,
    golden: Path,
    collection: str | None,
    mode: str,
    model_id: str,
) -> int:
    row = {
        "created_at": time.time(),
        "golden": str(golden),
        "golden_sha256": hashlib.sha256(golden.read_bytes()).hexdigest(),
        "collection": collection,
        "k": report.k,
        "mode": mode,
        "model_id": model_id,
        "questions": report.questions,
        "recall": report.recall,
        "mrr": report.mrr,
        "answer_containment": report.answer_containment,
        "latency_p50_ms": report.latency_p50_ms,
        "latency_p95_ms": report.latency_p95_ms,
        "details": json.dumps([asdict(r) for r in report.results]),
    }
    with db.write() as conn:
        return insert_row(conn, "eval_runs", row)


def run_history(db: Database, limit: int = 20) -> list[EvalRun]:
    """The latest ``limit`` runs, oldest first (so a table reads top to bottom in time)."""
    fields = ", ".join(EvalRun.__dataclass_fields__)
    rows = db.read().query(
        f"SELECT {fields} FROM eval_runs ORDER BY id DESC LIMIT ?",  # noqa: S608 - own names
        [limit],
    )
    return [EvalRun(**row) for row in reversed(list(rows))]
