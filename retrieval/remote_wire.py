"""What an OpenAI-compatible ``/v1/embeddings`` answer means: vectors or a classified
failure."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from retrieval.embedder import Vectors


@dataclass(eq=False)
class Failed(Exception):
    """A request that brought no usable vectors; ``kind`` says what the caller may do."""

    kind: str  # unreachable | broken | busy | server | mismatch | refused
    detail: str
    retry_after_s: float | None = None


def embeddings_url(url: str) -> str:
    root = url.rstrip("/")
    return root + ("/embeddings" if root.endswith("/v1") else "/v1/embeddings")


def status_failure(response: httpx.Response) -> Failed:
    status = response.status_code
    detail = f"HTTP {status}: {_error_message(response)}"
    if status in (429, 503):
        retry = response.headers.get("Retry-After", "")
        return Failed("busy", detail, float(retry) if retry.isdigit() else None)
    if status >= 500 or status == 408:
        return Failed("server", detail)
    return Failed("refused", detail)  # a wrong key, an unknown model: final


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return str(message)[:300] if message else response.reason_phrase
    except ValueError:
        return response.reason_phrase


def vectors(response: httpx.Response, count: int, dimension: int | None) -> Vectors:
    """The rows of an embeddings answer, in input order, L2-normalised."""
    try:
        rows = sorted(response.json()["data"], key=lambda row: int(row["index"]))
        vectors = np.asarray([_row(row["embedding"]) for row in rows], dtype=np.float32)
    except (ValueError, KeyError, TypeError) as exc:
        raise Failed("mismatch", f"not an embeddings answer ({exc})") from None
    if vectors.ndim != 2 or len(vectors) != count:
        raise Failed("mismatch", f"{len(rows)} vectors for {count} texts")
    if dimension is not None and vectors.shape[1] != dimension:
        raise Failed("mismatch", f"{vectors.shape[1]} dimensions, not {dimension}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


def _row(value: Any) -> Any:
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return value


def differs(vectors: Vectors, reference: Vectors, tolerance: float) -> str | None:
    """Why ``vectors`` are not ``reference`` (another dimension, another model), or None."""
    if vectors.shape != reference.shape:
        return f"{vectors.shape[1]} dimensions, expected {reference.shape[1]}"
    gap = float(np.max(np.abs(vectors - reference)))
    if gap > tolerance:
        return f"probe vectors differ by up to {gap:.2g} (tolerance {tolerance:g}): another model"
    return None
