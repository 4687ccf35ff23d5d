"""Retrieval objects built from Settings, shared by the server and the CLI commands.

The plain configs come from their sections: ``settings.index.spec()``,
``settings.ingest.config()``, ``settings.search.config()``."""

from __future__ import annotations

from app.config.settings import Settings
from retrieval.db import Database
from retrieval.embedder import (
    Embedder,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    bundled_embedder_dir,
    model_id,
)
from retrieval.index import FaissIndex
from retrieval.leases import HANDOVER_FILE, Leases
from retrieval.parsers.isolated import IsolatedParser
from retrieval.pg_vectors import PgVectorIndex, open_pg_vector_index
from retrieval.search import Retriever
from retrieval.store import DocumentStore
from retrieval.vector_sync import SyncReport, open_index


def build_parser(settings: Settings) -> IsolatedParser:
    """The sandboxed parser the server, ``ragdesk ingest`` and ``ragdesk sync`` all parse
    with: the same limits, the deployment's OCR, and OCR on or off per collection."""
    ingest = settings.ingest
    return IsolatedParser(
        timeout_s=ingest.parse_timeout_s,
        memory_bytes=ingest.parse_memory_bytes,
        processes=ingest.parse_processes,
        ocr=ingest.ocr_options(),
        ocr_on_request=ingest.ocr_tuning(),
    )


def data_dir_leases(db: Database, settings: Settings) -> Leases:
    """The document leases of a process that ingests from this data directory (the
    server, ``ragdesk ingest``, ``ragdesk sync``): it holds the directory's lock, so the
    process that ingested from it before is dead, and its leases are taken back at once
    rather than left to run out (retrieval/leases.py)."""
    return Leases(
        db,
        lease_s=settings.ingest.lease_s,
        handover=settings.server.data_dir / HANDOVER_FILE,
    )


def build_embedder(settings: Settings) -> Embedder:
    """The configured embedder (heavy: loads the model)."""
    embed, backend = settings.embedder, settings.embedder.embedder_backend
    if urls := embed.remote_urls():  # docs/scaling.md § Remote embeddings (the backend is not used)
        from retrieval import remote_embedder

        key = embed.embedder_api_key
        return remote_embedder.connect(
            urls,
            remote_model=embed.embedder_remote_model or "",
            local_dir=embed.embedder_model or bundled_embedder_dir(),
            same_as_local=embed.embedder_remote_same_as_local,
            api_key=key.get_secret_value() if key is not None else None,
            texts_per_request=embed.embed_batch_size,
            timeout_s=embed.embedder_remote_timeout_s,
        )
    if backend == "fake":
        return HashingEmbedder(delay_s=embed.fake_embed_delay_s)
    model_dir = embed.embedder_model or bundled_embedder_dir()
    if backend in ("onnx", "onnx-int8"):
        from retrieval.onnx_embedder import OnnxEmbedder, export_onnx

        quantize = backend == "onnx-int8"
        # fp32 ONNX gives the PyTorch vectors (to ~1e-7), so the index stays valid
        variant = "onnx-int8" if quantize else "sentence-transformers"
        out = settings.models_dir / f"{model_dir.name}-{backend}"
        return OnnxEmbedder(
            export_onnx(model_dir, out, quantize=quantize),
            model_id=model_id(model_dir, variant),
            batch_size=settings.embedder.embed_batch_size,
        )
    return SentenceTransformerEmbedder(model_dir, batch_size=settings.embedder.embed_batch_size)


def open_vector_index(
    settings: Settings, store: DocumentStore, embedder: Embedder, *, read_only: bool = False
) -> tuple[FaissIndex | PgVectorIndex, SyncReport]:
    """The FAISS index for ``embedder``'s vectors, rebuilt or caught up from SQLite;
    ``read_only`` writes no checkpoint (the server may own the directory meanwhile). On
    PostgreSQL the embeddings rows are the index (pgvector): no files, nothing to sync."""
    if store.db.dialect == "postgresql":
        index = open_pg_vector_index(store, embedder.model_id, embedder.dimension)
        return index, SyncReport(loaded_from_disk=True, reason=None, added=0, removed=0)
    return open_index(
        settings.index_dir,
        store,
        model_id=embedder.model_id,
        dimension=embedder.dimension,
        spec=settings.index.spec(),
        checkpoint=not read_only,
    )


def read_only_retriever(settings: Settings, store: DocumentStore) -> Retriever:
    """A retriever over the data directory's index opened read-only, for the evaluations:
    a running server owns the index files (its checkpoints may be layered over a
    memory-mapped base that a checkpoint from here would delete)."""
    from app.config.search_stages import reranker

    embedder = build_embedder(settings)
    index, _ = open_vector_index(settings, store, embedder, read_only=True)
    return Retriever(embedder, index, store, settings.search.config(), reranker(settings))
