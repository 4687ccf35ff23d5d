"""The pointwise LLM reranker on the bundled Gemma 3 270M (retrieval/llm_rerank.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from llm.models import small_model
from retrieval.llm_rerank import LlmReranker
from retrieval.search import Retriever, SearchConfig
from tests.retrieval_kit import make_kit

MODELS = Path(__file__).parent.parent / "data" / "models"
QUESTION = "Who wrote Romeo and Juliet?"
PASSAGES = {
    "play.md": "Romeo and Juliet is a tragedy written by William Shakespeare "
    "about two young lovers.",
    "letter.md": "Who wrote the letter? The police are still looking for who wrote it.",
    "pets.md": "Romeo, our dog, and Juliet, our cat, sleep in the kitchen.",
    "balcony.md": "Juliet balconies are narrow railings in front of a tall window.",
}


@pytest.fixture(scope="module")
def reranker() -> LlmReranker:
    return LlmReranker(small_model(MODELS), n_threads=2)


@pytest.mark.real
def test_the_relevant_passage_goes_first_through_the_retriever(
    tmp_path: Path, reranker: LlmReranker
) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    for name, text in PASSAGES.items():
        document, _ = kit.library.submit(
            data=text.encode(), filename=name, collection_id=kit.collection_id
        )
        worker.ingest(document.id)
    config = SearchConfig(mode="bm25", max_per_document=0, rerank_candidates=4)
    fused = Retriever(kit.embedder, index, kit.store, config).search(QUESTION, 4).hits
    assert "Shakespeare" not in fused[0].text  # BM25 puts the police letter first
    hits = Retriever(kit.embedder, index, kit.store, config, reranker).search(QUESTION, 4).hits
    assert "Shakespeare" in hits[0].text
    assert {h.chunk_id for h in hits} == {h.chunk_id for h in fused}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].score - hits[1].score > 0.3  # a clear margin (0.70 when written)


@pytest.mark.real
def test_the_cached_question_prefix_scores_like_a_fresh_prompt(reranker: LlmReranker) -> None:
    passages = list(PASSAGES.values())
    forward = reranker.scores(QUESTION, passages)
    backward = reranker.scores(QUESTION, passages[::-1])[::-1]
    fresh = LlmReranker(reranker.model_path, n_threads=2)
    alone = [fresh.scores(QUESTION, [p])[0] for p in passages[::-1]][::-1]
    assert forward == pytest.approx(backward, abs=1e-6)
    assert forward == pytest.approx(alone, abs=1e-6)


@pytest.mark.real
def test_passages_are_cut_to_the_token_budget(reranker: LlmReranker) -> None:
    long = "Romeo and Juliet is a play by Shakespeare. " * 400  # far past the context
    same_start = [long + "Bananas are yellow.", long + "Capital gains are taxed."]
    first, second = reranker.scores(QUESTION, same_start)
    assert first == pytest.approx(second, abs=1e-6)  # the tails were never read
    assert reranker.scores(QUESTION, []) == []


@pytest.mark.real
def test_concurrent_callers_get_the_scores_of_serial_ones(reranker: LlmReranker) -> None:
    questions = [QUESTION, "Where does the cat sleep?"]
    passages = list(PASSAGES.values())
    serial = [reranker.scores(q, passages) for q in questions]
    results: dict[int, list[float]] = {}

    def score(i: int) -> None:
        results[i] = reranker.scores(questions[i], passages)

    threads = [threading.Thread(target=score, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, expected in enumerate(serial):
        assert results[i] == pytest.approx(expected, abs=1e-6)


def test_a_missing_model_file_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LlmReranker(tmp_path / "absent.gguf")
