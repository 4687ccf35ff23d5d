"""Optional search stages built from Settings: the embedding batcher and the reranker."""

from __future__ import annotations

from collections.abc import Callable

from app.config.settings import Settings
from retrieval.embedder import Embedder, HashingEmbedder
from retrieval.remote_embedder import RemoteEmbedder
from retrieval.rerank import Reranker


def batched(
    settings: Settings, embedder: Embedder, busy: Callable[[], bool] | None = None
) -> Embedder:
    """Questions and ingestion share forward passes (retrieval/batching.py); ingestion
    waits while ``busy()`` (a model is generating), up to ``embed_ingest_yield_s``."""
    if isinstance(embedder, HashingEmbedder):
        return embedder  # nothing to batch: tests and demos see the fake itself
    if isinstance(embedder, RemoteEmbedder):
        return embedder  # spreads its calls over its endpoints, which batch them
    from retrieval.batching import BatchingEmbedder

    embed = settings.embedder

    def set_threads(count: int) -> None:
        import torch

        torch.set_num_threads(count)

    return BatchingEmbedder(
        embedder,
        max_batch=embed.embed_batch_size,
        bulk_batch=embed.embed_ingest_batch,
        max_wait_ms=embed.embed_max_wait_ms,
        set_threads=set_threads,
        query_threads=embed.embed_query_threads,
        bulk_threads=embed.embed_ingest_threads,
        busy=busy,
        bulk_yield_s=embed.embed_ingest_yield_s,
    )


def reranker(settings: Settings) -> Reranker | None:
    if settings.search.reranker == "none":
        return None
    if settings.search.reranker == "llm":
        from llm.models import small_model
        from retrieval.llm_rerank import LlmReranker

        model = settings.search.reranker_model or small_model(settings.models_dir)
        return LlmReranker(model, n_threads=settings.generation.n_threads)
    if settings.search.reranker_model is None:
        raise ValueError("RAGDESK_RERANKER=cross-encoder needs RAGDESK_RERANKER_MODEL")
    from retrieval.rerank import CrossEncoderReranker

    return CrossEncoderReranker(settings.search.reranker_model)
