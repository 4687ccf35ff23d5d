"""Index structure by size: IVF beyond a threshold, with recall checked against exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrieval.index import FaissIndex
from retrieval.index_types import IndexSpec, new_ivf, nlist_for
from tests.retrieval_kit import make_kit


def clustered(n: int, dim: int, centers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Points around topic centres, as embeddings of related passages are."""
    noise = rng.normal(size=(n, dim)) * (1.2 / np.sqrt(dim))  # |noise| ≈ 1.2 |centre|
    points = centers[rng.integers(len(centers), size=n)] + noise
    points = points.astype(np.float32)
    return points / np.linalg.norm(points, axis=1, keepdims=True)


def test_ivf_recall_at_10_against_exact_search() -> None:
    rng = np.random.default_rng(7)
    dim, n = 64, 30_000
    centers = rng.normal(size=(300, dim)) / np.sqrt(dim)
    vectors = clustered(n, dim, centers, rng)
    queries = clustered(200, dim, centers, rng)
    ids = np.arange(10, 10 + n, dtype=np.int64)
    exact = FaissIndex(dim, "m")
    exact.add(ids, vectors)
    approximate = FaissIndex(dim, "m", _index=new_ivf(dim, vectors), spec=IndexSpec())
    approximate.add(ids, vectors)
    assert approximate.kind == "ivf" and exact.kind == "flat"
    found = [
        len({i for i, _ in exact.search(q, 10)} & {i for i, _ in approximate.search(q, 10)})
        for q in queries
    ]
    recall = sum(found) / (10 * len(queries))
    assert recall >= 0.95, recall
    # The data is hard enough that visiting one list loses neighbours: the check has teeth.
    one_list = FaissIndex(dim, "m", _index=approximate._index, spec=IndexSpec(nprobe=1))
    shallow = [
        len({i for i, _ in exact.search(q, 10)} & {i for i, _ in one_list.search(q, 10)})
        for q in queries
    ]
    assert sum(shallow) / (10 * len(queries)) < 0.9

    # Deletes are real, and a filter still returns k hits from few allowed ids.
    assert approximate.remove(ids[:100]) == 100
    assert not set(approximate.ids().tolist()) & set(ids[:100].tolist())
    allowed = ids[5000:5012]
    hits = approximate.search(queries[0], 10, allowed=allowed)
    assert len(hits) == 10 and {i for i, _ in hits} <= set(allowed.tolist())
    assert hits == exact.search(queries[0], 10, allowed=allowed)


def test_nlist_follows_the_square_root() -> None:
    assert nlist_for(100_000) == 1264
    assert nlist_for(1_000) == 15  # at least 64 training points per list


@pytest.mark.parametrize("kind", ["auto", "ivf"])
def test_open_index_switches_structure_by_size(tmp_path: Path, kind: str) -> None:
    kit = make_kit(tmp_path)
    paragraphs = [
        f"Rule {n}: form {n * 13} goes to desk {n % 97} on floor {n % 7} of building"
        f" {n % 11}, signed by the officer of section {n % 5} within {n % 30} days."
        for n in range(1300)
    ]
    document, _ = kit.library.submit(
        data="\n\n".join(paragraphs).encode(), filename="rules.md", collection_id=kit.collection_id
    )
    index, _ = kit.open_index()
    worker = kit.worker(index)
    kit.library.worker = worker
    worker.ingest(document.id)
    count = index.count
    assert count >= 1000 and index.kind == "flat"
    spec = IndexSpec(kind=kind, ivf_threshold=1000)  # type: ignore[arg-type]

    ivf, report = kit.open_index(spec)
    assert ivf.kind == "ivf" and ivf.count == count and report.rebuilt_as == "ivf"
    query = kit.embedder.embed_batch([paragraphs[500]])[0]
    [(top, _)] = ivf.search(query, 1)
    hit = kit.store.chunk(top)
    assert hit is not None and hit.text == paragraphs[500]
    again, report = kit.open_index(spec)
    assert again.kind == "ivf" and not report.changed  # the checkpoint kept the structure

    kit.library.delete(document.id)  # shrinks below the threshold: back to exact
    flat, report = kit.open_index(spec)
    assert flat.kind == "flat" and flat.count == 0


def test_a_growing_index_turns_ivf_at_a_checkpoint_in_place(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    spec = IndexSpec(ivf_threshold=1000)
    index, _ = kit.open_index(spec)
    worker = kit.worker(index)
    paragraphs = [
        f"Clause {n}: item {n * 7} is stored in bay {n % 41} of hall {n % 9}, counted each"
        f" {n % 12} weeks by the team of shift {n % 3} and logged by the clerk."
        for n in range(1200)
    ]
    document, _ = kit.library.submit(
        data="\n\n".join(paragraphs).encode(), filename="c.md", collection_id=kit.collection_id
    )
    worker.ingest(document.id)
    assert index.kind == "flat" and index.count >= 1000
    worker.checkpoint()
    assert index.kind == "ivf"  # the same object the retriever holds, now IVF
    assert sorted(index.ids().tolist()) == sorted(
        kit.store.embedded_chunk_ids(kit.embedder.model_id).tolist()
    )
    reopened, report = kit.open_index(spec)
    assert reopened.kind == "ivf" and not report.changed
