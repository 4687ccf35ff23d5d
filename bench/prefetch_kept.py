"""Answers with and without the passage a draft kept (``RAGDESK_PREFETCH_KEEPS_PASSAGES``):
the golden questions typed word by word as in ``bench.prefetch_match``; where keeping one
passage of the last draft that still qualifies changes the answer's prompt, the question
is answered both ways by the default model through chat and scored against the golden
answers. Questions whose prompt it does not change would be answered alike either way.

    python -m bench.prefetch_kept [--sets handbook factbook] [--limit N]

Each answer is laid out from its question's last draft as if that draft's prefetch had
been read in full (the only case in which a passage is kept). The two layouts of a
question are asked one after the other, in alternating order, so neither always finds
the other's prompt cached.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.chat.prefetch import Prefetcher, asker_key
from app.chat.quality import AnswerScore, report
from app.chat.service import ChatService
from app.documents.answer_eval import ask_all
from bench.answers import questions_of, scratch_chat, share
from bench.prefetch_match import ingested_sets, typed_last_draft
from llm.channel import Completion
from llm.params import Finished, Usage
from retrieval.evaluation import GoldenQuestion

LAYOUTS = ("its own top k", "one passage of the draft kept")


def main() -> None:
    rows = []
    for name, settings, limit in ingested_sets(__doc__, "ragdesk-prefetch-kept-"):
        with scratch_chat(settings) as chat:
            scores = asyncio.run(_answer_both_ways(chat, questions_of(name, limit)))
        rows += [_row(name, layout, scores[layout]) for layout in LAYOUTS]
    print(
        "\n| set | answer's passages | questions whose prompt the kept passage changes "
        "| factual right | off-topic declined | cited passages holding the answer |"
    )
    print("| --- " * 6 + "|")
    print("\n".join(rows))


async def _answer_both_ways(
    chat: ChatService, items: list[GoldenQuestion]
) -> dict[str, list[AnswerScore]]:
    chat.models.get(chat.default_model)  # loaded: a draft never loads a model
    typing = Prefetcher(chat, enabled=True)  # lays out drafts; submits nothing
    scores: dict[str, list[AnswerScore]] = {layout: [] for layout in LAYOUTS}
    asked = 0
    for item in items:
        last = typed_last_draft(typing, item.question)
        if last is None:
            continue
        _, hits = chat.search_turn(item.question, [], None)
        kept = typing.listed_like(last, hits, chat.qualifying(item.question, [], None))
        if [h.chunk_id for h in kept] == [h.chunk_id for h in typing.listed_like(last, hits)]:
            continue  # the same prompt either way
        order = LAYOUTS if asked % 2 == 0 else LAYOUTS[::-1]
        asked += 1
        for layout in order:
            chat.prefetcher.keep_passages = layout == LAYOUTS[1]
            # The draft's listing as its prefetch leaves it for the answer, read in full.
            chat.prefetcher._keep_listed(asker_key(), replace(last, prefetch=_read()))
            result = await ask_all(chat, [item])
            scores[layout].append(result.scores[0])
            mark = {True: "ok", False: "miss", None: "offtopic"}[result.scores[0].correct]
            print(f"  {layout:32} {mark:8} {item.question}", flush=True)
    return scores


def _read() -> Completion:
    """A prefetch that has read its whole prefix."""
    done = Completion()
    done.push(Finished("stop", Usage(0, 0, 0), "bench"))
    return done


def _row(name: str, layout: str, scores: list[AnswerScore]) -> str:
    result = report(scores)
    return (
        f"| {name} | {layout} | {result.factual}+{result.offtopic} "
        f"| {share(result.correctness)} | {share(result.abstention)} "
        f"| {share(result.citation_precision)} |"
    )


if __name__ == "__main__":
    main()
