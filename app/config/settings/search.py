"""The ``search`` section: what a question retrieves."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from app.config.settings.section import Section, flat_alias
from retrieval.search import SearchConfig


class SearchSettings(Section):
    """What a question retrieves: fusion, limits, the reranker (retrieval.search.SearchConfig)."""

    top_k: int = Field(4, ge=1, le=50, description="Sources retrieved for each question.")
    min_score: float = Field(
        0.25,
        ge=-1.0,
        le=1.0,
        description="Cosine similarity below which a hit is not relevant enough to cite.",
    )
    mode: Literal["hybrid", "dense", "bm25"] = Field(
        "hybrid",
        validation_alias=flat_alias("retrieval_mode", "mode"),
        description="hybrid fuses vector (dense) and full-text (BM25) search; or one alone.",
    )
    rrf_k: float = Field(
        60.0, gt=0, le=1000, description="Reciprocal rank fusion constant k (hybrid mode)."
    )
    dense_weight: float = Field(
        1.0, ge=0, le=10, description="Weight of the vector ranking in hybrid fusion."
    )
    bm25_weight: float = Field(
        1.0, ge=0, le=10, description="Weight of the BM25 ranking in hybrid fusion."
    )
    max_per_document: int = Field(
        0,
        ge=0,
        le=50,
        validation_alias=flat_alias("max_hits_per_document", "max_per_document"),
        description="Most sources from one document per question (0 = no limit; variety "
        "comes from mmr_lambda).",
    )
    mmr_lambda: float = Field(
        0.85,
        ge=0.0,
        le=1.0,
        description="Maximal marginal relevance: 1 keeps the ranking, lower values trade "
        "relevance for passages that do not repeat those already chosen.",
    )
    expand_below_chars: int = Field(
        0,
        ge=0,
        le=10_000,
        description="A source shorter than this is widened over the "
        "chunks beside it on its page (0 = off).",
    )
    reranker: Literal["none", "cross-encoder", "llm"] = Field(
        "none",
        description="Second stage reordering the fused candidates before the top k: a local "
        "cross-encoder, or 'llm' (a GGUF model's yes/no judgement of each passage).",
    )
    reranker_model: Path | None = Field(
        None,
        description="cross-encoder: its local sentence-transformers directory (never fetched); "
        "llm: a GGUF file, unset = the bundled Gemma 3 270M.",
    )
    rerank_candidates: int = Field(
        20, ge=1, le=200, description="Fused candidates the reranker reorders."
    )
    passage_chars: int = Field(
        0,
        ge=0,
        le=20_000,
        description="Longest source text the chat model reads; a longer one is cut to its "
        "sentences nearest the question (0 = whole passages).",
    )
    v1_citations_days: float = Field(
        7.0,
        ge=0,
        le=3650,
        description="How long what a grounded /v1 answer cited is kept (per user, under a "
        "digest of the question and the answer's text; at most 1000 answers a user), so a "
        "follow-up that sends the answer back and refers to it reads the documents it "
        "cited first, as in chat (0 = not kept).",
    )

    def config(self) -> SearchConfig:
        return SearchConfig(**self._shared_with(SearchConfig))
