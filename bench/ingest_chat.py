"""Chat time to first token while documents are being ingested: with the embedder's thread
budgets, with every thread for both, and with ingestion yielding to generation.

    python -m bench.ingest_chat [--documents 60] [--questions 16] [--rounds 2]
                                [--ingest-threads N] [--query-threads N]

A base library (the first ``--documents`` stdlib modules, as in bench.query) is indexed
first. Then, in each mode, grounded questions are asked one at a time, each once, and
timed end to end: question embedding + hybrid search + prompt + prefill, up to the first
token (``bench.query.measure`` with a one-token answer, wall clock around it). The
embedder and the bundled GGUF model are the real ones, wired as the server wires them:
questions and ingestion share one ``BatchingEmbedder`` built by ``app.config.search_stages.batched``
from Settings, and the ingest worker parses in the sandboxed child process.

- ``baseline``: nothing else running;
- ``budgets``: bulk ingestion meanwhile, with ``RAGDESK_EMBED_INGEST_THREADS`` /
  ``RAGDESK_EMBED_QUERY_THREADS`` set (``--ingest-threads``, ``--query-threads``);
- ``all-threads``: the same ingestion with both left at 0 (every thread for both);
- ``yield``: every thread for both, and ingestion batches wait while the model is
  generating (``RAGDESK_EMBED_INGEST_YIELD_S``, as the server wires it: the defaults).

The modes take turns, ``--rounds`` times (drift on the machine hits each alike); each
mode's samples are pooled. Thread budgets default to half the CPUs for ingestion and all
of them for questions; llama.cpp uses every CPU in all modes, as the server does.

Ingestion is kept busy for the whole series: every stdlib module is uploaded into a bulk
collection (again into a new one when the modules run out, with the embedding cache off so
each upload is embedded anew), and removed after the mode. Questions search the base
collection only, so every mode builds the same prompts. Each mode loads a fresh model, so
no prompt of an earlier mode is in the KV cache.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from app.config.search_stages import batched
from app.config.settings import Settings
from bench.corpus import background_worker, ingest_files, stdlib_documents
from bench.query import QUESTIONS, measure, percentile
from llm.local import LocalModel, LocalModelConfig
from llm.models import small_model
from retrieval.embedder import (
    Embedder,
    SentenceTransformerEmbedder,
    Vectors,
    bundled_embedder_dir,
)
from retrieval.index import FaissIndex
from retrieval.library import Library
from retrieval.parsers.isolated import IsolatedParser
from retrieval.search import Retriever, SearchResult
from retrieval.store import DocumentStore
from retrieval.uploads import UploadFiles

# Grounded in the first 60 modules as well, each asked once per mode (a repeat would come
# from the prefix cache).
MORE_QUESTIONS = [
    "How do I count how often each item occurs?",
    "How do I write a context manager from a generator function?",
    "How do I declare a class whose init method is generated from its fields?",
    "How do I do exact decimal arithmetic?",
    "How do I define an enumeration of named constants?",
    "How do I cache the results of an expensive function?",
    "How do I compute a SHA-256 digest of some bytes?",
    "How do I keep a priority queue with a heap?",
    "How do I serialize a dictionary to JSON?",
    "How do I check whether an IP address belongs to a network?",
]
MODES = ("baseline", "budgets", "all-threads", "yield")


@dataclass
class Rig:
    root: Path
    store: DocumentStore
    library: Library
    index: FaissIndex
    base_collection: int
    parser: IsolatedParser


class BaseOnly(Retriever):
    """Searches the base collection only: the same prompts whatever is being ingested."""

    scope: Collection[int] = ()

    def search(self, query: str, k: int, **options: Any) -> SearchResult:
        return super().search(query, k, **options, collection_ids=self.scope)


class Counting:
    """The real embedder, counting the texts of ingestion slices (a question is one text)."""

    def __init__(self, inner: Embedder):
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.bulk_texts = 0

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        vectors = self.inner.embed_batch(texts)
        if len(texts) > 1:
            self.bulk_texts += len(texts)
        return vectors

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)


class Feeder:
    """Keeps the ingest queue busy: uploads every module into a bulk collection, then again
    into a new one, until stopped."""

    def __init__(self, lib: Rig, documents: list[tuple[str, str]], backlog: int):
        self.lib = lib
        self.documents = documents
        self.backlog = backlog
        self.stop = threading.Event()
        self.submitted: list[int] = []
        self._thread = threading.Thread(target=self._run, name="bench-feeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self.stop.set()
        self._thread.join()

    def _run(self) -> None:
        worker = self.lib.library.worker
        assert worker is not None
        for round_ in itertools.count():
            collection = self.lib.store.ensure_collection(f"bulk-{time.time_ns()}-{round_}")
            for name, text in self.documents:
                while worker.pending >= self.backlog and not self.stop.is_set():
                    self.stop.wait(0.05)
                if self.stop.is_set():
                    return
                document, _ = self.lib.library.submit(
                    data=text.encode(), filename=f"{name}.md", collection_id=collection
                )
                self.submitted.append(document.id)


def main() -> None:
    cpus = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=60, help="base library")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--ingest-threads", type=int, default=max(1, cpus // 2))
    parser.add_argument("--query-threads", type=int, default=cpus)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rounds", type=int, default=2, help="each mode, interleaved")
    args = parser.parse_args()
    questions = (QUESTIONS + MORE_QUESTIONS)[: args.questions]
    modes = args.modes.split(",")
    print(f"# load average at start: {os.getloadavg()}; {cpus} CPUs", flush=True)

    settings = Settings()
    inner = Counting(
        SentenceTransformerEmbedder(
            bundled_embedder_dir(), batch_size=settings.embedder.embed_batch_size
        )
    )
    all_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = stdlib_documents(args.documents)
        files = ((f"{name}.md", text.encode()) for name, text in base)
        _, store, index, _ = ingest_files(root, files, embedder=inner)
        lib = Rig(
            root,
            store,
            Library(store, UploadFiles(root / "uploads")),
            index,
            store.ensure_collection(),
            IsolatedParser(),
        )
        model_path = small_model(root / "models")
        bulk = stdlib_documents(1000)
        runs: dict[str, list[Run]] = {mode: [] for mode in modes}
        for round_ in range(args.rounds):  # modes interleaved: drift hits each alike
            for mode in modes:
                budgets = (args.ingest_threads, args.query_threads)
                threads = budgets if mode == "budgets" else (0, 0)
                torch.set_num_threads(all_threads)  # the batcher only sets what is not 0
                run = run_mode(lib, inner, model_path, questions, bulk, mode, threads)
                runs[mode].append(run)
                print(f"# round {round_ + 1} {mode}: {json.dumps(describe([run]))}", flush=True)
        lib.parser.close()
    results = {mode: describe(mode_runs) for mode, mode_runs in runs.items()}
    if "baseline" in results:
        base = results["baseline"]["ttft_ms_p50_p95"]
        for result in results.values():
            p50, p95 = result["ttft_ms_p50_p95"]
            result["ttft_vs_baseline_p50_p95"] = [round(p50 / base[0], 2), round(p95 / base[1], 2)]
    header = {"cpus": cpus, "base_documents": args.documents, "rounds": args.rounds}
    print(json.dumps({**header, "modes": results}, indent=2))


@dataclass(frozen=True)
class Run:
    rows: list[dict[str, float]]  # bench.query.measure's, plus "total"
    ingested: int  # chunks embedded by ingestion while the questions were asked
    seconds: float
    threads: tuple[int, int]  # ingestion, questions (0 = all)


def run_mode(
    lib: Rig,
    inner: Counting,
    model_path: Path,
    questions: list[str],
    bulk: list[tuple[str, str]],
    mode: str,
    threads: tuple[int, int],
) -> Run:
    settings = Settings(embed_ingest_threads=threads[0], embed_query_threads=threads[1])
    generator = LocalModel(LocalModelConfig(name="gemma", path=model_path))
    busy = (lambda: not generator.idle) if mode == "yield" else None  # Services.generating
    embedder = batched(settings, inner, busy=busy)  # as the server builds it
    retriever = BaseOnly(embedder, lib.index, lib.store)
    retriever.scope = [lib.base_collection]
    worker = background_worker(
        lib.root, lib.library, lib.index, embedder, lib.parser, embedding_cache=False
    )
    lib.library.attach_worker(worker)
    measure(retriever, generator, "warm-up question", 1)
    feeder = Feeder(lib, bulk, backlog=2 * settings.embedder.embed_ingest_batch)
    if mode != "baseline":
        feeder.start()
        while not inner.bulk_texts:  # ingestion is under way: a slice has been embedded
            time.sleep(0.05)
    embedded_before, started = inner.bulk_texts, time.perf_counter()
    rows = []
    for question in questions:
        t0 = time.perf_counter()
        row = measure(retriever, generator, question, 1)
        row["total"] = time.perf_counter() - t0
        rows.append(row)
    run = Run(rows, inner.bulk_texts - embedded_before, time.perf_counter() - started, threads)
    if mode != "baseline":
        feeder.join()
        for document_id in feeder.submitted:
            lib.library.delete(document_id)
    worker.stop()
    generator.close()
    embedder.close()  # type: ignore[attr-defined]
    return run


def describe(runs: list[Run]) -> dict[str, Any]:
    rows = [row for run in runs for row in run.rows]

    def ms(key: str) -> list[float]:
        values = [r[key] * 1000 for r in rows]
        return [round(statistics.median(values), 1), round(percentile(values, 0.95), 1)]

    return {
        "questions": len(rows),
        "ttft_ms_p50_p95": ms("total"),
        "embed_ms_p50_p95": ms("embed"),
        "prefill_ms_p50_p95": ms("ttft"),
        "ingest_chunks_per_s": round(
            sum(run.ingested for run in runs) / sum(run.seconds for run in runs), 1
        ),
        "ingest_query_threads": runs[0].threads,
    }


if __name__ == "__main__":
    main()
