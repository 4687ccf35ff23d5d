"""Registry: models loaded on first use, unloaded least recently used, reached by alias."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from llm.backend import Backend, FakeBackend
from llm.params import ModelUnavailable, Overloaded, UnknownModel
from llm.registry import Alias, Registry


@dataclass
class TrackedBackend(FakeBackend):
    """A FakeBackend that records ``close`` and can be held busy."""

    closed: bool = False
    busy: bool = False

    @property
    def idle(self) -> bool:
        return not self.busy

    def close(self) -> None:
        self.closed = True


class Loaders:
    """Loader functions that count their calls and remember what they made."""

    def __init__(self, memory: dict[str, int] | None = None) -> None:
        self.memory = memory or {}
        self.calls: Counter[str] = Counter()
        self.made: dict[str, list[TrackedBackend]] = {}

    def loader(self, name: str) -> Callable[[], Backend]:
        def load() -> Backend:
            self.calls[name] += 1
            backend = TrackedBackend(name=name, memory_bytes=self.memory.get(name, 0))
            self.made.setdefault(name, []).append(backend)
            return backend

        return load

    def all(self, *names: str) -> dict[str, Callable[[], Backend]]:
        return {name: self.loader(name) for name in names}


@pytest.fixture(autouse=True)
def ticking_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A strictly increasing clock, so "least recently used" never ties."""
    ticks = itertools.count(1)
    monkeypatch.setattr("llm.registry.time.monotonic", lambda: float(next(ticks)))


# --- loading --------------------------------------------------------------------------------


def test_model_is_loaded_on_first_use_only() -> None:
    loaders = Loaders()
    registry = Registry(loaders.all("a", "b"))
    assert loaders.calls == {}
    assert registry.loaded() == []

    first = registry.get("a")
    second = registry.get("a")

    assert first is second
    assert first.name == "a"
    assert loaders.calls == {"a": 1}
    assert registry.loaded() == [first]


def test_names_lists_every_model_loaded_or_not() -> None:
    registry = Registry(Loaders().all("zeta", "alpha"))
    assert registry.names == ["alpha", "zeta"]


def test_unknown_name_raises_unknown_model() -> None:
    loaders = Loaders()
    registry = Registry(loaders.all("a"), {"chat": Alias({"a": 1})})
    with pytest.raises(UnknownModel):
        registry.get("nope")
    with pytest.raises(UnknownModel):
        registry.resolve("nope")
    assert loaders.calls == {}


def test_unknown_model_maps_to_a_client_error() -> None:
    assert UnknownModel("x").status < 500


def test_a_model_that_fails_to_load_is_unavailable_then_tried_again_later() -> None:
    attempts: list[int] = []

    def broken() -> Backend:
        attempts.append(1)
        raise RuntimeError("llama.cpp could not load /secret/path/model.gguf")

    # The clock here moves one second at each reading (the autouse fixture): the failure
    # is stamped at 1, the next two requests read 2 and 3 (refused), the fourth 4 (retried).
    registry = Registry({"broken": broken}, retry_load_after_s=2.5)
    for _ in range(3):
        with pytest.raises(ModelUnavailable) as unavailable:
            registry.get("broken")
        assert unavailable.value.status == 503 and "/secret" not in unavailable.value.detail
    assert len(attempts) == 1  # refused at once meanwhile, not loaded again each time
    with pytest.raises(ModelUnavailable):
        registry.get("broken")
    assert len(attempts) == 2 and registry.loaded() == []


def test_close_closes_every_loaded_model() -> None:
    loaders = Loaders()
    registry = Registry(loaders.all("a", "b", "c"))
    registry.get("a")
    registry.get("b")
    registry.close()
    assert [b.closed for b in loaders.made["a"] + loaders.made["b"]] == [True, True]
    assert registry.loaded() == []
    assert "c" not in loaders.made


# --- aliases --------------------------------------------------------------------------------


def test_alias_resolves_to_its_model() -> None:
    loaders = Loaders()
    registry = Registry(loaders.all("gemma-q4"), {"chat": Alias({"gemma-q4": 1})})
    assert registry.resolve("chat") == "gemma-q4"
    assert registry.get("chat").name == "gemma-q4"
    assert registry.get("gemma-q4") is registry.get("chat")
    assert loaders.calls == {"gemma-q4": 1}


