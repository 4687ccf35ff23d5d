"""One model served by several OpenAI-compatible endpoints (a fleet), as one ``Backend``.

Where a request goes: the endpoint that served its conversation (``cache_key``) while that
one is available, so its KV cache stays useful; otherwise the one with the fewest requests
outstanding, ties taken in turn. An endpoint is available while it is up (llm/fleet_health.py),
not within the ``Retry-After`` of its own 503, and below its concurrency limit.

When a call fails before its first token (the host is unreachable or busy, the connection
broke, a 5xx), the request is sent once more, to another endpoint, on the same stream: the
consumer sees nothing of it. One that fails mid-answer ends with an error event that says
so; the text streamed so far stays with the consumer (chat keeps it as the partial answer).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from llm.channel import Completion
from llm.fleet_health import Endpoint, HealthChecker
from llm.params import BackendStats, CompletionRequest, Finished, Overloaded
from llm.prompt import CompletionFormat, PromptFormat
from llm.remote import Failure, Outcome, RemoteBackend

log = logging.getLogger(__name__)

_ENDPOINT_DOWN: frozenset[Failure] = frozenset({"unreachable", "broken"})
_RETRYABLE: frozenset[Failure] = frozenset({"unreachable", "busy", "server", "broken"})


@dataclass(frozen=True)
class EndpointState:
    """One endpoint as /metrics shows it."""

    url: str
    up: bool
    outstanding: int
    requests: int
    errors: dict[Failure, int]


class Fleet:
    """Forwards completions to the least busy of several servers; see the module docstring."""

    device = "remote"
    memory_bytes = 0

    def __init__(
        self,
        name: str,
        urls: Sequence[str],
        *,
        remote_model: str | None = None,
        api_key: str | None = None,
        context_tokens: int = 4096,
        max_tokens_cap: int = 2048,
        timeout_s: float = 300.0,
        max_concurrent: int = 64,
        health_interval_s: float = 5.0,
        backoff_max_s: float = 60.0,
        sticky_keys: int = 10_000,
        check_health: bool = True,
    ):
        if len(set(urls)) != len(urls) or not urls:
            raise ValueError(f"{name}: a fleet needs distinct endpoint URLs, got {list(urls)}")
        self.name, self.context_tokens, self.max_tokens_cap = name, context_tokens, max_tokens_cap
        self.prompt_format: PromptFormat = CompletionFormat()
        self.backoff_max_s, self.sticky_keys = backoff_max_s, sticky_keys
        self.endpoints = [
            Endpoint(url, RemoteBackend(name, url, remote_model=remote_model, api_key=api_key,
                                        context_tokens=context_tokens,
                                        max_tokens_cap=max_tokens_cap, timeout_s=timeout_s,
                                        max_concurrent=max_concurrent))
            for url in urls
        ]  # fmt: skip
        self._lock = threading.Lock()
        self._sticky: OrderedDict[str, Endpoint] = OrderedDict()  # cache_key -> endpoint, LRU
        self._turn = itertools.count()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.health = HealthChecker(
            self.endpoints,
            self._lock,
            interval_s=health_interval_s,
            backoff_max_s=backoff_max_s,
            headers=headers,
        )
        if check_health:
            self.health.start()

    def count_tokens(self, text: str) -> int:
        return self.endpoints[0].backend.count_tokens(text)

    def submit(self, request: CompletionRequest) -> Completion:
        out = Completion()
        self._dispatch(request, out, tried=())
        return out

    def _dispatch(
        self, request: CompletionRequest, out: Completion, tried: tuple[Endpoint, ...]
    ) -> None:
        with self._lock:  # choosing and starting in one step: outstanding counts stay true
            endpoint = self._choose(request.cache_key, tried)
            endpoint.requests += 1
            on_end = functools.partial(self._ended, request, out, endpoint, tried)
            endpoint.backend.start(request, out, on_end)

    def _choose(self, key: str | None, tried: tuple[Endpoint, ...]) -> Endpoint:
        now = time.monotonic()
        ready = [e for e in self.endpoints if e not in tried and e.available(now)]
        if not ready:
            raise self._unavailable(now, tried)
        chosen = self._sticky.get(key) if key is not None else None
        if chosen is None or chosen not in ready:
            fewest = min(e.outstanding for e in ready)
            ties = [e for e in ready if e.outstanding == fewest]
            chosen = ties[next(self._turn) % len(ties)]
        if key is not None:
            self._sticky[key] = chosen
            self._sticky.move_to_end(key)
            while len(self._sticky) > self.sticky_keys:
                self._sticky.popitem(last=False)
        return chosen

    def _unavailable(self, now: float, tried: tuple[Endpoint, ...]) -> Overloaded:
        others = [e for e in self.endpoints if e not in tried]
        up = [e for e in others if e.up]
        if up:
            wait = min(max(e.busy_until - now, 0.0) for e in up)
            detail = f"{self.name}: every endpoint is busy"
        else:
            wait = min((e.next_check - now for e in others), default=1.0)
            detail = f"{self.name}: no endpoint is up (of {len(self.endpoints)})"
        return Overloaded(detail, retry_after_s=max(1, round(wait)))

    def _ended(
        self,
        request: CompletionRequest,
        out: Completion,
        endpoint: Endpoint,
        tried: tuple[Endpoint, ...],
        outcome: Outcome,
        finished: Finished,
    ) -> bool:
        """An upstream call ended (see ``EndHook``): note what it says about the endpoint,
        then retry a failure before the first token once, elsewhere."""
        failure = outcome.failure
        with self._lock:
            now = time.monotonic()
            if failure != "none":
                endpoint.errors[failure] += 1
            if failure in _ENDPOINT_DOWN:
                endpoint.mark_down(now, self.backoff_max_s)
            elif failure == "busy":
                endpoint.busy_until = now + (outcome.retry_after_s or 1.0)
        if failure not in _RETRYABLE or out.cancelled or request.expired():
            return False
        if outcome.sent > 0:
            error = (
                f"{self.name}: the endpoint {endpoint.url} failed mid-answer; the text so far "
                f"is all there is ({finished.error})"
            )
            out.push(Finished("error", finished.usage, self.name, error, status=502))
            return True
        if tried:
            return False  # retried once already
        try:
            self._dispatch(request, out, tried=(endpoint,))
        except Overloaded:
            return False  # no other endpoint: the first one's error stands
        log.info("%s: retrying on another endpoint after %s (%s)", self.name, failure, endpoint.url)
        return True

    def states(self) -> list[EndpointState]:
        with self._lock:
            return [
                EndpointState(e.url, e.up, e.outstanding, e.requests, dict(e.errors))
                for e in self.endpoints
            ]

    def stats(self) -> BackendStats:
        running = sum(e.outstanding for e in self.endpoints)
        return BackendStats(running, 0, sum(e.backend.max_concurrent for e in self.endpoints), 0, 0)

    @property
    def idle(self) -> bool:
        return all(e.backend.idle for e in self.endpoints)

    def close(self) -> None:
        self.health.close()
        for endpoint in self.endpoints:
            endpoint.backend.close()
