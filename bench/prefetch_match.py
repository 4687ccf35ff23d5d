"""How much of an answer's prompt a draft's prefetch has already read: the golden
questions typed word by word, passages listed best first and as the draft listed them,
side by side, no generation.

    python -m bench.prefetch_match [--sets handbook factbook] [--limit N]

The web chat sends its draft at each word's end (``app.chat.prefetch``), so the last draft
before Enter is the question less its last word. For each golden question (factual and
off-topic) each such draft of three words or more is prepared as a prefetch would be
(retrieved for, the grounded prompt laid out up to the question, each draft keeping the
order of the one before where ``keep_order``), then the finished question is retrieved
for and its prompt laid out as the answer's would be, the last draft taken as read in full
(``keep_passages`` keeps one of its passages that still qualifies only then). Counted in
the default model's tokens: what the answer still has to prefill after Enter when the last
draft's prefix is cached (everything from the first byte where the two prompts differ),
and how often the answer's prompt starts with that whole prefix. "Without a prefetch":
the whole prompt past the rules, which every answer finds cached.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.chat.prefetch import MIN_DRAFT_WORDS, Drafted, Prefetcher
from app.chat.service import ChatService
from app.config.settings import Settings
from app.documents.ingest_command import run_ingest
from bench.answers import DATA, MODELS_DIR, questions_of, scratch_chat
from llm.backend import Backend
from llm.models import DEFAULT_MODEL, bundled_model

# passages listed: (keep the draft's order, keep one passage of its that still qualifies)
LAYOUTS = {
    "best first": (False, False),
    "as the draft listed them": (True, False),
    "as the draft listed them, one that still qualifies kept (default)": (True, True),
}


def main() -> None:
    rows = []
    for name, settings, limit in ingested_sets(__doc__, "ragdesk-prefetch-match-"):
        questions = [q.question for q in questions_of(name, limit)]
        rows += [f"| {name} | {row}" for row in _measure(settings, questions)]
    print(
        "\n| set | passages listed | questions | whole prefetch reused "
        "| left to prefill after Enter, tokens p50 / mean | without a prefetch p50 / mean |"
    )
    print("| --- " * 6 + "|")
    print("\n".join(rows))


def ingested_sets(doc: str | None, prefix: str) -> Iterator[tuple[str, Settings, int | None]]:
    """The golden sets named by ``--sets`` (a benchmark's command line, described by the
    first paragraph of its ``doc``), each ingested into a scratch folder with the default
    model: its name, settings, and ``--limit``."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=["handbook", "factbook"])
    parser.add_argument("--limit", type=int, help="first N factual questions per set")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        for name in args.sets:
            model = bundled_model(MODELS_DIR, DEFAULT_MODEL)
            settings = Settings(data_dir=Path(scratch) / name, generator_model=model)
            corpus = [DATA / name / "corpus"]
            if run_ingest(settings, corpus, collection="default", batch_documents=16):
                raise SystemExit(f"ingesting {name} failed")
            yield name, settings, args.limit


def _measure(settings: Settings, questions: list[str]) -> list[str]:
    with scratch_chat(settings) as chat:
        backend = chat.models.get(chat.default_model)
        rules = _rules(chat, backend)
        rows = []
        for layout, (keep_order, keep_passages) in LAYOUTS.items():
            prefetcher = Prefetcher(
                chat, enabled=True, keep_order=keep_order, keep_passages=keep_passages
            )
            full, left, cold = 0, [], []
            for question in questions:
                last = typed_last_draft(prefetcher, question)
                if last is None:
                    continue
                _, hits = chat.search_turn(question, [], None)
                # as the answer would when the draft's prompt was read in full before Enter
                still = chat.qualifying(question, [], None) if keep_passages else []
                listed = prefetcher.listed_like(last, hits, still)
                final = chat.grounding(backend, question, [], listed).prompt.text
                full += final.startswith(last.prefix)
                shared = _shared_start(last.prefix, final)
                left.append(backend.count_tokens(final) - backend.count_tokens(shared))
                cold.append(backend.count_tokens(final) - backend.count_tokens(rules))
                print(f"  {left[-1]:4} of {cold[-1]:4} left  {question}", flush=True)
            rows.append(
                f"{layout} | {len(left)} | {full / len(left):.2f} "
                f"| {statistics.median(left):.0f} / {statistics.fmean(left):.0f} "
                f"| {statistics.median(cold):.0f} / {statistics.fmean(cold):.0f} |"
            )
        return rows


def typed_last_draft(prefetcher: Prefetcher, question: str) -> Drafted | None:
    """The last prefetch started while ``question`` is typed: one per word's end."""
    words = question.split()
    drafted = None
    for end in range(MIN_DRAFT_WORDS, len(words)):
        draft = " ".join(words[:end])
        drafted = prefetcher.prepare(draft, None, None, None, drafted) or drafted
    return drafted


def _shared_start(one: str, other: str) -> str:
    """The longest text both start with."""
    end = next((at for at, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), None)
    return one[: min(len(one), len(other)) if end is None else end]


def _rules(chat: ChatService, backend: Backend) -> str:
    """What every first turn's prompt shares: the rules, up to where its sources start."""
    prompt = chat.grounding(backend, "?", [], []).prompt.text
    return prompt[: prompt.find("Sources:")]


if __name__ == "__main__":
    main()
