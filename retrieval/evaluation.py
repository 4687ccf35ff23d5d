"""Retrieval evaluation against a golden set: recall@k, MRR, answer containment, latency.

A golden set is JSONL, one question per line::

    {"question": "...", "document": "guide.md", "passage": "...", "answer": "..."}

``document`` (a filename or title) and ``passage`` (a string inside the passage) say which
hits are relevant; without ``passage``, ``answer`` plays its part. ``answers`` may list
other correct forms of the answer, and ``reference`` (a list) what a correct generated
answer contains when ``answer`` only locates the passage. A line with none of
``document``, ``passage`` and ``answer`` is an *off-topic* question, which the documents
do not answer: retrieval evaluation leaves it out, answer evaluation expects the
assistant to decline it. ``header`` (a table's column name) makes a hit relevant only
when the passage holds the row *with* its table's header, as a table lookup needs it
(``bench/data/tables``). Answer
containment asks only whether any retrieved passage contains the ``answer`` string. All
string comparisons ignore case.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from retrieval.search import Retriever
from retrieval.store import DocumentStore
from retrieval.types import Hit

T = TypeVar("T")


class GoldenSetError(ValueError):
    """The golden set cannot be used; the message names the line and the problem."""


@dataclass(frozen=True)
class GoldenQuestion:
    question: str
    document: str | None = None
    passage: str | None = None
    answer: str | None = None
    alternatives: tuple[str, ...] = ()  # other correct forms of ``answer``
    reference: tuple[str, ...] = ()  # what a correct *answer* contains, when ``answer``
    # locates the passage rather than answering ("39 degrees of latitude" for "Chile")
    header: str | None = None  # a relevant passage shows its table's header holding this

    @property
    def offtopic(self) -> bool:
        """The documents do not answer it (a golden line naming no document, passage or answer)."""
        return self.document is None and self.passage is None and self.answer is None

    @property
    def answers(self) -> tuple[str, ...]:
        """Every correct form of the answer (none for a question without one)."""
        return ((self.answer,) if self.answer is not None else ()) + self.alternatives

    @property
    def references(self) -> tuple[str, ...]:
        """What a correct generated answer contains: ``reference`` if given, else the answers."""
        return self.reference or self.answers

    def is_relevant(self, hit: Hit, filename: str) -> bool:
        if self.document is not None and self.document.lower() not in (
            filename.lower(),
            hit.title.lower(),
        ):
            return False
        read = hit.reading.lower()
        if self.header is not None and self.header.lower() not in read:
            return False
        needle = self.passage if self.passage is not None else self.answer
        return needle is None or needle.lower() in read

    def contains_answer(self, hits: Sequence[Hit]) -> bool:
        assert self.answer is not None
        return any(a.lower() in hit.reading.lower() for a in self.answers for hit in hits)


def load_golden(path: Path) -> list[GoldenQuestion]:
    return read_rows(path, _question, "questions")


def read_rows(path: Path, parse: Callable[[int, dict[str, Any]], T], what: str) -> list[T]:
    """Each non-blank line of a JSONL file, a JSON object, as ``parse(line number, row)``
    makes it; ``GoldenSetError`` naming the line for anything else."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise GoldenSetError(f"cannot read {path}: {exc}") from exc
    found = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise GoldenSetError(f"line {number}: not JSON ({exc})") from exc
        if not isinstance(row, dict):
            raise GoldenSetError(f"line {number}: expected a JSON object")
        found.append(parse(number, row))
    if not found:
        raise GoldenSetError(f"{path} holds no {what}")
    return found


def _question(number: int, row: dict[str, Any]) -> GoldenQuestion:
    values: dict[str, str | None] = {}
    for key in ("question", "document", "passage", "answer", "header"):
        value = row.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise GoldenSetError(f"line {number}: {key!r} must be a non-empty string")
        values[key] = value
    question = values.pop("question")
    if question is None:
        raise GoldenSetError(f"line {number}: 'question' is missing")
    alternatives = _strings(row, "answers", number)
    reference = _strings(row, "reference", number)
    if (alternatives or reference) and values["answer"] is None:
        raise GoldenSetError(f"line {number}: 'answers' and 'reference' go with an 'answer'")
    return GoldenQuestion(
        question, **values, alternatives=tuple(alternatives), reference=tuple(reference)
    )


def _strings(row: dict[str, object], key: str, number: int) -> tuple[str, ...]:
    value = row.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise GoldenSetError(f"line {number}: {key!r} must be a list of non-empty strings")
    return tuple(value)


def ranking_metrics(ranks: Sequence[int | None], ks: Sequence[int]) -> dict[str, float]:
    """recall@k for each k and MRR, from each question's first relevant rank (None: none)."""
    n = len(ranks)
    found = [r for r in ranks if r is not None]
    result = {f"recall@{k}": sum(r <= k for r in found) / n for k in ks}
    result["mrr"] = sum(1 / r for r in found) / n
    return result


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True)
class QuestionResult:
    question: str
    rank: int | None  # of the first relevant hit, within k
    answer_found: bool | None  # None: the question gives no answer string
    latency_s: float


@dataclass(frozen=True)
class EvalReport:
    k: int
    questions: int
    recall: float  # recall@k
    mrr: float  # MRR@k
    answer_containment: float | None  # over questions that give an answer
    latency_p50_ms: float
    latency_p95_ms: float
    results: tuple[QuestionResult, ...]

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "k": self.k,
            "questions": self.questions,
            f"recall@{self.k}": round(self.recall, 4),
            "mrr": round(self.mrr, 4),
            "answer_containment": None
            if self.answer_containment is None
            else round(self.answer_containment, 4),
            "latency_p50_ms": round(self.latency_p50_ms, 2),
            "latency_p95_ms": round(self.latency_p95_ms, 2),
        }


def evaluate(
    retriever: Retriever,
    store: DocumentStore,
    questions: Sequence[GoldenQuestion],
    *,
    k: int = 5,
    collection_ids: Collection[int] | None = None,
    min_score: float | None = None,
) -> EvalReport:
    """Search each question (end to end, timed) and score the top ``k``."""
    if k < 1:
        raise ValueError("k must be at least 1")
    questions = [q for q in questions if not q.offtopic]
    if not questions:
        raise GoldenSetError("the golden set holds only off-topic questions")
    filenames = {d.id: d.filename for d in store.list_documents()}
    retriever.search(questions[0].question, k, collection_ids=collection_ids)  # warm-up
    results = []
    for item in questions:
        started = time.perf_counter()
        hits = retriever.search(
            item.question, k, min_score=min_score, collection_ids=collection_ids
        ).hits
        latency = time.perf_counter() - started
        rank = next(
            (
                n
                for n, hit in enumerate(hits, start=1)
                if item.is_relevant(hit, filenames.get(hit.document_id, ""))
            ),
            None,
        )
        found = None if item.answer is None else item.contains_answer(hits)
        results.append(QuestionResult(item.question, rank, found, latency))
    scores = ranking_metrics([r.rank for r in results], [k])
    answered = [r.answer_found for r in results if r.answer_found is not None]
    latencies_ms = [r.latency_s * 1000 for r in results]
    return EvalReport(
        k=k,
        questions=len(results),
        recall=scores[f"recall@{k}"],
        mrr=scores["mrr"],
        answer_containment=sum(answered) / len(answered) if answered else None,
        latency_p50_ms=statistics.median(latencies_ms),
        latency_p95_ms=percentile(latencies_ms, 0.95),
        results=tuple(results),
    )
