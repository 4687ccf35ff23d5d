"""Combining ranked lists (reciprocal rank fusion) and spreading hits over documents."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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