def test_model_name_wins_over_an_alias_of_the_same_name() -> None:
    registry = Registry(Loaders().all("a", "b"), {"a": Alias({"b": 1})})
    assert registry.resolve("a") == "a"


def test_alias_naming_an_unknown_model_is_rejected() -> None:
    with pytest.raises(ValueError, match="missing"):
        Registry(Loaders().all("a"), {"chat": Alias({"a": 90, "missing": 10})})


def test_alias_weights_split_keyed_traffic() -> None:
    alias = Alias({"stable": 90, "canary": 10})
    counts = Counter(alias.pick(f"conversation-{i}") for i in range(10_000))
    assert set(counts) == {"stable", "canary"}
    assert 0.08 < counts["canary"] / 10_000 < 0.12


def test_alias_weights_split_unkeyed_traffic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llm.registry.random.random", random.Random(1234).random)
    alias = Alias({"a": 1, "b": 3})
    counts = Counter(alias.pick(None) for _ in range(10_000))
    assert 0.22 < counts["a"] / 10_000 < 0.28
    assert 0.72 < counts["b"] / 10_000 < 0.78


def test_alias_split_through_the_registry() -> None:
    loaders = Loaders()
    registry = Registry(loaders.all("q4", "q8"), {"chat": Alias({"q4": 3, "q8": 1})})
    counts = Counter(registry.get("chat", f"k{i}").name for i in range(4_000))
    assert 0.70 < counts["q4"] / 4_000 < 0.80
    assert loaders.calls == {"q4": 1, "q8": 1}


def test_alias_is_sticky_for_the_same_key() -> None:
    alias = Alias({"a": 1, "b": 1, "c": 1})
    for i in range(200):
        key = f"conversation-{i}"
        assert len({alias.pick(key) for _ in range(5)}) == 1


def test_alias_stickiness_does_not_depend_on_weight_order() -> None:
    one = Alias({"a": 1, "b": 2})
    other = Alias({"b": 2, "a": 1})
    assert all(one.pick(f"k{i}") == other.pick(f"k{i}") for i in range(200))


def test_alias_with_a_zero_weight_never_picks_that_model() -> None:
    alias = Alias({"off": 0, "on": 5})
    assert {alias.pick(f"k{i}") for i in range(1_000)} == {"on"}


def test_alias_with_a_single_model_always_picks_it() -> None:
    alias = Alias({"only": 1})
    assert {alias.pick(None) for _ in range(50)} | {alias.pick("k")} == {"only"}


# --- memory budget --------------------------------------------------------------------------


def test_without_a_budget_nothing_is_unloaded() -> None:
    loaders = Loaders({"a": 10**12, "b": 10**12})
    registry = Registry(loaders.all("a", "b"))
    registry.get("a")
    registry.get("b")
    assert len(registry.loaded()) == 2
    assert not any(b.closed for made in loaders.made.values() for b in made)


def test_models_within_budget_stay_loaded() -> None:
    loaders = Loaders({"a": 40, "b": 60})
    registry = Registry(loaders.all("a", "b"), memory_budget_bytes=100)
    registry.get("a")
    registry.get("b")
    assert sorted(b.name for b in registry.loaded()) == ["a", "b"]


def test_least_recently_used_idle_model_is_unloaded_to_make_room() -> None:
    loaders = Loaders({"a": 40, "b": 40, "c": 40})
    registry = Registry(loaders.all("a", "b", "c"), memory_budget_bytes=100)
    registry.get("a")
    registry.get("b")
    registry.get("a")  # b is now the least recently used
    registry.get("c")
    assert sorted(b.name for b in registry.loaded()) == ["a", "c"]
    assert loaders.made["b"][0].closed
    assert not loaders.made["a"][0].closed


def test_unloaded_model_is_loaded_again_on_next_use() -> None:
    loaders = Loaders({"a": 60, "b": 60})
    registry = Registry(loaders.all("a", "b"), memory_budget_bytes=100)
    registry.get("a")
    registry.get("b")  # unloads a
    again = registry.get("a")  # unloads b
    assert loaders.calls == {"a": 2, "b": 1}
    assert again is loaders.made["a"][1]
    assert loaders.made["a"][0].closed
    assert loaders.made["b"][0].closed
    assert registry.loaded() == [again]


