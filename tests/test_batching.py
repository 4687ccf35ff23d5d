"""BatchingEmbedder: concurrent callers share forward passes, questions go before bulk."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from retrieval.batching import BatchingEmbedder
from retrieval.embedder import HashingEmbedder, Vectors


class SlowEmbedder(HashingEmbedder):
    """The hashing embedder, taking ``delay`` seconds per call (a forward pass)."""

    def __init__(self, delay: float = 0.0):
        super().__init__(dimension=32)
        self.delay = delay
        self.fail = False
        self.calls = 0

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("boom")
        return super().embed_batch(texts)


def call_concurrently(embedder: BatchingEmbedder, requests: list[list[str]]) -> list[Vectors]:
    results: list[Vectors | None] = [None] * len(requests)

    def one(n: int) -> None:
        results[n] = embedder.embed_batch(requests[n])

    threads = [threading.Thread(target=one, args=(n,)) for n in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def test_concurrent_callers_share_batches_and_get_their_own_vectors() -> None:
    inner = SlowEmbedder()
    batching = BatchingEmbedder(inner, max_batch=16, max_wait_ms=200, query_max_texts=1)
    questions = [[f"question number {n} about topic {n * 7}"] for n in range(8)]
    results = call_concurrently(batching, questions)
    assert len(inner.history) < len(questions)  # grouped: fewer forward passes than callers
    assert sum(len(texts) for texts in inner.history) == len(questions)
    reference = HashingEmbedder(dimension=32)
    for texts, vectors in zip(questions, results, strict=True):
        np.testing.assert_allclose(vectors, reference.embed_batch(texts))
    batching.close()


def test_bulk_is_sliced_and_a_question_goes_before_the_rest_of_it() -> None:
    inner = SlowEmbedder(delay=0.05)
    batching = BatchingEmbedder(inner, max_batch=4, max_wait_ms=0)
    bulk = [f"chunk {n} of the long manual" for n in range(20)]
    out: list[Vectors] = []
    ingest = threading.Thread(target=lambda: out.append(batching.embed_batch(bulk)))
    ingest.start()
    time.sleep(0.07)  # ingestion is in its second slice
    question = batching.embed_batch(["where is the exit?"])
    ingest.join(10)
    assert all(len(texts) <= 4 for texts in inner.history)
    position = inner.history.index(["where is the exit?"])
    assert position < len(inner.history) - 1  # served before the bulk request finished
    reference = HashingEmbedder(dimension=32)
    np.testing.assert_allclose(out[0], reference.embed_batch(bulk))
    np.testing.assert_allclose(question, reference.embed_batch(["where is the exit?"]))
    batching.close()


def test_bulk_slices_can_be_smaller_than_question_batches() -> None:
    inner = SlowEmbedder()
    batching = BatchingEmbedder(inner, max_batch=8, bulk_batch=3, max_wait_ms=0)
    bulk = [f"text {n}" + " long" * n for n in range(7)]
    vectors = batching.embed_batch(bulk)
    assert [len(texts) for texts in inner.history] == [3, 3, 1]
    assert inner.history[0][0] == bulk[-1]  # longest first
    np.testing.assert_allclose(vectors, HashingEmbedder(dimension=32).embed_batch(bulk))
    batching.close()


def test_threads_are_set_per_kind_of_batch() -> None:
    calls: list[int] = []
    batching = BatchingEmbedder(
        SlowEmbedder(), max_wait_ms=0, set_threads=calls.append, query_threads=4, bulk_threads=1
    )
    batching.embed_batch(["one question"])
    batching.embed_batch(["a", "bulk", "request"])
    batching.embed_batch(["another", "bulk"])
    assert calls == [4, 1]  # set only when the kind changes
    batching.close()


def test_an_embedder_error_reaches_every_caller_of_the_batch() -> None:
    inner = SlowEmbedder()
    inner.fail = True
    batching = BatchingEmbedder(inner, max_batch=2, max_wait_ms=0)
    with pytest.raises(RuntimeError, match="boom"):
        batching.embed_batch(["a", "b", "c", "d", "e"])
    assert inner.calls == 1  # the rest of the failed request is dropped, not embedded
    inner.fail = False
    assert batching.embed_batch(["fine"]).shape == (1, 32)
    assert batching.embed_batch([]).shape == (0, 32)
    batching.close()
    with pytest.raises(RuntimeError):
        batching.embed_batch(["closed"])


def test_the_app_wraps_real_embedders_and_builds_the_reranker_from_settings(
    tmp_path: Path,
) -> None:
    from app.config.search_stages import batched, reranker
    from app.config.settings import Settings

    settings = Settings(
        data_dir=tmp_path, embed_batch_size=8, embed_ingest_batch=3, embed_max_wait_ms=5
    )
    fake = HashingEmbedder()
    assert batched(settings, fake) is fake
    wrapped = batched(settings, BatchingEmbedder(fake))  # any embedder but the fake
    assert isinstance(wrapped, BatchingEmbedder) and wrapped.max_batch == 8
    assert wrapped.bulk_batch == 3
    assert wrapped.max_wait_s == pytest.approx(0.005)
    assert reranker(settings) is None
    with pytest.raises(ValueError, match="RERANKER_MODEL"):
        reranker(Settings(data_dir=tmp_path, reranker="cross-encoder"))
    with pytest.raises(FileNotFoundError):
        reranker(
            Settings(data_dir=tmp_path, reranker="cross-encoder", reranker_model=tmp_path / "x")
        )


def test_the_llm_reranker_takes_the_bundled_model_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.config.search_stages import reranker
    from app.config.settings import Settings
    from retrieval.llm_rerank import LlmReranker

    bundled = tmp_path / "models" / "bundled.gguf"
    asked: list[Path] = []

    def fake_bundled(models_dir: Path) -> Path:
        asked.append(models_dir)
        return bundled

    monkeypatch.setattr("llm.models.small_model", fake_bundled)
    bundled.parent.mkdir()
    bundled.write_bytes(b"GGUF")  # never read: the model loads on the first rerank
    monkeypatch.setenv("RAGDESK_RERANKER", "llm")
    default = reranker(Settings(data_dir=tmp_path))
    assert isinstance(default, LlmReranker) and default.model_path == bundled
    assert asked == [tmp_path / "models"]
    other = tmp_path / "judge.gguf"
    other.write_bytes(b"GGUF")
    chosen = reranker(Settings(data_dir=tmp_path, reranker_model=other, n_threads=3))
    assert isinstance(chosen, LlmReranker) and chosen.model_path == other
    assert chosen.n_threads == 3 and asked == [tmp_path / "models"]
    with pytest.raises(FileNotFoundError):
        reranker(Settings(data_dir=tmp_path, reranker_model=tmp_path / "absent.gguf"))
    monkeypatch.delenv("RAGDESK_RERANKER")
    assert Settings(data_dir=tmp_path).search.reranker == "none"  # off by default


def test_bulk_waits_while_the_server_is_busy_but_never_stalls() -> None:
    inner = SlowEmbedder()
    busy = threading.Event()
    busy.set()  # an answer is being generated
    embedder = BatchingEmbedder(inner, bulk_batch=2, busy=busy.is_set, bulk_yield_s=0.5)
    started = time.monotonic()
    thread = threading.Thread(target=embedder.embed_batch, args=(["a", "b", "c", "d"],))
    thread.start()
    time.sleep(0.4)
    assert inner.calls == 0  # held back
    question = time.monotonic()
    embedder.embed_batch(["q"])  # a question is never held back
    assert time.monotonic() - question < 0.1 and inner.calls == 1
    # Busy throughout: a slice every bulk_yield_s (at 0.5 and 1.0 s), the question at 0.4 s
    # notwithstanding (counting from it would make that 0.9 and 1.4 s).
    thread.join(timeout=5)
    assert 0.95 <= time.monotonic() - started < 1.3 and inner.calls == 3
    busy.clear()
    started = time.monotonic()
    embedder.embed_batch(["e", "f", "g"])  # not busy: no wait
    assert time.monotonic() - started < 0.1
    embedder.close()


def test_bulk_goes_on_as_soon_as_the_server_is_idle() -> None:
    inner = SlowEmbedder()
    busy = threading.Event()
    busy.set()
    embedder = BatchingEmbedder(inner, bulk_batch=8, busy=busy.is_set, bulk_yield_s=5.0)
    threading.Timer(0.2, busy.clear).start()
    started = time.monotonic()
    embedder.embed_batch(["a", "b", "c"])
    # Not the 5 s a bulk slice yields for at most: it went on once the server was idle
    # (bounded loosely, for a loaded CI machine).
    assert 0.2 <= time.monotonic() - started < 2.5
    assert embedder.bulk_paused_s >= 0.2
    embedder.close()


def test_the_server_defers_ingestion_while_a_model_generates(tmp_path: Path) -> None:
    from llm.params import CompletionRequest, SamplingParams
    from tests.conftest import fake_settings, signed_in

    with signed_in(fake_settings(tmp_path, fake_token_delay_s=0.05)) as client:
        services = client.app.state.services
        assert not services.generating()
        model = services.require_models().get("default")
        completion = model.submit(CompletionRequest("hi", SamplingParams(max_tokens=6)))
        assert services.generating()  # what the batcher's bulk slices wait for
        assert list(completion)  # generated to the end
        assert not services.generating()


def test_a_failing_busy_check_counts_as_idle_and_the_batcher_lives_on() -> None:
    inner = SlowEmbedder()
    calls: list[int] = []

    def flaky() -> bool:
        calls.append(1)
        raise RuntimeError("stats unavailable")

    embedder = BatchingEmbedder(inner, bulk_batch=2, busy=flaky, bulk_yield_s=5.0)
    started = time.monotonic()
    assert len(embedder.embed_batch(["a", "b", "c"])) == 3  # not held back, not hung
    assert embedder.embed_batch(["q"]).shape == (1, 32) and calls
    assert time.monotonic() - started < 2.5  # not the 5 s yield
    embedder.close()


def test_slices_slower_than_the_yield_still_wait_after_each_one() -> None:
    inner = SlowEmbedder(delay=0.3)
    embedder = BatchingEmbedder(inner, bulk_batch=1, busy=lambda: True, bulk_yield_s=0.2)
    embedder.embed_batch(["a", "b", "c"])
    # Each slice waits 0.2 s counted from the end of the one before (or from the request).
    assert embedder.bulk_paused_s >= 0.55 and inner.calls == 3
    embedder.close()


def test_the_registry_lists_loaded_models_while_another_loads() -> None:
    from llm.backend import FakeBackend
    from llm.registry import Registry

    loading = threading.Event()

    def slow() -> FakeBackend:
        loading.set()
        time.sleep(1.0)
        return FakeBackend(name="slow")

    registry = Registry({"fast": lambda: FakeBackend(name="fast"), "slow": slow})
    registry.get("fast")
    threading.Thread(target=registry.get, args=("slow",), daemon=True).start()
    loading.wait(5)
    started = time.monotonic()
    assert [b.name for b in registry.loaded()] == ["fast"]  # what ingestion's busy check reads
    assert time.monotonic() - started < 0.1
