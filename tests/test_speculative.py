"""Speculative decoding: prompt-lookup drafts, the acceptance rule (exact in distribution,
pinned statistically on a fake model), back-off, and on the real models greedy output
identical with and without speculation, KV cells kept in step, stops and metrics."""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llm.engine.acceptance import PAUSE_TOKENS, Acceptance
from llm.engine.drafting import prompt_lookup
from llm.engine.speculative import SpeculativeConfig, verify
from llm.local import LocalModel, LocalModelConfig
from llm.models import small_model
from llm.params import CompletionRequest, Finished, SamplingParams, TextDelta

MODELS = Path(__file__).parent.parent / "data" / "models"
QWEN_15 = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_05 = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
HANDBOOK = Path(__file__).parent.parent / "bench" / "data" / "handbook" / "corpus"


# --- prompt lookup --------------------------------------------------------------------------
def test_prompt_lookup_copies_what_followed_the_latest_match_of_the_longest_ngram() -> None:
    tokens = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 6, 1, 2, 3]
    # [1, 2, 3] matches at the start (the trigram wins over the later bigram [2, 3])
    assert prompt_lookup(tokens, 3) == [4, 5, 9]
    assert prompt_lookup([5, 2, 3, 7, 8, 2, 3, 6, 6, 2, 3], 2) == [6, 6]  # the latest bigram
    assert prompt_lookup([1, 2, 3, 4], 5) == []  # no earlier occurrence
    assert prompt_lookup([7, 8, 7, 8], 5) == [7, 8]  # stops at the end of the sequence
    assert prompt_lookup([7, 8, 7, 8], 0) == []
    assert prompt_lookup([7], 3) == []


# --- the acceptance rule --------------------------------------------------------------------
VOCAB = 4


def target(previous: int) -> list[float]:
    """A fake model: the next token's distribution given the previous one."""
    table = [
        [0.5, 0.3, 0.15, 0.05],
        [0.1, 0.2, 0.3, 0.4],
        [0.25, 0.25, 0.25, 0.25],
        [0.7, 0.1, 0.1, 0.1],
    ]
    return table[previous]


def speculative_run(rng: random.Random, length: int, draft: list[int]) -> tuple[int, ...]:
    """Generate ``length`` tokens after token 0, verifying ``draft`` every step as the
    engine does: ``sample(i)`` draws from the target given the drafts before ``i``."""
    out = [0]

    def sample(i: int) -> int:
        previous = (out + draft[:i])[-1]  # the drafts before i were all accepted
        return rng.choices(range(VOCAB), weights=target(previous))[0]

    while len(out) <= length:
        tokens, _ = verify(draft, sample)
        out.extend(tokens)
    return tuple(out[1 : length + 1])


@pytest.mark.parametrize("draft", [[0, 0, 0], [1, 3, 0], [2]])
def test_speculative_sampling_keeps_the_target_distribution(draft: list[int]) -> None:
    """Chi-square of 3-token continuations against the target's exact probabilities,
    whatever the (deterministic) drafts: good ones, poor ones, short ones."""
    rng = random.Random(1234)
    trials = 20_000
    seen = Counter(speculative_run(rng, 3, draft) for _ in range(trials))
    chi2 = 0.0
    for a in range(VOCAB):
        for b in range(VOCAB):
            for c in range(VOCAB):
                p = target(0)[a] * target(a)[b] * target(b)[c]
                expected = p * trials
                chi2 += (seen[(a, b, c)] - expected) ** 2 / expected
    # 64 cells, 63 degrees of freedom: the 0.1 % critical value is 103.4
    assert chi2 < 103.4, chi2


def test_a_sampler_that_always_disagrees_still_emits_one_token_per_step() -> None:
    assert verify([5, 6, 7], lambda i: 9) == ([9], 0)
    assert verify([5, 6], lambda i: [5, 6, 1][i]) == ([5, 6, 1], 2)
    assert verify([5, 6], lambda i: [5, 2][i]) == ([5, 2], 1)


