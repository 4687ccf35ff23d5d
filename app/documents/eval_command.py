"""``ragdesk eval GOLDEN.jsonl``: retrieval quality and latency on the data directory's
index; ``ragdesk eval --answers GOLDEN.jsonl``: the quality of the answers chat gives
(:mod:`app.documents.answer_eval`); given golden conversations
(:mod:`retrieval.followup_eval`), the follow-up turns asked in them and standalone.
Both are stored in the database; ``--history`` compares the runs."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.config.settings import Settings

if TYPE_CHECKING:
    from app.documents.answer_eval import AnswerRun
    from retrieval.db import Database
    from retrieval.eval_runs import EvalRun
    from retrieval.evaluation import GoldenQuestion


def run_eval(
    settings: Settings,
    golden: Path | None,
    *,
    collection: str | None,
    k: int,
    history: bool,
    answers: bool = False,
    model: str | None = None,
) -> int:
    from app.documents.answer_eval import answer_history
    from app.migrations import open_database
    from retrieval.eval_runs import run_history

    if k < 1:
        print("ragdesk eval: --k must be at least 1", file=sys.stderr)
        return 2
    if answers and collection is not None:
        print("ragdesk eval: --collection applies to retrieval evaluation only", file=sys.stderr)
        return 2
    # A SQLite file that is not there means the wrong --data-dir (opening would create
    # one); a PostgreSQL database is the operator's, and opening it sets it up.
    if settings.server.database_url is None and not settings.db_path.exists():
        print(f"ragdesk eval: no Ragdesk database in {settings.server.data_dir}", file=sys.stderr)
        return 2
    db = open_database(settings)
    try:
        if golden is not None:
            if answers:
                status = _evaluate_answers(settings, db, golden, model=model)
            else:
                status = _evaluate(settings, db, golden, collection=collection, k=k)
            if status:
                return status
        if history or golden is None:
            if answers:
                _print_answer_history(answer_history(db))
            else:
                _print_history(run_history(db))
        return 0
    finally:
        db.close()


def _evaluate(
    settings: Settings, db: Database, golden: Path, *, collection: str | None, k: int
) -> int:
    from app.config.retrieval import read_only_retriever
    from retrieval.eval_runs import save_run
    from retrieval.evaluation import evaluate
    from retrieval.store import DocumentStore

    questions = _golden(golden)
    if questions is None:
        return 2
    store = DocumentStore(db)
    collection_ids = None
    if collection is not None:
        found = [c.id for c in store.collections() if c.name == collection]
        if not found:
            names = ", ".join(c.name for c in store.collections()) or "none"
            print(
                f"ragdesk eval: no collection {collection!r} (there are: {names})", file=sys.stderr
            )
            return 2
        collection_ids = found
    retriever = read_only_retriever(settings, store)
    report = evaluate(
        retriever,
        store,
        questions,
        k=k,
        collection_ids=collection_ids,
        min_score=settings.search.min_score if settings.search.mode != "bm25" else None,
    )
    run_id = save_run(
        db,
        report,
        golden=golden,
        collection=collection,
        mode=settings.search.mode,
        model_id=retriever.embedder.model_id,
    )
    for result in report.results:
        if result.rank is None:
            print(f"  missed: {result.question}", file=sys.stderr)
    print(json.dumps({"run": run_id, **report.as_dict()}, indent=2))
    return 0


def _evaluate_answers(settings: Settings, db: Database, golden: Path, *, model: str | None) -> int:
    import asyncio

    from app.chat.service import ChatConfig, ChatService
    from app.config.models import build_registry
    from app.config.retrieval import read_only_retriever
    from app.documents.answer_eval import (
        ScratchConversations,
        ask_all,
        ask_conversations,
        save_answer_run,
    )
    from app.metrics import Metrics
    from llm.params import UnknownModel
    from retrieval.evaluation import GoldenSetError
    from retrieval.followup_eval import is_conversation_set, load_conversations
    from retrieval.store import DocumentStore

    conversational = is_conversation_set(golden)
    try:  # a set of conversations: follow-ups asked in them, and again standalone
        conversations = load_conversations(golden) if conversational else []
    except GoldenSetError as exc:
        print(f"ragdesk eval: {exc}", file=sys.stderr)
        return 2
    questions = [] if conversational else _golden(golden)
    if questions is None:
        return 2
    retriever = read_only_retriever(settings, DocumentStore(db))
    registry = build_registry(settings, Metrics(lambda: [], lambda: None))
    config = ChatConfig.from_settings(settings, model)
    try:
        registry.resolve(config.model)
    except UnknownModel:
        known = ", ".join([*registry.names, *registry.aliases])
        print(f"ragdesk eval: no model {config.model!r} (there are: {known})", file=sys.stderr)
        registry.close()
        return 2
    scratch = ScratchConversations()
    try:
        chat = ChatService(scratch.conversations, retriever, registry, config)
        if conversational:
            followed = asyncio.run(ask_conversations(chat, conversations, progress=True))
            result, alone = followed.in_conversation, followed.standalone.as_dict()
        else:
            result, alone = asyncio.run(ask_all(chat, questions, progress=True)), None
        served = registry.resolve(config.model)
    finally:
        registry.close()
        scratch.close()
    run_id = save_answer_run(
        db, result, golden=golden, model=served, settings=answer_settings(settings)
    )
    out: dict[str, object] = {"run": run_id, "model": served, **result.as_dict()}
    if alone is not None:  # the follow-ups' scores above; the same questions standalone here
        out["standalone"] = alone
    print(json.dumps(out, indent=2))
    return 0


def _golden(golden: Path) -> list[GoldenQuestion] | None:
    """The golden set, or None once the reason it cannot be used is printed."""
    from retrieval.evaluation import GoldenSetError, load_golden

    try:
        return load_golden(golden)
    except GoldenSetError as exc:
        print(f"ragdesk eval: {exc}", file=sys.stderr)
        return None


def answer_settings(settings: Settings) -> dict[str, object]:
    """What shapes an answer besides the model, stored with each answer run."""
    return {
        "search": settings.search.model_dump(mode="json"),
        "generation": {
            key: value
            for key, value in settings.generation.model_dump(mode="json").items()
            if key in ("max_answer_tokens", "temperature", "context_tokens", "chat_model")
        },
    }


def _print_answer_history(runs: list[AnswerRun]) -> None:
    header = "run|when (UTC)|golden|model|questions|correct|cited precision|unsupported"
    header += "|abstained (off-topic)|empty|looped|TTFT p50 s|total p50 s"
    _print_table(
        header,
        [
            [
                *_first_columns(run.id, run.created_at, run.golden),
                run.model,
                str(run.questions),
                _share(run.correctness),
                _share(run.citation_precision),
                _share(run.unsupported),
                _share(run.abstention),
                str(run.empty),
                str(run.looped),
                _share(run.ttft_p50_s, 2),
                f"{run.total_p50_s:.2f}",
            ]
            for run in runs
        ],
    )


def _print_history(runs: list[EvalRun]) -> None:
    header = "run|when (UTC)|golden|collection|k|mode|questions|recall@k|MRR|answer found"
    header += "|p50 ms|p95 ms"
    _print_table(
        header,
        [
            [
                *_first_columns(run.id, run.created_at, run.golden),
                run.collection or "all",
                str(run.k),
                run.mode,
                str(run.questions),
                f"{run.recall:.3f}",
                f"{run.mrr:.3f}",
                _share(run.answer_containment),
                f"{run.latency_p50_ms:.1f}",
                f"{run.latency_p95_ms:.1f}",
            ]
            for run in runs
        ],
    )


def _first_columns(run_id: int, created_at: float, golden: str) -> list[str]:
    when = datetime.datetime.fromtimestamp(created_at, datetime.UTC)
    return [str(run_id), f"{when:%Y-%m-%d %H:%M}", Path(golden).name]


def _print_table(header: str, rows: list[list[str]]) -> None:
    """A Markdown table: ``header`` is the column names joined by ``|``."""
    names = header.split("|")
    print("| " + " | ".join(names) + " |")
    print("|" + " --- |" * len(names))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def _share(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"
