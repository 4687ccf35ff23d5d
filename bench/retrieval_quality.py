"""Retrieval quality: recall@1/5/20 and MRR of dense, BM25 and hybrid search on a golden set.

The corpus is 32 World Factbook country profiles (public domain, bench/data/factbook/),
ingested with the bundled embedder into real SQLite and FAISS files; the golden set has
one question per line with the document and a string of the passage that answers it.

    python -m bench.retrieval_quality [--json results.json] [--reranker MODEL_DIR|llm|X.gguf]

``--reranker`` adds runs that rerank the fused candidates: with a local
sentence-transformers cross-encoder directory (never downloaded; top 20 and 50), or with
``llm`` (the bundled Gemma 3 270M) or another GGUF file as a pointwise yes/no judge (top
10 and 20; retrieval/llm_rerank.py). A "top n" run reranks the first n fused candidates
and keeps the rest behind them in fused order, so every run is scored on a list 20 deep;
the app, asking for k=4, reranks exactly RAGDESK_RERANK_CANDIDATES. Runs with neighbour
expansion widen short hits, so a hit may now contain an answer that sat in the chunk
beside it: that is the point (the model sees it), but it is why those rows can only go up.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.corpus import ingest_files
from retrieval.embedder import Embedder
from retrieval.evaluation import ranking_metrics
from retrieval.rerank import Reranker
from retrieval.search import Retriever, SearchConfig
from retrieval.store import DocumentStore
from retrieval.types import Hit

DATA = Path(__file__).parent / "data" / "factbook"
MODELS = Path(__file__).parent.parent / "data" / "models"
DEPTH = 20
# Questions the corpus does not answer: a good gate gives them no sources at all.
OFF_TOPIC = [
    "Who won the football world cup in 1954?",
    "How do I reset my laptop password?",
    "What is a good recipe for banana bread?",
    "Which programming language should I learn first?",
    "How do I file an expense report for a conference trip?",
    "What time does the cafeteria close on Fridays?",
    "How many moons does Jupiter have?",
    "Explain the rules of chess castling.",
]


@dataclass(frozen=True)
class Question:
    text: str
    document: str
    answer: str
    style: str

    def answered_by(self, hit: Hit, filenames: dict[int, str]) -> bool:
        return (
            filenames[hit.document_id] == self.document and self.answer.lower() in hit.text.lower()
        )


def load_questions(path: Path) -> list[Question]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [Question(r["question"], r["document"], r["answer"], r["style"]) for r in rows]


def build(
    root: Path,
) -> tuple[Embedder, DocumentStore, Retriever, dict[int, str]]:
    files = ((path.name, path.read_bytes()) for path in sorted((DATA / "corpus").glob("*.md")))
    embedder, store, index, filenames = ingest_files(root, files)
    return embedder, store, Retriever(embedder, index, store), filenames


def first_rank(
    retriever: Retriever, question: Question, filenames: dict[int, str], min_score: float | None
) -> int | None:
    hits = retriever.search(question.text, DEPTH, min_score=min_score).hits
    for rank, hit in enumerate(hits, start=1):
        if question.answered_by(hit, filenames):
            return rank
    return None


def metrics(ranks: list[int | None]) -> dict[str, float]:
    return ranking_metrics(ranks, [1, 5, DEPTH])


def evaluate(
    retriever: Retriever,
    config: SearchConfig,
    questions: list[Question],
    filenames: dict[int, str],
    min_score: float | None = None,
) -> dict[str, object]:
    retriever.config = config
    ranks = [first_rank(retriever, q, filenames, min_score) for q in questions]
    by_style = {
        style: metrics([r for r, q in zip(ranks, questions, strict=True) if q.style == style])
        for style in sorted({q.style for q in questions})
    }
    silent = sum(not retriever.search(q, 4, min_score=min_score).hits for q in OFF_TOPIC)
    return {"all": metrics(ranks), **by_style, "off_topic_without_sources": silent}


RUNS: list[tuple[str, SearchConfig, float | None]] = [
    ("dense", SearchConfig(mode="dense", max_per_document=0), None),
    ("bm25", SearchConfig(mode="bm25", max_per_document=0), None),
    ("hybrid (rrf k=60, weights 1:1)", SearchConfig(mode="hybrid", max_per_document=0), None),
    ("hybrid, rrf k=20", SearchConfig(mode="hybrid", rrf_k=20, max_per_document=0), None),
    (
        "hybrid, dense weight 2",
        SearchConfig(mode="hybrid", dense_weight=2.0, max_per_document=0),
        None,
    ),
    (
        "hybrid, bm25 weight 2",
        SearchConfig(mode="hybrid", bm25_weight=2.0, max_per_document=0),
        None,
    ),
    ("dense, min_score 0.25", SearchConfig(mode="dense", max_per_document=0), 0.25),
    ("hybrid, min_score 0.25", SearchConfig(mode="hybrid", max_per_document=0), 0.25),
    ("hybrid, min_score 0.25, ≤2 per document (defaults)", SearchConfig(), 0.25),
    (
        "hybrid, min_score 0.25, ≤3 per document",
        SearchConfig(max_per_document=3),
        0.25,
    ),
    ("defaults + neighbours below 200 chars", SearchConfig(expand_below_chars=200), 0.25),
    ("defaults + neighbours below 400 chars", SearchConfig(expand_below_chars=400), 0.25),
]


class RerankTop:
    """Reranks the first ``n`` candidates, keeps the rest behind them in fused order, and
    times itself."""

    def __init__(self, inner: Reranker, n: int):
        self.inner, self.n = inner, n
        self.calls, self.seconds = 0, 0.0

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        start = time.perf_counter()
        head = self.inner.rerank(query, hits[: self.n])
        self.calls += 1
        self.seconds += time.perf_counter() - start
        if self.calls % 20 == 0:
            print(f"  {self.calls} searches", file=sys.stderr, flush=True)
        return [*head, *hits[self.n :]]


def reranker_runs(spec: str) -> tuple[Reranker, list[tuple[str, SearchConfig, float | None, int]]]:
    """The reranker ``--reranker`` names and its runs: (name, config, min_score, top n)."""
    reranker: Reranker
    if spec == "llm" or spec.endswith(".gguf"):
        from llm.models import small_model
        from retrieval.llm_rerank import LlmReranker

        path = small_model(MODELS) if spec == "llm" else Path(spec)
        label, tops, reranker = f"LLM yes/no ({path.stem})", (10, 20), LlmReranker(path)
    else:
        from retrieval.rerank import CrossEncoderReranker

        label, tops = f"cross-encoder ({Path(spec).name})", (20, 50)
        reranker = CrossEncoderReranker(Path(spec))
    # Fifty fused candidates reach the reranker wrapper, as many as the runs without one
    # diversify: the per-document cap then sees the same pool.
    pure = SearchConfig(mode="hybrid", max_per_document=0, rerank_candidates=50)
    runs: list[tuple[str, SearchConfig, float | None, int]]
    runs = [(f"hybrid + {label}, top {tops[-1]}", pure, None, tops[-1])]
    runs += [
        (f"defaults + {label}, top {n}", SearchConfig(rerank_candidates=50), 0.25, n) for n in tops
    ]
    return reranker, runs


def table(results: dict[str, dict[str, object]]) -> str:
    lines = [
        "| run | recall@1 | recall@5 | recall@20 | MRR | lexical R@5 | semantic R@5 "
        "| off-topic silent |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, result in results.items():
        overall, lexical, semantic = (result[k] for k in ("all", "lexical", "semantic"))
        assert (
            isinstance(overall, dict) and isinstance(lexical, dict) and isinstance(semantic, dict)
        )
        lines.append(
            f"| {name} | {overall['recall@1']:.3f} | {overall['recall@5']:.3f} | "
            f"{overall['recall@20']:.3f} | {overall['mrr']:.3f} | {lexical['recall@5']:.3f} | "
            f"{semantic['recall@5']:.3f} | {result['off_topic_without_sources']}/{len(OFF_TOPIC)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--reranker",
        help="a local cross-encoder model directory, 'llm' (the bundled GGUF) or a .gguf file",
    )
    args = parser.parse_args()
    questions = load_questions(DATA / "golden.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        _, store, retriever, filenames = build(Path(tmp))
        chunks = sum(d.chunk_count for d in store.list_documents())
        results: dict[str, dict[str, object]] = {}
        for name, config, min_score in RUNS:
            results[name] = evaluate(retriever, config, questions, filenames, min_score)
        if args.reranker:
            reranker, runs = reranker_runs(args.reranker)
            retriever.reranker = reranker
            retriever.search(questions[0].text, 1)  # loads the model outside the timings
            for name, config, min_score, top in runs:
                print(f"{name} ...", file=sys.stderr, flush=True)
                timed = RerankTop(reranker, top)
                retriever.reranker = timed
                results[name] = evaluate(retriever, config, questions, filenames, min_score)
                results[name]["rerank_ms_per_search"] = 1000 * timed.seconds / max(timed.calls, 1)
                print(f"  {timed.seconds / max(timed.calls, 1):.2f} s per search", file=sys.stderr)
            retriever.reranker = None
    print(f"{len(filenames)} documents, {chunks} chunks, {len(questions)} questions")
    print(table(results))
    timed_runs = {
        n: r["rerank_ms_per_search"] for n, r in results.items() if "rerank_ms_per_search" in r
    }
    for name, ms in timed_runs.items():
        print(f"{name}: reranking adds {ms:.0f} ms per search")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