def test_a_sequence_whose_drafts_miss_pauses_then_tries_again() -> None:
    spec = Acceptance()
    floor = SpeculativeConfig().min_acceptance
    spec.record(4, 4, generated=10, floor=floor)
    assert spec.drafting(11)
    for step in range(20):
        if not spec.drafting(11 + step):
            break
        spec.record(4, 0, generated=11 + step, floor=floor)
    paused_at = 11 + step
    assert not spec.drafting(paused_at + 1)
    assert spec.drafting(paused_at + PAUSE_TOKENS)
    assert (spec.drafted, spec.accepted) == (4 * (step + 1), 4)


# --- the real model -------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.speculations: list[tuple[str, str, int, int]] = []

    def first_token(self, model: str, seconds: float) -> None:
        pass

    def token_gap(self, model: str, seconds: float) -> None:
        pass

    def finished(self, model: str, usage: Any, reason: Any) -> None:
        pass

    def rejected(self, model: str, reason: str) -> None:
        pass

    def speculated(self, model: str, method: str, drafted: int, accepted: int) -> None:
        self.speculations.append((model, method, drafted, accepted))


def grounded_prompt(chars: int = 2500) -> str:
    source = (HANDBOOK / "employee-handbook.md").read_text()[:chars]
    return (
        f"Source [1]:\n{source}\n\nQuestion: What does the handbook say about the company's "
        "founders and history? Answer by quoting the source.\nAnswer:"
    )


def load(path: Path, observer: Any = None, **overrides: Any) -> LocalModel:
    config = LocalModelConfig(**{"name": "m", "path": path, "parallel": 4, **overrides})
    return LocalModel(config, observer)


def run(model: LocalModel, prompt: str, params: SamplingParams) -> tuple[str, Finished]:
    text, finished = "", None
    for event in model.submit(CompletionRequest(prompt, params)):
        if isinstance(event, TextDelta):
            text += event.text
        else:
            finished = event
    assert finished is not None and finished.error is None, finished
    return text, finished


def kv_in_step(model: LocalModel) -> None:
    """Every slot's KV cells are exactly its tokens: no rejected draft left behind."""
    import llama_cpp as C

    native = model.native
    for slot in model.engine._cache.slots:
        last = int(C.llama_memory_seq_pos_max(native.memory, slot.seq_id))
        assert last == len(slot.tokens) - 1, (slot.seq_id, last, len(slot.tokens))


@pytest.fixture(scope="module")
def gemma() -> Path:
    return small_model(MODELS)


def first_run(path: Path, prompt: str, params: SamplingParams, **overrides: Any) -> Any:
    """The text and end of the first request on a freshly loaded model, and its recorder.

    Batch-invariant mode keeps greedy output independent of the rows in a batch, but not
    of where llama.cpp puts a sequence's KV cells: once earlier requests have left holes
    in the cache, a run can round differently with or without speculation. Comparisons
    are therefore made on fresh contexts."""
    recorder = Recorder()
    model = load(path, recorder, batch_invariant=True, parallel=2, **overrides)
    try:
        text, finished = run(model, prompt, params)
        kv_in_step(model)
        return text, finished, recorder
    finally:
        model.close()


GREEDY = SamplingParams(max_tokens=80, temperature=0)


@pytest.mark.real
def test_greedy_output_is_identical_with_prompt_lookup(gemma: Path) -> None:
    """Batch-invariant mode: every decode has the same rows, so checking drafts in rows
    that would be padding changes no logit, and greedy output is the same to the token."""
    prompt = grounded_prompt()
    expected, done, _ = first_run(gemma, prompt, GREEDY)
    text, finished, recorder = first_run(gemma, prompt, GREEDY, speculative="prompt-lookup")
    assert text == expected
    assert finished.usage == done.usage
    (name, method, drafted, accepted) = recorder.speculations[-1]
    assert (name, method) == ("m", "prompt-lookup") and drafted > 0 and 0 < accepted <= drafted


