"""GPU paths: FAISS's GPU copy of the index and llama.cpp's offload of every layer.

Skipped where there is no GPU (the development and CI machines); they run on a machine
with a CUDA build of llama-cpp-python and faiss-gpu, e.g. through ``scripts/gpu_check.sh``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm.local import LocalModel, LocalModelConfig
from llm.models import small_model
from llm.params import CompletionRequest, Finished, SamplingParams, TextDelta
from retrieval.index import FaissIndex
from retrieval.index_types import IndexSpec, new_ivf

pytestmark = pytest.mark.gpu


def faiss_gpus() -> int:
    import faiss

    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def llama_offloads() -> bool:
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


needs_faiss_gpu = pytest.mark.skipif(faiss_gpus() == 0, reason="FAISS sees no GPU")
needs_llama_gpu = pytest.mark.skipif(not llama_offloads(), reason="llama.cpp has no GPU offload")


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    unit: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit


@needs_faiss_gpu
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_unfiltered_searches_run_on_a_gpu_copy_that_follows_writes(kind: str) -> None:
    dim, n = 64, 20_000
    vectors = unit_vectors(n, dim, seed=1)

    def built(use_gpu: bool) -> FaissIndex:
        raw = new_ivf(dim, vectors) if kind == "ivf" else None  # k-means is seeded
        index = FaissIndex(dim, "m", _index=raw, spec=IndexSpec(use_gpu=use_gpu))
        index.add(np.arange(n, dtype=np.int64), vectors)
        return index

    on_gpu, on_cpu = built(True), built(False)
    queries = unit_vectors(50, dim, seed=2)
    assert on_gpu._searcher() is not on_gpu._index  # the GPU copy serves unfiltered searches
    for query in queries:
        assert on_gpu.search(query, 5)[0][0] == on_cpu.search(query, 5)[0][0]
    allowed = np.arange(0, n, 7, dtype=np.int64)  # filtered: on the CPU index, same answers
    got = on_gpu.search(queries[1], 5, allowed=allowed)
    assert got == on_cpu.search(queries[1], 5, allowed=allowed) and all(i % 7 == 0 for i, _ in got)
    top = on_gpu.search(queries[0], 1)[0][0]
    on_gpu.remove(np.array([top], dtype=np.int64))
    assert top not in [i for i, _ in on_gpu.search(queries[0], 10)]  # the copy was refreshed


@needs_faiss_gpu
def test_a_mapped_index_stays_on_the_cpu(tmp_path: Path) -> None:
    index = FaissIndex(32, "m", spec=IndexSpec(use_gpu=True, mmap_above_mb=0))
    index.add(np.arange(2000, dtype=np.int64), unit_vectors(2000, 32, seed=3))
    index.save(tmp_path)
    assert index.mapped and index._searcher() is index._main


@needs_llama_gpu
def test_every_layer_offloaded_generates_on_the_gpu() -> None:
    path = small_model(Path(__file__).parent.parent / "data" / "models")
    model = LocalModel(LocalModelConfig(name="gemma", path=path, n_gpu_layers=-1))
    try:
        assert model.device == "GPU"
        events = list(model.submit(CompletionRequest("Count: 1, 2, 3,", SamplingParams(16, 0))))
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        finished = events[-1]
        assert isinstance(finished, Finished) and finished.reason in ("stop", "length")
        assert "4" in text
    finally:
        model.close()
