"""Replay the checks that run after generation (citation attribution and re-pointing, the
support check, withholding, and with ``--check`` the model's second look at the cited
passages) on the generations of an earlier ``bench.answers`` run, and score them again:
a change to those checks is measured on exactly the same model output, with no noise
from generation or the machine.

    python -m bench.answers --sets factbook handbook --models qwen2.5-coder-1.5b \\
        --transcript /tmp/answers
    python -m bench.replay /tmp/answers/factbook-qwen2.5-coder-1.5b.jsonl ...
    python -m bench.replay --check /tmp/answers/*.jsonl

Each transcript is named ``<set>-<model>.jsonl``; the set's golden questions give the
references. Times and token counts are the recorded ones; answers are withheld as the
default settings withhold them (a run made with ``--set withhold_unsupported=false``
replays as if withholding were on). Without ``--check`` no model is loaded and a replay
takes seconds; with it, the transcript's model is loaded and asked about each cited
answer (``Grounding.second_look``, as chat asks it), one short prompt per answer.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.chat.answering import Grounding
from app.chat.quality import AnswerReport, AnswerScore, report
from app.chat.records import Citation, TurnContext
from app.config.models import build_registry
from app.config.settings import Settings
from app.documents.answer_eval import score_shown
from app.metrics import Metrics
from bench.answers import DATA, MODELS_DIR, questions_of, row
from llm.backend import Backend
from llm.models import bundled_model
from llm.params import Usage
from retrieval.evaluation import GoldenQuestion


def replay(
    lines: list[dict[str, Any]],
    golden: dict[str, GoldenQuestion],
    checker: Backend | None = None,
) -> AnswerReport:
    return report([rescore(line, golden[line["question"]], checker) for line in lines])


def rescore(
    line: dict[str, Any], item: GoldenQuestion, checker: Backend | None = None
) -> AnswerScore:
    """One recorded answer scored as today's checks would have shown it (``checker``: the
    model that takes the second look; None, no second look)."""
    answer, unsupported = line["answer"], 0
    citations: tuple[Citation, ...] = ()
    context: TurnContext | None = None
    if line["context"] and line["context"]["sources"]:  # a model ran (else: nothing found)
        context = TurnContext.from_json(json.dumps(line["context"]))
        grounding = Grounding.of_turn(item.question, context)
        checked = grounding.checked(context.answer)
        if checker is not None:
            checked = grounding.second_look(checker, checked)
        answer, citations, flagged = checked
        unsupported = len(flagged)
    return score_shown(
        item,
        answer,
        citations,
        context,
        unsupported=unsupported,
        looped=line["looped"],
        ttft_s=line["ttft_s"],
        total_s=line["total_s"],
        usage=Usage(**line["usage"]) if line["usage"] else None,
    )


@contextmanager
def bundled_backend(model: str) -> Iterator[Backend]:
    """The bundled ``model``, loaded as chat loads it."""
    with tempfile.TemporaryDirectory(prefix="ragdesk-replay-") as scratch:
        settings = Settings(
            data_dir=Path(scratch), generator_model=bundled_model(MODELS_DIR, model)
        )
        registry = build_registry(settings, Metrics(lambda: [], lambda: None))
        try:
            yield registry.get(settings.generation.chat_model)
        finally:
            registry.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transcripts", nargs="+", type=Path, help="<set>-<model>.jsonl files")
    parser.add_argument(
        "--check", action="store_true", help="also the model's second look (loads the model)"
    )
    args = parser.parse_args()
    for path in args.transcripts:
        name, _, model = path.stem.partition("-")
        if not (DATA / name).is_dir():
            parser.error(f"{path.name}: no golden set {name!r} in {DATA}")
        golden = {q.question: q for q in questions_of(name, None)}
        lines = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
        if not args.check:
            print(row(name, f"{model} (replayed)", replay(lines, golden)), flush=True)
            continue
        with bundled_backend(model) as checker:
            result = replay(lines, golden, checker)
        print(row(name, f"{model} (replayed, second look)", result), flush=True)


if __name__ == "__main__":
    main()