@pytest.mark.real
def test_stops_and_max_tokens_end_a_speculating_request_where_they_would(gemma: Path) -> None:
    prompt = grounded_prompt()
    full, _, _ = first_run(gemma, prompt, GREEDY)
    words = full.split()
    stop = " ".join(words[len(words) // 2 : len(words) // 2 + 2])  # a phrase mid-answer
    for params in (
        SamplingParams(max_tokens=80, temperature=0, stop=(stop,)),
        SamplingParams(max_tokens=7, temperature=0),
    ):
        text, finished, _ = first_run(gemma, prompt, params, speculative="prompt-lookup")
        expected = full[: full.index(stop)] if params.stop else None
        if expected is not None:
            assert (text, finished.reason) == (expected, "stop")
        else:
            assert finished.reason == "length" and finished.usage.completion_tokens == 7
            assert full.startswith(text)


@pytest.mark.real
def test_seeded_sampling_and_concurrent_requests_run_with_speculation(gemma: Path) -> None:
    """Each emitted token is one draw of the request's sampler, as without speculation, so
    a seeded request gives the same text; two at once (at the back-off limit) both work
    and leave the KV cache in step with the slots."""
    prompt = grounded_prompt(1500)
    seeded = SamplingParams(max_tokens=48, temperature=0.7, seed=42)
    plain = first_run(gemma, prompt, seeded)[0]
    assert first_run(gemma, prompt, seeded, speculative="prompt-lookup")[0] == plain
    model = load(gemma, speculative="prompt-lookup", parallel=2)
    try:
        results: list[str] = ["", ""]

        def client(i: int) -> None:
            results[i] = run(model, prompt + " " * i, GREEDY)[0]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(results)
        kv_in_step(model)
    finally:
        model.close()


@pytest.mark.real
def test_a_draft_model_drafts_and_output_stays_the_same(gemma: Path) -> None:
    """Gemma drafting for itself: the same vocabulary, and drafts it mostly accepts."""
    prompt = grounded_prompt(1500)
    expected = first_run(gemma, prompt, GREEDY)[0]
    text, _, recorder = first_run(
        gemma, prompt, GREEDY, speculative="draft-model", draft_model=gemma
    )
    assert text == expected
    _, method, drafted, accepted = recorder.speculations[-1]
    assert method == "draft-model" and drafted > 0 and accepted > drafted / 2


@pytest.mark.real
def test_a_draft_model_with_another_vocabulary_is_refused(gemma: Path) -> None:
    other = next((p for p in (QWEN_05, QWEN_15) if p.exists()), None)
    if other is None:
        pytest.skip("no Qwen model on disk")
    from llm.engine.drafting import VocabularyMismatch

    with pytest.raises(VocabularyMismatch, match="same vocabulary"):
        load(gemma, speculative="draft-model", draft_model=other)


@pytest.mark.real
@pytest.mark.skipif(not QWEN_15.exists(), reason="the Qwen 1.5B model is not on disk")
def test_greedy_output_is_identical_on_the_default_model() -> None:
    prompt = grounded_prompt(1500)
    params = SamplingParams(max_tokens=48, temperature=0)
    texts = [first_run(QWEN_15, prompt, params, speculative=m)[0] for m in ("off", "prompt-lookup")]
    assert texts[0] == texts[1]


def test_metrics_count_drafted_and_accepted_tokens_per_model_and_method() -> None:
    from app.metrics import Metrics
    from llm.engine.engine import SpeculationObserver

    metrics = Metrics(lambda: [])
    assert isinstance(metrics, SpeculationObserver)
    metrics.speculated("qwen", "prompt-lookup", 40, 31)
    metrics.speculated("qwen", "prompt-lookup", 8, 1)
    text = metrics.render().decode()
    labels = '{method="prompt-lookup",model="qwen"}'
    assert f"ragdesk_speculative_drafted_tokens_total{labels} 48.0" in text
    assert f"ragdesk_speculative_accepted_tokens_total{labels} 32.0" in text


def test_settings_reach_the_local_model_config(tmp_path: Path) -> None:
    from app.config.settings import Settings

    gguf, draft = tmp_path / "big.gguf", tmp_path / "small.gguf"
    settings = Settings(
        data_dir=tmp_path,
        speculative="draft-model",
        speculative_tokens=6,
        speculative_max_running=1,
        draft_models={"big": str(draft)},
    )
    config = settings.generation.local_config("big", gguf, settings.kv_dir)
    assert (config.speculative, config.speculative_tokens, config.speculative_max_running) == (
        "draft-model",
        6,
        1,
    )
    assert config.draft_model == draft
    other = settings.generation.local_config("other", tmp_path / "o.gguf", settings.kv_dir)
    assert other.draft_model is None
