"""Query latency, broken down: embed, vector search, FTS5 search, hydrate from SQLite, time to first
token and decode speed, with the bundled models over an ingested stdlib-docs corpus.

    python -m bench.query [--documents N] [--questions N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.corpus import ingest_files, stdlib_documents
from llm.local import LocalModel, LocalModelConfig
from llm.models import small_model
from llm.params import CompletionRequest, SamplingParams, TextDelta
from llm.prompt import Source, build_prompt
from retrieval.embedder import SentenceTransformerEmbedder, bundled_embedder_dir
from retrieval.index import FaissIndex
from retrieval.search import Retriever
from retrieval.store import DocumentStore

QUESTIONS = [
    "How do I parse command line arguments?",
    "How can I encode binary data as base64 text?",
    "What does the calendar module print?",
    "How do I compress data with bzip2?",
    "How do I compare two sequences and show differences?",
    "How can I read a CSV file?",
    "How do I copy a file?",
    "How are abstract base classes declared?",
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=60)
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        embedder, store, index = indexed_corpus(root, args.documents)
        model_path = small_model(root / "models")
        generator = LocalModel(LocalModelConfig(name="gemma", path=model_path))
        retriever = Retriever(embedder, index, store)
        # each question once: a repeated prompt would come from the prefix cache
        measure(retriever, generator, "warm-up question", args.max_tokens)
        rows = [
            measure(retriever, generator, question, args.max_tokens)
            for question in QUESTIONS[: args.questions]
        ]
        generator.close()
    summary = {
        "chunks": index.count,
        "questions": len(rows),
        **{
            f"{key}_p50_ms": round(statistics.median(r[key] for r in rows) * 1000, 1)
            for key in ("embed", "search", "lexical", "hydrate", "ttft")
        },
        **{
            f"{key}_p95_ms": round(percentile([r[key] for r in rows], 0.95) * 1000, 1)
            for key in ("embed", "search", "lexical", "hydrate", "ttft")
        },
        "decode_tokens_per_s_p50": round(statistics.median(r["tokens_per_s"] for r in rows), 1),
    }
    print(json.dumps(summary, indent=2))


def indexed_corpus(
    root: Path, documents: int
) -> tuple[SentenceTransformerEmbedder, DocumentStore, FaissIndex]:
    """The first ``documents`` stdlib modules' docs, ingested and indexed under ``root``."""
    files = ((f"{name}.md", text.encode()) for name, text in stdlib_documents(documents))
    embedder = SentenceTransformerEmbedder(bundled_embedder_dir())
    _, store, index, _ = ingest_files(root, files, embedder=embedder)
    return embedder, store, index


def measure(
    retriever: Retriever, generator: LocalModel, question: str, max_tokens: int
) -> dict[str, float]:
    result = retriever.search(question, 4)
    sources = [Source(n, h.title, h.page, h.text) for n, h in enumerate(result.hits, 1)]
    prompt = build_prompt(
        generator.prompt_format,
        question=question,
        sources=sources,
        history=[],
        token_budget=generator.context_tokens - max_tokens,
        count_tokens=generator.count_tokens,
    )
    request = CompletionRequest(prompt.text, SamplingParams(max_tokens=max_tokens, temperature=0))
    started = time.perf_counter()
    first = 0.0
    tokens = 0
    for event in generator.submit(request):
        if isinstance(event, TextDelta):
            tokens += 1
            first = first or time.perf_counter()
    finished = time.perf_counter()
    decode_s = max(finished - first, 1e-9)
    return {
        "embed": result.timings.embed_s,
        "search": result.timings.search_s,
        "lexical": result.timings.lexical_s,
        "hydrate": result.timings.hydrate_s,
        "ttft": first - started,
        "tokens_per_s": (tokens - 1) / decode_s if tokens > 1 else 0.0,
    }


if __name__ == "__main__":
    main()