def test_as_many_models_as_needed_are_unloaded() -> None:
    loaders = Loaders({"a": 30, "b": 30, "c": 30, "big": 80})
    registry = Registry(loaders.all("a", "b", "c", "big"), memory_budget_bytes=100)
    for name in ("a", "b", "c"):
        registry.get(name)
    registry.get("big")  # 90 + 80 > 100: all three must go
    assert [b.name for b in registry.loaded()] == ["big"]
    assert all(loaders.made[name][0].closed for name in ("a", "b", "c"))


def test_unloading_stops_once_there_is_room() -> None:
    loaders = Loaders({"a": 30, "b": 30, "c": 30, "d": 20})
    registry = Registry(loaders.all("a", "b", "c", "d"), memory_budget_bytes=100)
    for name in ("a", "b", "c"):
        registry.get(name)
    registry.get("d")  # 90 + 20 > 100: dropping a alone is enough
    assert sorted(b.name for b in registry.loaded()) == ["b", "c", "d"]
    assert loaders.made["a"][0].closed
    assert not loaders.made["b"][0].closed


def test_busy_model_is_not_unloaded() -> None:
    loaders = Loaders({"a": 50, "b": 50, "c": 50})
    registry = Registry(loaders.all("a", "b", "c"), memory_budget_bytes=100)
    registry.get("a")
    registry.get("b")
    loaders.made["a"][0].busy = True  # a is least recently used, but serving
    registry.get("c")
    assert sorted(b.name for b in registry.loaded()) == ["a", "c"]
    assert not loaders.made["a"][0].closed
    assert loaders.made["b"][0].closed


def test_no_room_while_models_are_busy_raises_overloaded_and_closes_the_new_model() -> None:
    loaders = Loaders({"a": 50, "b": 50, "c": 50})
    registry = Registry(loaders.all("a", "b", "c"), memory_budget_bytes=100)
    registry.get("a")
    registry.get("b")
    for backend in loaders.made["a"] + loaders.made["b"]:
        backend.busy = True

    with pytest.raises(Overloaded) as raised:
        registry.get("c")

    assert raised.value.status == 503
    assert raised.value.retry_after_s >= 1
    assert loaders.made["c"][0].closed
    assert sorted(b.name for b in registry.loaded()) == ["a", "b"]
    assert not any(b.closed for b in loaders.made["a"] + loaders.made["b"])


def test_overloaded_load_can_succeed_once_a_model_is_idle_again() -> None:
    loaders = Loaders({"a": 60, "b": 60})
    registry = Registry(loaders.all("a", "b"), memory_budget_bytes=100)
    registry.get("a")
    loaders.made["a"][0].busy = True
    with pytest.raises(Overloaded):
        registry.get("b")
    loaders.made["a"][0].busy = False
    assert registry.get("b") is loaders.made["b"][1]
    assert [b.name for b in registry.loaded()] == ["b"]


def test_a_model_larger_than_the_budget_loads_when_nothing_else_is_loaded() -> None:
    loaders = Loaders({"huge": 500})
    registry = Registry(loaders.all("huge"), memory_budget_bytes=100)
    assert registry.get("huge").name == "huge"
    assert not loaders.made["huge"][0].closed


def test_overloaded_when_only_some_models_can_be_unloaded() -> None:
    # Room for c needs both a and b gone, but b is busy.
    loaders = Loaders({"a": 50, "b": 50, "c": 100})
    registry = Registry(loaders.all("a", "b", "c"), memory_budget_bytes=100)
    registry.get("a")
    registry.get("b")
    loaders.made["b"][0].busy = True
    with pytest.raises(Overloaded):
        registry.get("c")
    assert "b" in [b.name for b in registry.loaded()]
    assert not loaders.made["b"][0].closed
    assert loaders.made["c"][0].closed


# --- single ---------------------------------------------------------------------------------


def test_single_serves_an_already_loaded_backend() -> None:
    backend = FakeBackend(name="fake-model")
    registry = Registry.single(backend)
    assert registry.loaded() == [backend]
    assert registry.names == ["fake-model"]
    assert registry.get("fake-model") is backend


def test_single_with_aliases_resolves_them_to_the_backend() -> None:
    backend = FakeBackend(name="fake-model")
    registry = Registry.single(backend, "chat", "default")
    assert registry.get("chat") is backend
    assert registry.get("default", "some conversation") is backend
    assert registry.resolve("chat") == "fake-model"
    with pytest.raises(UnknownModel):
        registry.get("other")
