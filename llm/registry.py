"""Models by name: loaded on first use, unloaded least recently used under a memory
budget, reached through aliases that may split traffic between versions (canary)."""

from __future__ import annotations

import hashlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from llm.backend import Backend
from llm.params import EngineError, ModelUnavailable, Overloaded, UnknownModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alias:
    """Traffic weights by model name, e.g. ``{"gemma-q4": 90, "gemma-q8": 10}``."""

    weights: Mapping[str, float]

    def pick(self, key: str | None) -> str:
        """A weighted choice; the same ``key`` (a conversation) always gets the same model,
        so its KV cache stays useful."""
        names = sorted(self.weights)
        total = sum(self.weights[n] for n in names)
        if key is None:
            point = random.random() * total
        else:
            digest = hashlib.sha256(key.encode()).digest()
            point = int.from_bytes(digest[:8], "big") / 2**64 * total
        for name in names:
            point -= self.weights[name]
            if point < 0:
                return name
        return names[-1]


@dataclass
class _Loaded:
    backend: Backend
    last_used: float = field(default_factory=time.monotonic)


class Registry:
    def __init__(
        self,
        loaders: Mapping[str, Callable[[], Backend]],
        aliases: Mapping[str, Alias] | None = None,
        *,
        memory_budget_bytes: int | None = None,
        retry_load_after_s: float = 30.0,
    ):
        self._loaders = dict(loaders)
        self.aliases = dict(aliases or {})
        for alias, target in self.aliases.items():
            unknown = set(target.weights) - set(self._loaders)
            if unknown:
                raise ValueError(f"alias {alias!r} names unknown models: {sorted(unknown)}")
        self.memory_budget_bytes = memory_budget_bytes
        self._loaded: dict[str, _Loaded] = {}
        self._lock = threading.Lock()  # loading is rare; one at a time keeps the budget honest
        # A model that failed to load is refused at once for a while, not loaded again (under
        # the lock, holding up every other model) by each request that names it.
        self.retry_load_after_s = retry_load_after_s
        self._failed: dict[str, float] = {}  # name -> when its load failed

    @classmethod
    def single(cls, backend: Backend, *aliases: str) -> Registry:
        """One already-loaded backend (tests, the fake), also known as ``aliases``."""
        registry = cls(
            {backend.name: lambda: backend}, {a: Alias({backend.name: 1}) for a in aliases}
        )
        registry._loaded[backend.name] = _Loaded(backend)
        return registry

    @property
    def names(self) -> list[str]:
        return sorted(self._loaders)

    def resolve(self, name: str, key: str | None = None) -> str:
        if name in self._loaders:
            return name
        if name in self.aliases:
            return self.aliases[name].pick(key)
        raise UnknownModel(f"no model or alias named {name!r}")

    def get(self, name: str, key: str | None = None) -> Backend:
        """The backend for a model or alias, loading it first if needed (blocking)."""
        resolved = self.resolve(name, key)
        with self._lock:
            entry = self._loaded.get(resolved)
            if entry is None:
                entry = _Loaded(self._load(resolved))
                self._loaded[resolved] = entry
            entry.last_used = time.monotonic()
            return entry.backend

    def if_loaded(self, name: str, key: str | None = None) -> Backend | None:
        """The backend for a model or alias when it is loaded now; never loads, never waits
        for a load in progress (a prefetch must not)."""
        entry = self._loaded.get(self.resolve(name, key))
        return None if entry is None else entry.backend

    def loaded(self) -> list[Backend]:
        """The models loaded now, without waiting for a load in progress (the lock is held
        for a whole load): a copy of the table, taken in one step."""
        return [entry.backend for entry in tuple(self._loaded.values())]

    def close(self) -> None:
        with self._lock:
            for entry in self._loaded.values():
                entry.backend.close()
            self._loaded.clear()

    def _load(self, name: str) -> Backend:
        unavailable = ModelUnavailable(f"model {name!r} could not be loaded; see the server log")
        if time.monotonic() - self._failed.get(name, -math.inf) < self.retry_load_after_s:
            raise unavailable
        log.info("loading model %s", name)
        try:
            backend = self._loaders[name]()
        except EngineError:
            raise
        except Exception as exc:  # the file's path and the library's words go to the log only
            log.exception("loading model %s failed", name)
            self._failed[name] = time.monotonic()
            raise unavailable from exc
        self._failed.pop(name, None)
        if self.memory_budget_bytes is not None:
            try:
                self._make_room(backend.memory_bytes, keep=name)
            except Overloaded:
                backend.close()
                raise
        return backend

    def _make_room(self, needed: int, keep: str) -> None:
        assert self.memory_budget_bytes is not None
        used = sum(e.backend.memory_bytes for e in self._loaded.values())
        for name, entry in sorted(self._loaded.items(), key=lambda item: item[1].last_used):
            if used + needed <= self.memory_budget_bytes:
                return
            if name == keep or not entry.backend.idle:
                continue
            log.info("unloading model %s (least recently used)", name)
            entry.backend.close()
            del self._loaded[name]
            used -= entry.backend.memory_bytes
        if used + needed > self.memory_budget_bytes and used > 0:
            raise Overloaded("no memory to load another model while the others are busy", 5)
