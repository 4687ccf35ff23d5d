"""Retriever: dense, BM25 and hybrid modes, the min_score gate, collections, diversity."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.embedder import Vectors
from retrieval.fusion import diversify, reciprocal_rank_fusion
from retrieval.index import FaissIndex, IdArray
from retrieval.search import Retriever, SearchConfig, SearchMode
from retrieval.types import Hit
from tests.retrieval_kit import Kit, make_kit

HANDBOOK = (
    b"# Travel policy\n\nEmployees may claim a daily meal allowance of 45 euros when "
    b"travelling abroad.\n\n# Security\n\nThe emergency exit code is XK-4471.\n"
)


def ingest(kit: Kit, index: FaissIndex, data: bytes, name: str, collection: int = 0) -> int:
    document, _ = kit.library.submit(
        data=data, filename=name, collection_id=collection or kit.collection_id
    )
    kit.worker(index).ingest(document.id)
    return document.id


def retriever(kit: Kit, index: FaissIndex, mode: SearchMode = "hybrid", **config: int) -> Retriever:
    return Retriever(kit.embedder, index, kit.store, SearchConfig(mode=mode, **config))


class FixedIndex:
    """A vector index that answers one fixed ranking (to pin down the fusion)."""

    def __init__(self, ranking: list[tuple[int, float]]):
        self.ranking = ranking

    def search(
        self, query: Vectors, k: int, *, allowed: IdArray | None = None
    ) -> list[tuple[int, float]]:
        return [(i, s) for i, s in self.ranking if allowed is None or i in allowed][:k]


def test_rrf_rewards_agreement_and_respects_weights() -> None:
    dense = [(1, 0.9), (2, 0.8), (3, 0.7)]
    lexical = [(3, 12.0), (4, 9.0)]
    fused = [i for i, _ in reciprocal_rank_fusion([(dense, 1.0), (lexical, 1.0)], k=60)]
    assert fused[0] == 3  # in both lists beats first place in one
    assert set(fused) == {1, 2, 3, 4}
    only_dense = reciprocal_rank_fusion([(dense, 1.0), (lexical, 0.0)], k=60)
    assert [i for i, _ in only_dense][:3] == [1, 2, 3]


def test_diversify_caps_hits_per_document() -> None:
    hits = [Hit(i, doc, "t", 1, 0, 1, "x", 1.0) for i, doc in enumerate([7, 7, 7, 7, 8, 9])]
    assert [h.document_id for h in diversify(hits, 4, 2)] == [7, 7, 8, 9]
    assert [h.document_id for h in diversify(hits, 4, 0)] == [7, 7, 7, 7]
    assert [h.document_id for h in diversify(hits, 2, 1)] == [7, 8]


def test_each_mode_and_hybrid_fusion(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    ingest(kit, index, HANDBOOK, "h.md")
    dense = retriever(kit, index, "dense").search("meal allowance abroad", 2).hits
    assert "45 euros" in dense[0].text and -1.0 <= dense[0].score <= 1.0
    lexical = retriever(kit, index, "bm25").search("XK-4471", 2).hits
    assert ["XK-4471" in h.text for h in lexical] == [True]
    # Hybrid: a passage the vector side ranks last still wins when BM25 ranks it first.
    meal, code = dense[0].chunk_id, lexical[0].chunk_id
    assert meal != code
    pinned = FixedIndex([(meal, 0.9), (code, 0.1)])
    fused = Retriever(kit.embedder, pinned, kit.store).search("XK-4471 code", 2).hits
    assert [h.chunk_id for h in fused] == [code, meal]
    assert fused[0].score > fused[1].score


def test_min_score_is_a_cosine_gate_in_hybrid_mode(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    ingest(kit, index, HANDBOOK, "h.md")
    # Shares one word ("exit") with a passage, little else: BM25 finds it, its cosine is low.
    query = "exit xylophone quasar walrus banjo zeppelin marmalade"
    assert retriever(kit, index, "bm25").search(query, 3, min_score=0.3).hits  # no cosine
    assert retriever(kit, index).search(query, 3).hits  # no gate
    assert retriever(kit, index).search(query, 3, min_score=0.3).hits == []
    # An on-topic question clears the same gate in hybrid mode.
    assert retriever(kit, index).search("emergency exit code", 3, min_score=0.3).hits
    # Passages found by BM25 alone are gated by their stored vectors' cosine too.
    blind = Retriever(kit.embedder, FixedIndex([]), kit.store)
    assert blind.search(query, 3, min_score=0.3).hits == []
    [hit] = blind.search("emergency exit code", 3, min_score=0.3).hits
    assert "XK-4471" in hit.text


def test_one_document_cannot_fill_every_slot(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    long = "\n\n".join(
        f"# Section {n}\n\nThe turbine blade inspection covers rotor wear case {n}."
        for n in range(12)
    )
    long_id = ingest(kit, index, long.encode(), "long.md")
    short_id = ingest(kit, index, b"# Memo\n\nA turbine blade inspection is due.", "memo.md")
    for mode in ("dense", "bm25", "hybrid"):
        hits = retriever(kit, index, mode, max_per_document=2).search("turbine blade", 4).hits
        documents = [h.document_id for h in hits]
        assert documents.count(long_id) == 2 and short_id in documents, (mode, documents)
    unlimited = retriever(kit, index, "hybrid", max_per_document=0).search("turbine blade", 4)
    assert [h.document_id for h in unlimited.hits].count(long_id) >= 3


def test_collections_filter_both_retrievers_before_top_k(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    other = kit.store.ensure_collection("other")
    for n in range(30):  # many strong matches outside the allowed collection
        ingest(kit, index, f"# Exit {n}\n\nexit code exit code {n}".encode(), f"{n}.md")
    mine = ingest(kit, index, b"# Note\n\nThe exit code changed.", "note.md", collection=other)
    for mode in ("dense", "bm25", "hybrid"):
        search = retriever(kit, index, mode, candidates=4)
        hits = search.search("exit code", 3, collection_ids={other}).hits
        assert [h.document_id for h in hits] == [mine], mode
        assert search.search("exit code", 3, collection_ids=set()).hits == []


def test_scoped_search_equals_unscoped_when_the_collection_holds_the_best(tmp_path: Path) -> None:
    """The over-fetch fast path (filter the few ids found) agrees with no filter at all."""
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    other = kit.store.ensure_collection("other")
    for n in range(12):
        ingest(kit, index, f"# Exit {n}\n\nexit code exit code {n}".encode(), f"{n}.md")
    ingest(kit, index, b"# Parking\n\nParking costs four euros.", "p.md", collection=other)
    for mode in ("dense", "bm25", "hybrid"):
        search = retriever(kit, index, mode, candidates=4)
        scoped = search.search("exit code", 3, collection_ids={kit.collection_id}).hits
        assert scoped == search.search("exit code", 3).hits, mode
        assert len(scoped) == 3


def test_faiss_filter_applies_inside_the_search() -> None:
    index = FaissIndex(4, "m")
    vectors = np.eye(4, dtype=np.float32)
    index.add(np.arange(4, dtype=np.int64), vectors)
    assert [i for i, _ in index.search(vectors[0], 1, allowed=np.array([3, 2]))] in ([2], [3])
    assert index.search(vectors[0], 2, allowed=np.array([], dtype=np.int64)) == []
