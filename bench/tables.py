"""Table lookups in every format: does retrieval find the row *with* its header, and does
the chat model then give the cell?

    python -m bench.tables [--formats csv md html docx ...] [--answers] [--model NAME]
                           [--limit N] [--misses]

The 14 tables of ``bench/data/tables/tables.json`` are written in each format
(``bench/table_formats.py``, ``bench/table_files.py``) into a scratch corpus, one file
per table named ``<name>.<ext>``, ingested into a scratch data directory with the real
embedder and FAISS index (as ``ragdesk ingest`` and ``bench.answers`` do), and the 50
lookups of ``golden.jsonl`` are searched: a question is found when one of the top 5 hits
is from its table's file and shows the row's key cell *and* the asked column's header
(``GoldenQuestion.is_relevant``; its ``document``, the table's name, becomes the file's
name for each format). ``--answers`` also asks the chat model (``bench.answers``' path:
the web chat's ``ChatService``) the lookups and the off-topic questions, scoring answers
that hold the gold cell (``app/chat/quality.py``); an answer takes 10-20 s on a laptop,
so use ``--limit``. A format whose parser is not there yet, or fails on every file, is
reported with its failure reason instead of scores. Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import redirect_stdout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.chat.quality import AnswerReport
from app.config.settings import Settings
from bench.answers import evaluate as ask
from bench.answers import share
from bench.table_formats import load_tables, write_corpus, writers
from llm.models import BUNDLED, DEFAULT_MODEL
from retrieval.evaluation import EvalReport, GoldenQuestion, evaluate, load_golden
from retrieval.types import DocumentStatus

DATA = Path(__file__).parent / "data" / "tables"
K = 5
_INGEST: dict[str, Any] = {"collection": "default", "batch_documents": 16}
_MISSING = ("ModuleNotFoundError", "No module named", "ImportError")


@dataclass(frozen=True)
class Outcome:
    extension: str
    questions: int
    retrieval: EvalReport | None = None
    answers: AnswerReport | None = None
    ingest_s: float = 0.0
    failure: str = ""  # why nothing could be scored ("parser missing", a reason)
    note: str = ""  # files that failed while the others were scored


def for_format(questions: list[GoldenQuestion], extension: str) -> list[GoldenQuestion]:
    """The golden questions with ``document`` as the file the table is in for this format."""
    return [
        q if q.document is None else replace(q, document=f"{q.document}.{extension}")
        for q in questions
    ]


def settings_for(data_dir: Path) -> Settings:
    # ``data_dir`` is a flat alias the pydantic plugin does not see (as in bench.answers)
    return Settings(data_dir=data_dir)  # type: ignore[call-arg]


def unindexed(settings: Settings, files: int) -> list[tuple[str, str]]:
    """The files that were not indexed, with the reason a user would be shown (a file
    refused at upload, e.g. an extension not accepted, leaves no document behind)."""
    from app.migrations import open_database
    from retrieval.store import DocumentStore

    db = open_database(settings)
    try:
        documents = DocumentStore(db).list_documents()
    finally:
        db.close()
    failed = [(d.filename, d.error or "") for d in documents if d.status is DocumentStatus.FAILED]
    refused = files - len(documents)
    return failed + [("", "refused at upload (not an accepted type)")] * refused


def describe(failed: list[tuple[str, str]]) -> str:
    if any(marker in reason for _, reason in failed for marker in _MISSING):
        return "parser missing"
    return "; ".join(sorted({reason for _, reason in failed}))


def search_all(settings: Settings, questions: list[GoldenQuestion]) -> EvalReport:
    from app.config.retrieval import read_only_retriever
    from app.migrations import open_database
    from retrieval.store import DocumentStore

    db = open_database(settings)
    try:
        store = DocumentStore(db)
        retriever = read_only_retriever(settings, store)
        min_score = settings.search.min_score if settings.search.mode != "bm25" else None
        return evaluate(retriever, store, questions, k=K, min_score=min_score)
    finally:
        db.close()


def run_format(
    extension: str, scratch: Path, factual: list[GoldenQuestion], args: argparse.Namespace
) -> Outcome:
    from app.documents.ingest_command import run_ingest

    tables = load_tables(DATA / "tables.json")
    corpus = scratch / extension / "corpus"
    write_corpus(tables, extension, corpus)
    settings = settings_for(scratch / extension / "data")
    started = time.perf_counter()
    with redirect_stdout(sys.stderr):  # its summary: stdout is for the table
        run_ingest(settings, [corpus], **_INGEST)
    ingest_s = time.perf_counter() - started
    failed = unindexed(settings, len(tables))
    questions = for_format(factual, extension)
    if len(failed) == len(tables):
        return Outcome(extension, len(questions), ingest_s=ingest_s, failure=describe(failed))
    note = f"{len(failed)} of {len(tables)} files not indexed: {describe(failed)}" if failed else ""
    retrieval = search_all(settings, questions)
    if args.misses:
        for question, result in zip(questions, retrieval.results, strict=True):
            if result.rank is None:
                print(f"  {extension} missed: {question.question}", file=sys.stderr)
    answers = None
    if args.answers:
        offtopic = load_golden(DATA / "offtopic.jsonl")
        if args.limit is not None:
            offtopic = offtopic[: max(1, args.limit // 4)]
        answers = ask(settings.server.data_dir, args.model, questions + offtopic, {})
    return Outcome(extension, len(questions), retrieval, answers, ingest_s, note=note)


def warm_up(scratch: Path) -> None:
    """Ingest one small file first, so the first format's ingest time does not include
    loading the embedder and starting the parser process."""
    from app.documents.ingest_command import run_ingest

    corpus = scratch / "warm-up" / "corpus"
    write_corpus(load_tables(DATA / "tables.json")[:1], "md", corpus)
    with redirect_stdout(sys.stderr):
        run_ingest(settings_for(scratch / "warm-up" / "data"), [corpus], **_INGEST)


def markdown(outcomes: list[Outcome], with_answers: bool) -> str:
    head = ["format", "questions", f"row+header in top {K}"]
    if with_answers:
        head += ["answers holding the cell", "off-topic declined"]
    head.append("ingest s")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    notes = []
    for o in outcomes:
        if o.retrieval is None:
            cells = [o.extension, str(o.questions), o.failure]
            cells += ["–", "–"] if with_answers else []
        else:
            found = round(o.retrieval.recall * o.questions)
            cells = [o.extension, str(o.questions), f"{found} ({o.retrieval.recall:.2f})"]
            if with_answers:
                a = o.answers
                cells += [share(a.correctness), share(a.abstention)] if a else ["–", "–"]
        cells.append(f"{o.ingest_s:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
        if o.note:
            notes.append(f"{o.extension}: {o.note}")
    return "\n".join(lines + (["", *notes] if notes else []))


def main() -> None:
    formats = list(writers())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", nargs="+", default=formats, choices=formats)
    parser.add_argument("--answers", action="store_true", help="also ask the chat model")
    parser.add_argument("--model", default=DEFAULT_MODEL, choices=list(BUNDLED))
    parser.add_argument("--limit", type=int, help="the first N lookups only")
    parser.add_argument("--misses", action="store_true", help="list missed lookups on stderr")
    args = parser.parse_args()
    factual = load_golden(DATA / "golden.jsonl")
    if args.limit is not None:
        factual = factual[: args.limit]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="ragdesk-tables-") as scratch:
        warm_up(Path(scratch))
        for extension in args.formats:
            print(f"{extension}: writing, ingesting, searching", file=sys.stderr, flush=True)
            outcomes.append(run_format(extension, Path(scratch), factual, args))
    print(markdown(outcomes, args.answers))
    if args.answers:
        print(f"\nmodel: {args.model}")


if __name__ == "__main__":
    main()
