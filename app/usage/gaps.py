"""Content gaps: the questions the documents did not answer (declined or withheld) in a
period, grouped by meaning with the app's own embedder, biggest group first: what to
write next.

Each distinct question is embedded once, when its event is recorded
(:func:`remember_unanswered`), and its vector kept (``usage_question_vectors``, per
embedding model); a grouping is cached in memory until a new event arrives, so the page
stays fast. Work is bounded: the :data:`MAX_QUESTIONS` most asked distinct wordings of the
period are grouped. Wordings recorded before their vector was (events from before this
was built, or a changed embedding model) are embedded at the first view, once.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from app.usage.period import Period
from retrieval.db import Database
from retrieval.embedder import Embedder

MAX_QUESTIONS = 1000  # distinct unanswered wordings grouped per period (the most asked)
MAX_ROWS = 50_000  # events read to find them
SIMILAR = 0.7  # cosine at or above which two questions ask the same thing
EXAMPLES = 5
_CACHED = 16
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Gap:
    """A group of unanswered questions asking much the same thing."""

    question: str  # the most asked of them
    count: int  # how many times any of them was asked
    declined: int
    withheld: int
    examples: tuple[str, ...]  # other wordings, most asked first
    last_at: float


@dataclass(frozen=True)
class GapReport:
    gaps: list[Gap]
    questions: int  # unanswered questions in the period (up to MAX_ROWS)
    distinct: int  # distinct wordings grouped
    truncated: bool  # more than MAX_QUESTIONS distinct wordings: the least asked left out


@dataclass
class _Asked:
    text: str
    count: int = 0
    declined: int = 0
    withheld: int = 0
    last_at: float = 0.0


class GapFinder:
    def __init__(self, db: Database, embedder: Embedder):
        self.db = db
        self.embedder = embedder
        self._cache: OrderedDict[tuple[str, str, int, str], GapReport] = OrderedDict()
        self._lock = threading.Lock()
        self._grouping = threading.Lock()  # held while embedding and grouping

    def find(self, period: Period, limit: int = 50) -> GapReport:
        """The period's gaps, at most ``limit`` groups (blocking: call from a thread)."""
        conn = self.db.read().conn
        latest = conn.execute("SELECT COALESCE(MAX(id), 0) FROM usage_events").fetchone()[0]
        key = (period.first.isoformat(), period.last.isoformat(), int(latest), self.model_id)
        with self._lock:
            cached = self._cache.get(key)
        if cached is None:
            with self._grouping:  # one grouping at a time: a second viewer waits for it
                with self._lock:
                    cached = self._cache.get(key)
                if cached is None:
                    cached = self._group(period)
                    with self._lock:
                        self._cache[key] = cached
                        while len(self._cache) > _CACHED:
                            self._cache.popitem(last=False)
        return GapReport(cached.gaps[:limit], cached.questions, cached.distinct, cached.truncated)

    @property
    def model_id(self) -> str:
        return str(getattr(self.embedder, "model_id", "unknown"))

    def _group(self, period: Period) -> GapReport:
        asked, rows = self._unanswered(period)
        truncated = len(asked) > MAX_QUESTIONS
        ordered = sorted(asked.values(), key=lambda a: (-a.count, -a.last_at))[:MAX_QUESTIONS]
        if not ordered:
            return GapReport([], rows, 0, False)
        vectors = question_vectors(self.db, self.embedder, [a.text for a in ordered])
        similar = vectors @ vectors.T >= SIMILAR
        # A question is always in its own group, even one whose vector is all zeros (text
        # of punctuation only): it led an empty group, and max() of it was a 500.
        np.fill_diagonal(similar, True)
        taken = np.zeros(len(ordered), dtype=bool)
        gaps: list[Gap] = []
        for i, leader in enumerate(ordered):  # the most asked open question leads a group
            if taken[i]:
                continue
            members = np.flatnonzero(similar[i] & ~taken)
            taken[members] = True
            group = [ordered[j] for j in members]
            gaps.append(
                Gap(
                    question=leader.text,
                    count=sum(a.count for a in group),
                    declined=sum(a.declined for a in group),
                    withheld=sum(a.withheld for a in group),
                    examples=tuple(a.text for a in group if a is not leader)[:EXAMPLES],
                    last_at=max(a.last_at for a in group),
                )
            )
        gaps.sort(key=lambda g: (-g.count, -g.last_at))
        return GapReport(gaps, rows, len(ordered), truncated)

    def _unanswered(self, period: Period) -> tuple[dict[str, _Asked], int]:
        """Distinct wordings (case and spacing aside) of the period's unanswered questions."""
        rows = self.db.read().execute(
            "SELECT question, outcome, at FROM usage_events"
            " WHERE outcome IN ('declined', 'withheld') AND at >= ? AND at < ?"
            " ORDER BY at DESC LIMIT ?",
            [period.start_ts, period.end_ts, MAX_ROWS],
        )
        asked: dict[str, _Asked] = {}
        count = 0
        for question, outcome, at in rows:
            count += 1
            text = wording(str(question))
            found = asked.setdefault(text.casefold(), _Asked(text, last_at=float(at)))
            found.count += 1
            if outcome == "declined":
                found.declined += 1
            else:
                found.withheld += 1
        return asked, count


def wording(question: str) -> str:
    """A question as the gaps group it: spacing made plain (case kept for display)."""
    return _SPACES.sub(" ", question).strip()


def remember_unanswered(db: Database, embedder: Embedder, question: str) -> None:
    """Embed and keep an unanswered question's vector as its event is recorded (one short
    text: milliseconds, in the recorder's thread), so no view of the gaps waits for it."""
    question_vectors(db, embedder, [wording(question)])


def question_vectors(db: Database, embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Each text's vector, normalised: from the store, else embedded now (and stored)."""
    model_id = str(getattr(embedder, "model_id", "unknown"))
    hashes = [_hash(t) for t in texts]
    known: dict[str, np.ndarray] = {}
    conn = db.read().conn
    for start in range(0, len(hashes), 500):
        part = hashes[start : start + 500]
        marks = ", ".join("?" for _ in part)
        for question_hash, blob in conn.execute(
            "SELECT question_hash, vector FROM usage_question_vectors"  # noqa: S608
            f" WHERE model_id = ? AND question_hash IN ({marks})",
            [model_id, *part],
        ):
            known[str(question_hash)] = np.frombuffer(blob, dtype=np.float32)
    missing = [i for i, h in enumerate(hashes) if h not in known]
    for start in range(0, len(missing), 64):
        batch = missing[start : start + 64]
        embedded = np.asarray(embedder.embed_batch([texts[i] for i in batch]), np.float32)
        with db.write() as writer:
            writer.conn.executemany(
                "INSERT INTO usage_question_vectors (question_hash, model_id, vector)"
                " VALUES (?, ?, ?) ON CONFLICT (question_hash, model_id)"
                " DO UPDATE SET vector = excluded.vector",
                [(hashes[i], model_id, embedded[n].tobytes()) for n, i in enumerate(batch)],
            )
        for n, i in enumerate(batch):
            known[hashes[i]] = embedded[n]
    matrix = np.stack([known[h] for h in hashes]).astype(np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def _hash(text: str) -> str:
    return hashlib.sha256(text.casefold().encode()).hexdigest()[:32]
