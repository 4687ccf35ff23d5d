"""Combining ranked lists (reciprocal rank fusion), and choosing hits that do not repeat
one another (maximal marginal relevance, a per-document cap)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from retrieval.embedder import Vectors
from retrieval.types import Hit

Ranking = Sequence[tuple[int, float]]  # (chunk id, score), best first


def reciprocal_rank_fusion(
    rankings: Iterable[tuple[Ranking, float]], k: float = 60.0
) -> list[tuple[int, float]]:
    """Fuse (ranking, weight) pairs: each chunk scores the sum of ``weight / (k + rank)``.

    Only ranks count, so cosines and BM25 scores need no common scale (Cormack et al.,
    2009). A larger ``k`` flattens the advantage of the very first places.
    """
    fused: dict[int, float] = {}
    for ranking, weight in rankings:
        for rank, (chunk_id, _) in enumerate(ranking, start=1):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + weight / (k + rank)
    # Ties (equal fused scores) keep a stable order: the lower chunk id first.
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def diversify(hits: Iterable[Hit], k: int, max_per_document: int) -> list[Hit]:
    """The first ``k`` hits with at most ``max_per_document`` from any one document
    (0 = no limit), so one long document cannot fill every slot."""
    chosen: list[Hit] = []
    taken: dict[int, int] = {}
    for hit in hits:
        if len(chosen) == k:
            break
        count = taken.get(hit.document_id, 0)
        if max_per_document and count >= max_per_document:
            continue
        taken[hit.document_id] = count + 1
        chosen.append(hit)
    return chosen


def mmr(
    hits: Sequence[Hit], vectors: Mapping[int, Vectors], k: int, relevance_weight: float
) -> list[Hit]:
    """Maximal marginal relevance (Carbonell & Goldstein, 1998): pick ``k`` of ``hits``
    (best first) one at a time, each maximising

        relevance_weight * relevance - (1 - relevance_weight) * redundancy

    where relevance is the hit's score relative to the best (:func:`_relevance`) and redundancy its
    highest cosine to a passage already picked. A near-copy of a chosen passage (the same
    paragraph in two versions, the neighbouring chunk saying the same) gives way to
    something new, while several different passages of one long document can all stay;
    a hard cap per document cannot tell the two apart. ``relevance_weight`` 1 keeps the
    ranking as it is; hits without a stored vector count as redundant with nothing.
    """
    if relevance_weight >= 1.0 or len(hits) <= 1:
        return list(hits[:k])
    relevance = _relevance([hit.score for hit in hits])
    unit = {
        hit.chunk_id: v / (np.linalg.norm(v) or 1.0)
        for hit in hits
        if (v := vectors.get(hit.chunk_id)) is not None
    }
    redundancy = [0.0] * len(hits)
    chosen: list[int] = []
    left = list(range(len(hits)))
    while left and len(chosen) < k:
        pick = max(
            left,
            key=lambda i: relevance_weight * relevance[i] - (1 - relevance_weight) * redundancy[i],
        )
        chosen.append(pick)
        left.remove(pick)
        picked = unit.get(hits[pick].chunk_id)
        if picked is None:
            continue
        for i in left:
            other = unit.get(hits[i].chunk_id)
            if other is not None:
                redundancy[i] = max(redundancy[i], float(picked @ other))
    return [hits[i] for i in chosen]


def _relevance(scores: Sequence[float]) -> list[float]:
    """Scores on [0, 1]: as a share of the best when all are positive (fused RRF scores,
    cosines), else scaled from the lowest to the highest (a reranker's logits)."""
    low, high = min(scores), max(scores)
    if low > 0:
        return [s / high for s in scores]
    spread = high - low or 1.0
    return [(s - low) / spread for s in scores]
