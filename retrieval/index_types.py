"""Which FAISS structure holds the vectors: exact for small collections, IVF beyond a size.

* ``flat``: ``IndexIDMap2(IndexFlatIP)``, exact inner product; every query scores every
  vector (~0.1 ms per 1k vectors of 384 dims on one core). The default up to
  ``ivf_threshold`` vectors.
* ``ivf``: ``IndexIVFFlat`` with inner product and the chunk ids stored natively,
  ``nlist = 4·√n`` lists trained by k-means on (a sample of) the collection's own vectors;
  a query scores the ``nprobe`` nearest lists only. Unlike HNSW it supports real deletes,
  which the index needs (a deleted document leaves search at once).

The structure is chosen when the index is opened (server start, ``ragdesk ingest``,
``ragdesk eval``) and at each checkpoint of a running server: an exact index that has
grown past the threshold is rebuilt as IVF from SQLite, and an IVF index that has shrunk
below half of it goes back to exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from retrieval.embedder import Vectors

IndexKind = Literal["auto", "flat", "ivf"]
TRAINING_POINTS_PER_LIST = 64  # k-means sample: FAISS warns below 39 per centroid
MIN_IVF_VECTORS = 1000  # below this even a forced "ivf" stays exact: nothing to cluster


@dataclass(frozen=True)
class IndexSpec:
    kind: IndexKind = "auto"
    ivf_threshold: int = 50_000  # vectors from which "auto" builds an IVF index
    nprobe: int = 64  # lists an IVF query visits (of 4·√n: ~5% at 100k vectors)
    use_gpu: bool = True  # search on the GPUs when FAISS reports any (faiss-gpu build)
    # Checkpoints of at least this size are searched memory-mapped (retrieval/mapped_base.py);
    # the layers over a mapped base are merged into a new one past this share of its size.
    mmap_above_mb: float = 512.0
    compact_ratio: float = 0.1
    max_layer_vectors: int = 50_000  # added + deleted since the base: merged beyond this

    def maps(self, file_bytes: int) -> bool:
        return file_bytes >= self.mmap_above_mb * 2**20

    def wanted(self, count: int, current: str) -> str:
        """The structure for ``count`` vectors; ``auto`` keeps IVF down to half the
        threshold, so a collection near it is not rebuilt back and forth."""
        if count < MIN_IVF_VECTORS:
            return "flat"
        if self.kind != "auto":
            return self.kind
        if current == "ivf" and count >= self.ivf_threshold // 2:
            return "ivf"
        return "ivf" if count >= self.ivf_threshold else "flat"


def nlist_for(count: int) -> int:
    return max(1, min(int(4 * math.sqrt(max(count, 1))), count // TRAINING_POINTS_PER_LIST or 1))


def kind_of(index: Any) -> str:
    import faiss

    return "ivf" if isinstance(index, faiss.IndexIVF) else "flat"


def new_flat(dimension: int) -> Any:
    import faiss

    return faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))


def new_ivf(dimension: int, training: Vectors, count: int | None = None) -> Any:
    """An empty IVF index for ``count`` vectors, trained on ``training`` (all of them or
    a sample)."""
    import faiss

    nlist = min(nlist_for(count or len(training)), max(1, len(training) // 39))
    quantizer = faiss.IndexFlatIP(dimension)
    index = faiss.IndexIVFFlat(quantizer, dimension, nlist, faiss.METRIC_INNER_PRODUCT)
    sample = np.ascontiguousarray(training, dtype=np.float32)
    limit = nlist * TRAINING_POINTS_PER_LIST * 4
    if len(sample) > limit:
        rows = np.random.default_rng(0).choice(len(sample), limit, replace=False)
        sample = sample[np.sort(rows)]
    index.train(sample)
    return index


def stored_ids(index: Any) -> npt.NDArray[np.int64]:
    """Every id held, whatever the structure."""
    import faiss

    if isinstance(index, faiss.IndexIVF):
        lists: Any = index.invlists
        parts = [
            np.array(faiss.rev_swig_ptr(lists.get_ids(i), size), dtype=np.int64)
            for i in range(index.nlist)
            if (size := lists.list_size(i))
        ]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return np.asarray(faiss.vector_to_array(index.id_map), dtype=np.int64)


def flat_contents(index: Any) -> tuple[npt.NDArray[np.int64], Vectors]:
    """The ids and vectors of an exact (``new_flat``) index."""
    import faiss

    ids = np.asarray(faiss.vector_to_array(index.id_map), dtype=np.int64)
    if not len(ids):
        return ids, np.zeros((0, index.d), dtype=np.float32)
    return ids, np.asarray(index.index.reconstruct_n(0, len(ids)), dtype=np.float32)


def search_params(index: Any, selector: Any, nprobe: int) -> Any:
    import faiss

    if isinstance(index, faiss.IndexIVF):
        params: Any = faiss.SearchParametersIVF()
        params.nprobe = min(nprobe, index.nlist)
    elif selector is None:
        return None
    else:
        params = faiss.SearchParameters()
    if selector is not None:
        params.sel = selector
    return params


def gpu_copy(index: Any, nprobe: int) -> Any | None:
    """A copy of ``index`` on every GPU FAISS sees, or None (CPU build, no GPU).

    Used for unfiltered searches only (filtered ones stay on the CPU index, whose
    ID selectors every FAISS index type supports). Only a code path here: the development
    machines have no GPU and run faiss-cpu, so it is untested.
    """
    import faiss

    if not hasattr(faiss, "index_cpu_to_all_gpus") or faiss.get_num_gpus() == 0:
        return None
    copy = faiss.index_cpu_to_all_gpus(index)
    if isinstance(index, faiss.IndexIVF):
        faiss.GpuParameterSpace().set_index_parameter(copy, "nprobe", nprobe)
    return copy
