"""Retrieval objects configured from Settings, shared by the server and the CLI commands."""

from __future__ import annotations

from app.config.settings import Settings
from retrieval.embedder import (
    Embedder,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    bundled_embedder_dir,
    model_id,
)
from retrieval.index import FaissIndex
from retrieval.index_types import IndexSpec
from retrieval.ingest import IngestConfig
from retrieval.search import SearchConfig
from retrieval.store import DocumentStore
from retrieval.vector_sync import SyncReport, open_index


def index_spec(settings: Settings) -> IndexSpec:
    return IndexSpec(
        kind=settings.index_type,
        ivf_threshold=settings.ivf_threshold,
        nprobe=settings.ivf_nprobe,
        use_gpu=settings.faiss_gpu,
        mmap_above_mb=settings.index_mmap_above_mb,
    )


def build_embedder(settings: Settings) -> Embedder:
    """The configured embedder (heavy: loads the model)."""
    if settings.embedder_backend == "fake":
        return HashingEmbedder()
    model_dir = settings.embedder_model or bundled_embedder_dir()
    if settings.embedder_backend in ("onnx", "onnx-int8"):
        from retrieval.onnx_embedder import OnnxEmbedder, export_onnx

        quantize = settings.embedder_backend == "onnx-int8"
        # fp32 ONNX gives the PyTorch vectors (to ~1e-7), so the index stays valid
        variant = "onnx-int8" if quantize else "sentence-transformers"
        out = settings.data_dir / "models" / f"{model_dir.name}-{settings.embedder_backend}"
        return OnnxEmbedder(
            export_onnx(model_dir, out, quantize=quantize),
            model_id=model_id(model_dir, variant),
            batch_size=settings.embed_batch_size,
        )
    return SentenceTransformerEmbedder(model_dir, batch_size=settings.embed_batch_size)


def open_vector_index(
    settings: Settings, store: DocumentStore, embedder: Embedder, *, read_only: bool = False
) -> tuple[FaissIndex, SyncReport]:
    """The FAISS index for ``embedder``'s vectors, rebuilt or caught up from SQLite;
    ``read_only`` writes no checkpoint (the server may own the directory meanwhile)."""
    return open_index(
        settings.index_dir,
        store,
        model_id=embedder.model_id,
        dimension=embedder.dimension,
        spec=index_spec(settings),
        checkpoint=not read_only,
    )


def ingest_config(settings: Settings) -> IngestConfig:
    return IngestConfig(
        chunk_tokens=settings.chunk_tokens,
        chunk_overlap_tokens=settings.chunk_overlap_tokens,
        checkpoint_seconds=settings.index_checkpoint_seconds,
        embedding_cache_max_bytes=settings.embedding_cache_max_mb << 20,
        parse_slots=settings.parse_processes,  # one per parser process
    )


def search_config(settings: Settings) -> SearchConfig:
    return SearchConfig(
        mode=settings.retrieval_mode,
        rrf_k=settings.rrf_k,
        dense_weight=settings.dense_weight,
        bm25_weight=settings.bm25_weight,
        max_per_document=settings.max_hits_per_document,
        expand_below_chars=settings.expand_below_chars,
        rerank_candidates=settings.rerank_candidates,
    )
