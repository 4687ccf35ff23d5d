"""Optional second stage: a reranker reorders the fused candidates before the top k.

Off by default. The retriever hands the reranker its best ``rerank_candidates`` hits
(fused order, before the per-document cap) and caps and cuts whatever order comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from retrieval.types import Hit


class Reranker(Protocol):
    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """The same hits, best first, each with the reranker's score."""
        ...


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` from a local directory (never a download)."""

    def __init__(self, model_dir: Path, *, batch_size: int = 32, device: str | None = None):
        if not model_dir.is_dir():
            raise FileNotFoundError(f"no cross-encoder model directory at {model_dir}")
        from sentence_transformers import CrossEncoder  # heavy: imported on use

        self._model: Any = CrossEncoder(str(model_dir), device=device, local_files_only=True)
        self._batch_size = batch_size

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        if not hits:
            return []
        scores = self._model.predict(
            [(query, hit.reading) for hit in hits],
            batch_size=self._batch_size,
            show_progress_bar=False,
        )
        return ordered(hits, [float(s) for s in scores])


class KeywordReranker:
    """Deterministic fake: scores a hit by how many of the query's words it contains.
    ``history`` records each call's query and candidate chunk ids."""

    def __init__(self) -> None:
        self.history: list[tuple[str, list[int]]] = []

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        self.history.append((query, [h.chunk_id for h in hits]))
        words = set(query.lower().split())
        return ordered(hits, [float(sum(w in h.text.lower() for w in words)) for h in hits])


def ordered(hits: Sequence[Hit], scores: list[float]) -> list[Hit]:
    """Best score first; ties keep the incoming (fused) order."""
    order = sorted(range(len(hits)), key=lambda i: -scores[i])
    return [replace(hits[i], score=scores[i]) for i in order]
