"""Embedder backends side by side: PyTorch (sentence-transformers), ONNX fp32, ONNX int8.

    python -m bench.embedders [--documents N] [--repeats N]

The texts are exactly what ingestion embeds for the stdlib-docs corpus (chunks with their
title and heading). For each backend: chunks/s (best of ``--repeats``, the backends
taking turns), cosine to the PyTorch vectors, and how many of PyTorch's top-5 chunks for
the bench.query questions the backend also ranks top-5.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.ingest import _embedded_texts
from bench.query import QUESTIONS, indexed_corpus
from retrieval.embedder import Embedder, Vectors, bundled_embedder_dir
from retrieval.onnx_embedder import OnnxEmbedder, export_onnx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        torch_embedder, store, _ = indexed_corpus(root, args.documents)
        texts = _embedded_texts(store)
        model = bundled_embedder_dir()
        backends: dict[str, Embedder] = {
            "PyTorch (sentence-transformers)": torch_embedder,
            "ONNX fp32": OnnxEmbedder(export_onnx(model, root / "fp32"), model_id="fp32"),
            "ONNX int8": OnnxEmbedder(
                export_onnx(model, root / "int8", quantize=True), model_id="int8"
            ),
        }
        best = dict.fromkeys(backends, float("inf"))
        vectors: dict[str, Vectors] = {}
        for _ in range(args.repeats):
            for name, embedder in backends.items():
                started = time.perf_counter()
                vectors[name] = embedder.embed_batch(texts)
                best[name] = min(best[name], time.perf_counter() - started)
        questions = {name: e.embed_batch(QUESTIONS) for name, e in backends.items()}
    reference = next(iter(backends))
    print(f"{len(texts)} chunks, {args.repeats} runs each, best run:\n")
    print("| backend | chunks/s | speed-up | cosine to PyTorch: median / lowest | top-5 kept |")
    print("| --- | --- | --- | --- | --- |")
    for name in backends:
        cosines = (vectors[name] * vectors[reference]).sum(axis=1)
        kept = top5_overlap(
            vectors[reference], questions[reference], vectors[name], questions[name]
        )
        print(
            f"| {name} | {len(texts) / best[name]:.1f} | {best[reference] / best[name]:.2f}× "
            f"| {statistics.median(cosines.tolist()):.4f} / {cosines.min():.4f} | {kept:.0%} |"
        )


def top5_overlap(docs_a: Vectors, queries_a: Vectors, docs_b: Vectors, queries_b: Vectors) -> float:
    """Share of A's top-5 chunks per question that B also puts in its top 5."""
    top_a = np.argsort(-(queries_a @ docs_a.T), axis=1)[:, :5]
    top_b = np.argsort(-(queries_b @ docs_b.T), axis=1)[:, :5]
    shared = [len(set(a) & set(b)) for a, b in zip(top_a.tolist(), top_b.tolist(), strict=True)]
    return sum(shared) / (5 * len(shared))


if __name__ == "__main__":
    main()
