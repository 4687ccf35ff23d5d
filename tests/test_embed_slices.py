"""How one embedding slice is shared among the documents in progress (N2 fairness)."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.embed_slices import Embedding, share_slice


def test_owners_share_a_slice_equally_when_both_need_more() -> None:
    assert share_slice([("a", 40_000), ("b", 40_000)], 512) == [256, 256]


def test_a_small_upload_takes_what_it_needs_and_the_large_document_the_rest() -> None:
    assert share_slice([("big", 40_000), ("small", 3)], 512) == [509, 3]


def test_an_owners_documents_are_served_fewest_left_first() -> None:
    counts = share_slice([("a", 1_000), ("a", 10), ("a", 20)], 100)
    assert counts == [70, 10, 20]


def test_an_owner_with_many_documents_gets_one_share_not_one_per_document() -> None:
    counts = share_slice([("a", 500), ("a", 500), ("a", 500), ("b", 500)], 512)
    assert counts[3] == 256 and sum(counts[:3]) == 256


@pytest.mark.parametrize(
    "wanted",
    [
        [("a", 0), ("b", 5)],
        [("a", 1), ("b", 1), ("c", 1)],
        [(n, 7) for n in range(600)],
        [("a", 100_000)],
        [],
    ],
)
def test_a_slice_is_never_overfilled_and_never_left_empty_while_texts_wait(
    wanted: list[tuple[object, int]],
) -> None:
    counts = share_slice(wanted, 512)
    assert len(counts) == len(wanted)
    assert sum(counts) == min(512, sum(left for _, left in wanted))
    assert all(0 <= count <= left for count, (_, left) in zip(counts, wanted, strict=True))


def test_every_owner_moves_on_while_the_slice_has_room_for_all() -> None:
    counts = share_slice([(n, 10_000) for n in range(8)], 512)
    assert counts == [64] * 8


def test_an_embedding_puts_vectors_back_in_the_texts_order() -> None:
    texts = ["a much longer text than the others", "b", "cc text", "dd"]
    embedding = Embedding(texts, dimension=1)
    slices = []
    while embedding.left:
        part = embedding.next_texts(3)
        slices.append(part)
        embedding.add(np.array([[float(len(t))] for t in part], dtype=np.float32))
    assert slices == [["b", "dd", "cc text"], ["a much longer text than the others"]]
    assert embedding.vectors()[:, 0].tolist() == [float(len(t)) for t in texts]


def test_vectors_are_refused_before_every_text_is_embedded() -> None:
    embedding = Embedding(["one", "two"], dimension=2)
    embedding.add(np.zeros((1, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="1 texts"):
        embedding.vectors()
