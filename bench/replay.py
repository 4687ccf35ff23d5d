"""Replay the checks that run after generation (citation attribution and re-pointing, the
support check, withholding) on the generations of an earlier ``bench.answers`` run, and
score them again: a change to those checks is measured on exactly the same model output,
in seconds, with no noise from the model or the machine.

    python -m bench.answers --sets factbook handbook --models qwen2.5-coder-1.5b \\
        --transcript /tmp/answers
    python -m bench.replay /tmp/answers/factbook-qwen2.5-coder-1.5b.jsonl ...

Each transcript is named ``<set>-<model>.jsonl``; the set's golden questions give the
references. Times and token counts are the recorded ones; answers are withheld as the
default settings withhold them (a run made with ``--set withhold_unsupported=false``
replays as if withholding were on).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from app.chat.answering import Grounding
from app.chat.quality import AnswerReport, AnswerScore, report
from app.chat.records import Citation, TurnContext
from app.documents.answer_eval import score_shown
from bench.answers import DATA, questions_of, row
from llm.params import Usage
from retrieval.evaluation import GoldenQuestion


def replay(lines: list[dict[str, Any]], golden: dict[str, GoldenQuestion]) -> AnswerReport:
    return report([rescore(line, golden[line["question"]]) for line in lines])


def rescore(line: dict[str, Any], item: GoldenQuestion) -> AnswerScore:
    """One recorded answer scored as today's checks would have shown it."""
    answer, unsupported = line["answer"], 0
    citations: tuple[Citation, ...] = ()
    context: TurnContext | None = None
    if line["context"] is not None:  # a model ran (else: nothing found, as stored)
        context = TurnContext.from_json(json.dumps(line["context"]))
        grounding = Grounding.of_turn(item.question, context)
        answer, citations, flagged = grounding.checked(context.answer)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transcripts", nargs="+", type=Path, help="<set>-<model>.jsonl files")
    args = parser.parse_args()
    for path in args.transcripts:
        name, _, model = path.stem.partition("-")
        if not (DATA / name).is_dir():
            parser.error(f"{path.name}: no golden set {name!r} in {DATA}")
        golden = {q.question: q for q in questions_of(name, None)}
        lines = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
        print(row(name, f"{model} (replayed)", replay(lines, golden)))


if __name__ == "__main__":
    main()
