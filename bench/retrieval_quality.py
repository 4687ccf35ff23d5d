"""Retrieval quality: recall@1/5/20 and MRR of dense, BM25 and hybrid search on a golden set.

The corpus is 32 World Factbook country profiles (public domain, bench/data/factbook/),
ingested with the bundled embedder into real SQLite and FAISS files; the golden set has
one question per line with the document and a string of the passage that answers it.

    python -m bench.retrieval_quality [--json results.json] [--reranker MODEL_DIR]

``--reranker`` adds runs with a local sentence-transformers cross-encoder reranking the
fused candidates (never downloaded). Runs with neighbour expansion widen short hits, so a
hit may now contain an answer that sat in the chunk beside it: that is the point (the
model sees it), but it is why those rows can only go up.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.corpus import ingest_files
from retrieval.embedder import SentenceTransformerEmbedder
from retrieval.evaluation import ranking_metrics
from retrieval.search import Retriever, SearchConfig
from retrieval.store import DocumentStore
from retrieval.types import Hit

DATA = Path(__file__).parent / "data" / "factbook"
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
) -> tuple[SentenceTransformerEmbedder, DocumentStore, Retriever, dict[int, str]]:
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


CROSS = "defaults + cross-encoder"


def reranker_runs(model_dir: Path) -> list[tuple[str, SearchConfig, float | None]]:
    return [
        (
            f"defaults + cross-encoder ({model_dir.name}), top {n}",
            SearchConfig(rerank_candidates=n),
            0.25,
        )
        for n in (20, 50)
    ]


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
    parser.add_argument("--reranker", type=Path, help="a local cross-encoder model directory")
    args = parser.parse_args()
    runs = RUNS + (reranker_runs(args.reranker) if args.reranker else [])
    questions = load_questions(DATA / "golden.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        _, store, retriever, filenames = build(Path(tmp))
        chunks = sum(d.chunk_count for d in store.list_documents())
        results = {}
        cross_encoder = None
        if args.reranker:
            from retrieval.rerank import CrossEncoderReranker

            cross_encoder = CrossEncoderReranker(args.reranker)
        for name, config, min_score in runs:
            retriever.reranker = cross_encoder if name.startswith(CROSS) else None
            results[name] = evaluate(retriever, config, questions, filenames, min_score)
    print(f"{len(filenames)} documents, {chunks} chunks, {len(questions)} questions")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
