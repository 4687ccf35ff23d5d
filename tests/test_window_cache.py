"""Prefix reuse on sliding-window models whose window layers keep only the window
(``swa_full`` off, as llama-server runs them): a prefix is reused only while the window
before its end is still there; otherwise the slot resumes from its checkpoint, or from
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from llm.engine.prefix_cache import PrefixCache
from llm.engine.slots import Checkpoint
from llm.local import LocalModel, LocalModelConfig
from llm.models import small_model
from llm.params import CompletionRequest, Finished, SamplingParams
from tests.completions import collect


@dataclass
class FakeNative:
    """The sequence-memory calls ``PrefixCache`` makes, with a window that has moved on."""

    n_swa: int = 8
    pos_min: dict[int, int] = field(default_factory=dict)
    loads: bool = True
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def seq_remove(self, seq: int, start: int = 0, end: int = -1) -> None:
        self.calls.append(("remove", seq, start))
        if start == 0:
            self.pos_min[seq] = -1

    def seq_copy(self, source: int, target: int, end: int) -> None:
        self.calls.append(("copy", source, target, end))
        first = self.pos_min.get(source, 0)
        self.pos_min[target] = first if first < end else -1

    def seq_pos_min(self, seq: int) -> int:
        return self.pos_min.get(seq, 0)

    def set_window_state(self, seq: int, state: bytes) -> bool:
        self.calls.append(("window", seq, state))
        return self.loads


def cache_holding(
    native: FakeNative, tokens: list[int], checkpoint: int | None, sequences: int = 1
) -> PrefixCache[str]:
    """Slot 0 holds ``tokens``; with one sequence, a prompt is cut in place."""
    cache: PrefixCache[str] = PrefixCache(cast(Any, native), sequences)
    slot = cache.slots[0]
    slot.tokens, slot.prefilled = list(tokens), len(tokens)
    slot.checkpoint = None if checkpoint is None else Checkpoint(checkpoint, b"window")
    return cache


PROMPT = list(range(40))


def test_a_prefix_whose_window_is_still_there_is_reused() -> None:
    native = FakeNative(pos_min={0: 30 - 8 + 1})  # exactly the window of position 30
    cache = cache_holding(native, PROMPT[:30], checkpoint=26)
    slot, reuse = cache.seat("next", PROMPT, None)
    assert (slot.seq_id, reuse) == (0, 30)
    assert (cache.window_resumes, cache.window_prefills) == (0, 0)


def test_a_cut_the_window_moved_past_resumes_from_the_checkpoint() -> None:
    native = FakeNative(pos_min={0: 24})
    cache = cache_holding(native, PROMPT[:30], checkpoint=26)
    cut = [*PROMPT[:28], 99, 98]  # the window of position 28 starts at 21: gone
    slot, reuse = cache.seat("next", cut, None)
    assert reuse == 26
    assert ("window", 0, b"window") in native.calls
    assert native.calls[-1] == ("remove", 0, 26)  # and its cells past the checkpoint go
    assert slot.tokens == PROMPT[:26] and slot.checkpoint == Checkpoint(26, b"window")
    assert cache.window_resumes == 1


def test_without_a_checkpoint_within_the_prefix_it_starts_from_nothing() -> None:
    native = FakeNative(pos_min={0: 24})
    cache = cache_holding(native, PROMPT[:30], checkpoint=29)
    _, reuse = cache.seat("next", [*PROMPT[:28], 99], None)
    assert reuse == 0
    assert not any(call[0] == "window" for call in native.calls)
    assert cache.slots[0].tokens == [] and cache.slots[0].checkpoint is None
    assert cache.window_prefills == 1


def test_a_checkpoint_that_does_not_load_means_starting_from_nothing() -> None:
    native = FakeNative(pos_min={0: 24}, loads=False)
    cache = cache_holding(native, PROMPT[:30], checkpoint=26)
    _, reuse = cache.seat("next", [*PROMPT[:28], 99], None)
    assert reuse == 0
    assert ("remove", 0, 0) in native.calls


def test_a_copy_takes_the_sources_checkpoint_and_checks_its_own_window() -> None:
    native = FakeNative(pos_min={0: 24})
    cache = cache_holding(native, PROMPT[:30], checkpoint=26, sequences=2)
    cache.slots[0].busy = "streaming"
    slot, reuse = cache.seat("next", [*PROMPT[:28], 99], None)
    assert slot.seq_id == 1
    assert native.calls[:2] == [("remove", 1, 0), ("copy", 0, 1, 28)]
    assert reuse == 26 and ("window", 1, b"window") in native.calls


def test_models_without_a_window_reuse_as_before() -> None:
    native = FakeNative(n_swa=0, pos_min={0: 24})
    cache = cache_holding(native, PROMPT[:30], checkpoint=None)
    _, reuse = cache.seat("next", [*PROMPT[:28], 99], None)
    assert reuse == 28


# --- the bundled sliding-window model (Gemma 3, a window of 512) ------------------------------


def notes(name: str) -> str:
    colours = ["red", "blue", "green"]
    return "Notes: " + " ".join(f"{name}{i} is colour {colours[i % 3]}." for i in range(160))


def ask(model: LocalModel, prompt: str, max_tokens: int = 8) -> tuple[str, Finished]:
    text, finished = collect(model.submit(CompletionRequest(prompt, SamplingParams(max_tokens, 0))))
    assert finished.error is None
    return text, finished


@pytest.fixture
def gemma() -> Iterator[LocalModel]:
    path = small_model(Path(__file__).parent.parent / "data" / "models")
    # two sequences: the window layers' cache holds 1,536 cells, less than two prompts
    config = LocalModelConfig(
        name="gemma", path=path, context_tokens=4096, parallel=2, swa_full=False
    )
    model = LocalModel(config)
    yield model
    model.close()


@pytest.mark.real
def test_a_cut_prompt_resumes_from_its_checkpoint_once_the_window_moved_on(
    gemma: LocalModel,
) -> None:
    native, cache = gemma.native, gemma.engine._cache
    assert native.windowed and native.n_swa == 512
    question = notes("item") + "\nQuestion: what colour is item7?\n"
    _, first = ask(gemma, question + "Answer:", max_tokens=1)
    checkpoint = cache.slots[0].checkpoint
    assert checkpoint is not None and checkpoint.length == first.usage.prompt_tokens - 4
    ask(gemma, notes("other"), max_tokens=1)  # its cells overwrite what slot 0's window left
    shared = gemma.count_tokens(question) - 1
    assert native.seq_pos_min(0) > shared - native.n_swa + 1  # the prefix alone would be wrong

    text, again = ask(gemma, question + "Reply:")
    assert again.usage.cached_tokens == checkpoint.length
    assert gemma.stats().kv_window_resumes == 1 and text.strip()  # /metrics reads stats()

    _, elsewhere = ask(gemma, notes("item")[:1500] + " What colour is item3?")
    assert elsewhere.usage.cached_tokens == 0  # cut before any checkpoint: prefilled anew
    assert gemma.stats().kv_window_prefills >= 1


@pytest.mark.real
def test_a_prompt_that_extends_the_last_one_keeps_its_whole_prefix(gemma: LocalModel) -> None:
    question = notes("item") + "\nQuestion: what colour is item7?\nAnswer:"
    text, first = ask(gemma, question)
    _, follow_up = ask(gemma, question + text + "\nQuestion: and item8?\nAnswer:")
    assert follow_up.usage.cached_tokens >= first.usage.prompt_tokens + 4
    assert gemma.stats().kv_window_resumes == 0
