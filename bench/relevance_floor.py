"""The relevance floor (``RAGDESK_MIN_SCORE``) swept over the answer golden sets: for each
threshold, the share of factual questions that keep a source (and so reach the model) and
the share of off-topic questions stopped before the model (no source, "could not find
anything").

    python -m bench.relevance_floor [--sets factbook handbook] [--floors 0.15 0.2 ...]

A question keeps a source when the passage nearest it (cosine of the bundled embedder's
vectors, as the retriever gates every mode that embeds the question) clears the floor.
Off-topic questions that pass the floor are not lost: withholding (answers no passage
supports) declines most of them after the model has run; the floor only saves that run.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.corpus import ingest_files
from retrieval.evaluation import GoldenQuestion, load_golden
from retrieval.search import Retriever, SearchConfig

DATA = Path(__file__).parent / "data"
FLOORS = (0.15, 0.20, 0.25, 0.30, 0.35, 0.40)


def nearest(retriever: Retriever, questions: list[GoldenQuestion]) -> list[float]:
    """Each question's best cosine over the whole index."""
    return [
        hits[0].score if (hits := retriever.search(q.question, 1).hits) else -1.0 for q in questions
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=["factbook", "handbook"])
    parser.add_argument("--floors", nargs="+", type=float, default=list(FLOORS))
    args = parser.parse_args()
    print("| set | floor | factual keeping a source | off-topic stopped at the floor |")
    print("| --- | --- | --- | --- |")
    for name in args.sets:
        corpus = sorted((DATA / name / "corpus").iterdir())
        factual = load_golden(DATA / name / "golden.jsonl")
        offtopic = load_golden(DATA / name / "offtopic.jsonl")
        with tempfile.TemporaryDirectory(prefix="ragdesk-floor-") as scratch:
            files = [(path.name, path.read_bytes()) for path in corpus]
            embedder, store, index, _ = ingest_files(Path(scratch), files)
            retriever = Retriever(embedder, index, store, SearchConfig(mode="dense"))
            kept, stopped = nearest(retriever, factual), nearest(retriever, offtopic)
            for floor in args.floors:
                keep = sum(s >= floor for s in kept)
                stop = sum(s < floor for s in stopped)
                print(
                    f"| {name} | {floor:.2f} | {keep}/{len(kept)} ({keep / len(kept):.2f}) "
                    f"| {stop}/{len(stopped)} ({stop / len(stopped):.2f}) |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
