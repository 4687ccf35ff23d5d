"""Neighbouring-chunk expansion and the optional reranking stage of the Retriever."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from retrieval.index import FaissIndex
from retrieval.neighbours import expand_short_hits
from retrieval.rerank import CrossEncoderReranker, KeywordReranker
from retrieval.search import Retriever, SearchConfig
from retrieval.types import Hit
from tests.retrieval_kit import Kit, make_kit

# Three short sections on one page: each becomes its own chunk.
MEMO = (
    b"# Parking\n\nBadge 7.\n\n# Canteen\n\nThe canteen opens at noon and serves soup.\n\n"
    b"# Library\n\nBooks go back within three weeks of loan.\n"
)


def setup(tmp_path: Path, data: bytes = MEMO) -> tuple[Kit, FaissIndex, int]:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    document, _ = kit.library.submit(data=data, filename="m.md", collection_id=kit.collection_id)
    kit.worker(index).ingest(document.id)
    return kit, index, document.id


def test_short_hit_is_widened_over_its_page_neighbours_with_real_offsets(tmp_path: Path) -> None:
    kit, index, document_id = setup(tmp_path)
    plain = Retriever(kit.embedder, index, kit.store, SearchConfig(mode="bm25"))
    [short] = plain.search("badge", 1).hits
    assert len(short.text) < 40
    wide = Retriever(
        kit.embedder, index, kit.store, SearchConfig(mode="bm25", expand_below_chars=40)
    )
    [hit] = wide.search("badge", 1).hits
    page = kit.store.page_text(document_id, hit.page)
    assert page is not None
    assert hit.chunk_id == short.chunk_id and hit.score == short.score
    assert hit.start <= short.start and hit.end > short.end
    assert hit.text == page[hit.start : hit.end]  # the citation points at real text
    assert "Badge 7." in hit.text and "canteen" in hit.text
    # A long enough hit is left alone.
    [long] = wide.search("books loan weeks", 1).hits
    [same] = plain.search("books loan weeks", 1).hits
    assert long == same


def test_expansion_is_off_at_zero_and_drops_hits_inside_a_widened_one(tmp_path: Path) -> None:
    kit, _, _ = setup(tmp_path)
    hits = [h for h in (kit.store.chunk(i) for i in range(1, 10)) if h is not None]
    assert expand_short_hits(kit.store, hits, 0) is hits
    widened = expand_short_hits(kit.store, hits, 10_000)
    assert len(widened) < len(hits)
    for hit in widened:
        page = kit.store.page_text(hit.document_id, hit.page)
        assert page is not None and hit.text == page[hit.start : hit.end]


class ReversingReranker:
    """Reverses the fused order, so the plumbing shows in the result."""

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        self.seen.append([h.chunk_id for h in hits])
        return [replace(h, score=float(n)) for n, h in enumerate(reversed(hits))]


def test_reranker_reorders_fused_candidates_before_the_cap(tmp_path: Path) -> None:
    kit, index, _ = setup(tmp_path)
    config = SearchConfig(mode="bm25", max_per_document=1, rerank_candidates=5)
    query = "canteen soup badge books loan weeks"
    fused = Retriever(kit.embedder, index, kit.store, replace(config, max_per_document=0))
    candidates = [h.chunk_id for h in fused.search(query, 5).hits]
    assert len(candidates) == 3
    reranker = ReversingReranker()
    reranked = Retriever(kit.embedder, index, kit.store, config, reranker=reranker)
    hits = reranked.search(query, 2).hits
    assert reranker.seen == [candidates]  # every fused candidate, in fused order
    # The cap (1 per document) applies to the reranked order: its first hit only.
    assert [h.chunk_id for h in hits] == [candidates[-1]]
    off = Retriever(kit.embedder, index, kit.store, config)
    assert [h.chunk_id for h in off.search(query, 2).hits] == [candidates[0]]


def test_keyword_reranker_scores_by_shared_words(tmp_path: Path) -> None:
    kit, _, _ = setup(tmp_path)
    hits = [h for h in (kit.store.chunk(i) for i in (1, 2, 3)) if h is not None]
    reranked = KeywordReranker().rerank("canteen soup noon", hits)
    assert reranked[0].chunk_id == 2 and reranked[0].score == 3.0
    assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)


@pytest.mark.skipif(
    not os.environ.get("RAGDESK_RERANKER_MODEL"), reason="no local cross-encoder configured"
)
def test_cross_encoder_from_a_local_directory(tmp_path: Path) -> None:
    kit, _, _ = setup(tmp_path)
    hits = [h for h in (kit.store.chunk(i) for i in (1, 2, 3)) if h is not None]
    model = CrossEncoderReranker(Path(os.environ["RAGDESK_RERANKER_MODEL"]))
    reranked = model.rerank("When does the canteen open?", hits)
    assert reranked[0].chunk_id == 2


def test_cross_encoder_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        CrossEncoderReranker(tmp_path / "absent")
