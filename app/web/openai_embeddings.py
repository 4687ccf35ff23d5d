"""``POST /v1/embeddings`` with the embedder that indexes the documents.

Vectors are L2-normalised float32, as a list of floats or, with ``encoding_format:
"base64"`` (what the OpenAI SDK asks for by default), the little-endian float32 bytes.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
from litestar import post

from app.openai.errors import OpenAIError
from app.openai.schemas import EmbeddingIn, EmbeddingList, EmbeddingOut, EmbeddingUsage
from app.state import Services
from retrieval.embedder import Embedder

MAX_INPUTS = 2048  # OpenAI's limits
MAX_INPUT_TOKENS = 8192
MAX_REQUEST_TOKENS = 300_000
MAX_INPUT_CHARS = 100_000  # checked before tokenising, so a huge string costs nothing
BUNDLED_NAME = "all-MiniLM-L6-v2"


def embedding_model_name(services: Services) -> str:
    """The name the embedder answers to: its directory, or the bundled model's name."""
    settings = services.settings
    if settings.embedder.embedder_backend == "fake":
        return services.require_retrieval().embedder.model_id
    return (
        settings.embedder.embedder_model.name if settings.embedder.embedder_model else BUNDLED_NAME
    )


@post("/embeddings", status_code=200)
async def create_embeddings(data: EmbeddingIn, services: Services) -> EmbeddingList:
    embedder = services.require_retrieval().embedder
    name = embedding_model_name(services)
    if data.model not in (name, embedder.model_id, "default"):
        raise OpenAIError(
            f"no embedding model named {data.model!r}; this server embeds with {name!r}",
            status=404,
            param="model",
            code="model_not_found",
        )
    if data.dimensions is not None and data.dimensions != embedder.dimension:
        raise OpenAIError(
            f"{name} has {embedder.dimension} dimensions; dimensions={data.dimensions} "
            "is not supported",
            param="dimensions",
            code="unsupported_value",
        )
    texts = _texts(data.input)
    vectors, tokens = await asyncio.to_thread(_embed, embedder, texts)
    rows = [
        EmbeddingOut(i, _encode(vector, data.encoding_format)) for i, vector in enumerate(vectors)
    ]
    return EmbeddingList(rows, name, EmbeddingUsage(tokens, tokens))


def _texts(value: str | list[Any]) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not texts:
        raise OpenAIError("input must not be empty", param="input", code="invalid_value")
    if len(texts) > MAX_INPUTS:
        raise OpenAIError(
            f"at most {MAX_INPUTS} inputs per request, not {len(texts)}",
            param="input",
            code="invalid_value",
        )
    for index, text in enumerate(texts):
        param = "input" if isinstance(value, str) else f"input[{index}]"
        if not isinstance(text, str):
            raise OpenAIError(
                "input must be a string or a list of strings; token arrays are not supported",
                param=param,
                code="unsupported_value",
            )
        if not text.strip():
            raise OpenAIError("input must not be empty", param=param, code="invalid_value")
        if len(text) > MAX_INPUT_CHARS:
            raise OpenAIError(
                f"an input may hold at most {MAX_INPUT_CHARS} characters",
                param=param,
                code="invalid_value",
            )
    return texts


def _embed(embedder: Embedder, texts: list[str]) -> tuple[np.ndarray[Any, Any], int]:
    counts = embedder.count_tokens(texts)
    for index, count in enumerate(counts):
        if count > MAX_INPUT_TOKENS:
            raise OpenAIError(
                f"input[{index}] has {count} tokens; at most {MAX_INPUT_TOKENS} are allowed",
                param="input",
                code="invalid_value",
            )
    if sum(counts) > MAX_REQUEST_TOKENS:
        raise OpenAIError(
            f"the inputs hold {sum(counts)} tokens; at most {MAX_REQUEST_TOKENS} per request",
            param="input",
            code="invalid_value",
        )
    return embedder.embed_batch(texts), sum(counts)


def _encode(vector: np.ndarray[Any, Any], encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]
