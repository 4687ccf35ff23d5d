"""Answer quality of grounded chat, model by model, in one run: the measure the default
chat model is chosen by.

    python -m bench.answers [--sets factbook handbook] [--models gemma-3-270m ...]
                            [--limit N] [--set KEY=VALUE ...] [--transcript DIR]

For each golden set (``bench/data/<set>/``: ``corpus/``, ``golden.jsonl`` and
``offtopic.jsonl``) the corpus is ingested once into a scratch data directory with the
real embedder and FAISS index (as ``ragdesk ingest`` does), then every model answers every
question through the chat pipeline (``ragdesk eval --answers``: the same ``ChatService``
as the web chat) with the default settings, or those given with ``--set`` (e.g.
``--set top_k=3``). ``--limit`` takes the first N factual and N/4 off-topic questions
for a quick look. Prints one Markdown row per set and model.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.chat.quality import AnswerReport
from app.chat.service import ChatConfig, ChatService
from app.config.models import build_registry
from app.config.retrieval import read_only_retriever
from app.config.settings import Settings
from app.documents.answer_eval import ScratchConversations, ask_all
from app.documents.ingest_command import run_ingest
from app.metrics import Metrics
from app.migrations import open_database
from llm.models import BUNDLED, DEFAULT_MODEL, SMALL_MODEL, bundled_model
from retrieval.evaluation import GoldenQuestion, load_golden
from retrieval.store import DocumentStore

DATA = Path(__file__).parent / "data"
MODELS_DIR = Path(__file__).parent.parent / "data" / "models"


def questions_of(name: str, limit: int | None) -> list[GoldenQuestion]:
    factual = load_golden(DATA / name / "golden.jsonl")
    offtopic = load_golden(DATA / name / "offtopic.jsonl")
    if limit is not None:
        factual, offtopic = factual[:limit], offtopic[: max(1, limit // 4)]
    return factual + offtopic


def evaluate(
    data_dir: Path,
    model: str,
    questions: list[GoldenQuestion],
    overrides: dict[str, Any],
    transcript: TextIO | None = None,
) -> AnswerReport:
    settings = Settings(
        data_dir=data_dir, generator_model=bundled_model(MODELS_DIR, model), **overrides
    )
    with scratch_chat(settings) as chat:
        return asyncio.run(ask_all(chat, questions, progress=True, transcript=transcript))


@contextmanager
def scratch_chat(settings: Settings) -> Iterator[ChatService]:
    """Chat over the ingested data of ``settings``, its conversations in a scratch
    database, every model closed at the end."""
    db = open_database(settings.db_path)
    retriever = read_only_retriever(settings, DocumentStore(db))
    registry = build_registry(settings, Metrics(lambda: [], lambda: None))
    scratch = ScratchConversations()
    try:
        yield ChatService(
            scratch.conversations, retriever, registry, ChatConfig.from_settings(settings)
        )
    finally:
        registry.close()
        scratch.close()
        db.close()


def share(value: float | None) -> str:
    """A share for a table: two decimals, or a dash where there is none."""
    return "–" if value is None else f"{value:.2f}"


def row(name: str, model: str, result: AnswerReport) -> str:
    ttft = "–" if result.ttft_p50_s is None else f"{result.ttft_p50_s:.2f}"
    ttft95 = "–" if result.ttft_p95_s is None else f"{result.ttft_p95_s:.2f}"
    prefilled = "–" if result.prefilled_tokens_p50 is None else f"{result.prefilled_tokens_p50:.0f}"
    return (
        f"| {name} | {model} | {result.factual}+{result.offtopic} | "
        f"**{share(result.correctness)}** | {share(result.citation_precision)} | "
        f"{share(result.unsupported)} | {share(result.abstention)} | "
        f"{share(result.false_abstention)} | {result.empty} | {result.looped} | "
        f"{ttft} / {ttft95} | {prefilled} | {result.total_p50_s:.2f} |"
    )


@contextmanager
def _transcript(folder: Path | None, name: str) -> Iterator[TextIO | None]:
    if folder is None:
        yield None
        return
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as out:
        yield out


def _override(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    parsed: Any = value
    for kind in (int, float):
        try:
            parsed = kind(value)
            break
        except ValueError:
            continue
    return key, parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=["factbook", "handbook"])
    parser.add_argument("--models", nargs="+", default=[SMALL_MODEL, DEFAULT_MODEL])
    parser.add_argument("--limit", type=int, help="first N factual questions per set")
    parser.add_argument("--set", action="append", default=[], help="a setting, KEY=VALUE")
    parser.add_argument(
        "--transcript",
        type=Path,
        help="a folder for <set>-<model>.jsonl: each answer as generated, for bench.replay",
    )
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in BUNDLED]
    if unknown:
        parser.error(f"unknown models {unknown}; bundled: {list(BUNDLED)}")
    overrides = dict(_override(text) for text in args.set)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ragdesk-answers-") as scratch:
        for name in args.sets:
            data_dir = Path(scratch) / name
            ingest = Settings(data_dir=data_dir, **overrides)
            status = run_ingest(
                ingest, [DATA / name / "corpus"], collection="default", batch_documents=16
            )
            if status:
                raise SystemExit(f"ingesting {name} failed ({status})")
            questions = questions_of(name, args.limit)
            for model in args.models:
                print(f"{name} / {model}: {len(questions)} questions")
                with _transcript(args.transcript, f"{name}-{model}") as transcript:
                    result = evaluate(data_dir, model, questions, overrides, transcript)
                rows.append(row(name, model, result))
                print(rows[-1], flush=True)
    print(
        "\n| set | model | questions (factual+off-topic) | correct | cited precision "
        "| unsupported | abstained off-topic | declined factual | empty | looped "
        "| TTFT p50 / p95 s | prompt tokens prefilled p50 | total p50 s |"
    )
    print("| --- " * 13 + "|")
    print("\n".join(rows))
    print(f"\noverrides: {overrides or 'none'}")


if __name__ == "__main__":
    main()
