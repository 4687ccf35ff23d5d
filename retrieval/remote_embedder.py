"""Embeddings from OpenAI-compatible ``/v1/embeddings`` endpoints (other Ragdesk processes,
vLLM, …), as one ``Embedder``; routing as the generation fleet's (llm/fleet.py).

- A call is cut into pieces of at most ``texts_per_request`` texts (fewer when that leaves
  an endpoint idle), longest texts together, sent at once: bulk ingestion keeps every
  endpoint busy, each with up to ``max_outstanding`` requests (one computing, one on the
  wire). A one-piece call (a question) is sent from the caller's thread and ignores that
  limit, so it never queues behind ingestion here (a Ragdesk node serves it first too).
- Each piece goes to the available endpoint with the fewest requests outstanding, ties in
  turn. One that cannot be reached or whose connection breaks is down, checked again after
  1, 2, 4 … s (at most ``backoff_max_s``); a 429/503 sets it aside for its ``Retry-After``.
  A piece that fails so (or with a 5xx) is sent to another endpoint; once every endpoint
  has failed it, it waits for one to come back, up to ``timeout_s`` in all.
- The check is an embedding: at start every endpoint must embed the probe texts, all to the
  same vectors (else ``RemoteEmbedderError``: nothing is built on vectors of unknown
  make); then a background thread re-embeds them every ``health_interval_s`` and keeps an
  endpoint that answers differently (restarted with another model) out until it agrees.

The API key goes in the ``Authorization`` header only; no message here names it.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from retrieval.embedder import Vectors
from retrieval.remote_wire import Failed, differs, embeddings_url, status_failure, vectors

log = logging.getLogger(__name__)

PROBE_TEXTS = ("Ragdesk embedding probe: is this the model the index was built with?",)
NODE_TOLERANCE = 1e-3  # largest difference of a vector component between endpoints
LOCAL_TOLERANCE = 1e-4  # … and between an endpoint and the local model it stands for
_FIRST_BACKOFF_S = 1.0
_RETRYABLE = frozenset({"unreachable", "broken", "busy", "server", "mismatch"})


class RemoteEmbedderError(RuntimeError):
    """The endpoints cannot be used as configured, or none answered in time."""


@dataclass(eq=False)
class RemoteNode:
    """One endpoint. Changed under the embedder's lock."""

    url: str  # the embeddings URL
    up: bool = True
    failures: int = 0  # consecutive: the exponent of the backoff
    next_check: float = 0.0
    busy_until: float = 0.0
    outstanding: int = 0
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    def mark_down(self, now: float, backoff_max_s: float, why: str) -> None:
        if self.up:
            log.warning("embedding endpoint %s is down: %s", self.url, why)
        self.up = False
        self.failures += 1
        self.next_check = now + min(backoff_max_s, _FIRST_BACKOFF_S * 2 ** (self.failures - 1))

    def mark_up(self, now: float, interval_s: float) -> None:
        if not self.up:
            log.warning("embedding endpoint %s is back", self.url)
        self.up, self.failures, self.next_check = True, 0, now + interval_s


class RemoteEmbedder:
    """See the module docstring. ``count_tokens`` cuts passages to size (a local tokenizer:
    the endpoints have no tokenising call); ``expected``, the vectors the probe texts must
    get (e.g. from the local model), within ``tolerance``."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        remote_model: str,
        count_tokens: Callable[[Sequence[str]], list[int]],
        api_key: str | None = None,
        model_id: str | None = None,
        expected: Vectors | None = None,
        tolerance: float = NODE_TOLERANCE,
        texts_per_request: int = 32,
        max_outstanding: int = 2,
        timeout_s: float = 30.0,
        health_interval_s: float = 5.0,
        backoff_max_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ):
        if not urls or len(set(urls)) != len(urls):
            raise ValueError(f"remote embeddings need distinct endpoint URLs, got {list(urls)}")
        self.remote_model = remote_model
        self.model_id = model_id or f"remote:{remote_model}"
        self._count_tokens = count_tokens
        self.texts_per_request, self.max_outstanding = texts_per_request, max_outstanding
        self.timeout_s, self.backoff_max_s = timeout_s, backoff_max_s
        self.health_interval_s = health_interval_s
        self.nodes = [RemoteNode(embeddings_url(url)) for url in urls]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(timeout_s, connect=min(2.0, timeout_s))
        self._client = httpx.Client(headers=headers, timeout=timeout, transport=transport)
        self._cond = threading.Condition()
        self._turn = itertools.count()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(len(urls) * max_outstanding, "ragdesk-remote-embed")
        self._dimension: int | None = None  # checked in every answer once the probe set it
        self._tolerance = tolerance  # the health checks hold nodes to the start's standard
        try:
            self.reference = self._probe_all(expected, tolerance)
        except BaseException:
            self.close()
            raise
        self.dimension = self._dimension = int(self.reference.shape[1])
        for node in self.nodes:  # each has just passed the check
            node.mark_up(time.monotonic(), health_interval_s)
        self._health = threading.Thread(target=self._check_health, daemon=True,
                                        name="ragdesk-remote-embed-health")  # fmt: skip
        self._health.start()

    # -- the Embedder protocol --

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        size = min(self.texts_per_request, math.ceil(len(texts) / len(self.nodes)))
        pieces = [order[i : i + size] for i in range(0, len(order), size)]
        if len(pieces) == 1:
            out[order] = self._embed_piece([texts[i] for i in order])
            return out
        futures: list[Future[Vectors]] = [
            self._pool.submit(self._embed_piece, [texts[i] for i in rows]) for rows in pieces
        ]
        try:
            for rows, future in zip(pieces, futures, strict=True):
                out[rows] = future.result()
        finally:
            for future in futures:
                future.cancel()  # after a failure: the pieces not started yet
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self._count_tokens(texts)

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    # -- one piece, routed --

    def _embed_piece(self, texts: list[str]) -> Vectors:
        deadline = time.monotonic() + self.timeout_s
        tried: set[RemoteNode] = set()
        last = "no endpoint was available"
        rounds = 0
        while True:
            node = self._acquire(tried, deadline, bulk=len(texts) > 1, last=last)
            if node is None:  # every endpoint failed this piece: wait a little, go again
                rounds += 1
                if self._stop.wait(min(0.25 * 2**rounds, max(0.0, deadline - time.monotonic()))):
                    raise RemoteEmbedderError("the remote embedder is closed")
                tried.clear()
                continue
            try:
                return self._post(node, texts)
            except Failed as failure:
                self._note(node, failure)
                last = f"{node.url}: {failure.kind}: {failure.detail}"
                if failure.kind not in _RETRYABLE:
                    raise RemoteEmbedderError(last) from None
                tried.add(node)
            finally:
                with self._cond:
                    node.outstanding -= 1
                    self._cond.notify_all()

    def _acquire(
        self, tried: set[RemoteNode], deadline: float, *, bulk: bool, last: str
    ) -> RemoteNode | None:
        """The endpoint for a piece, its request counted; None once every usable endpoint
        has been tried; waits while the untried ones are busy or full, up to ``deadline``."""
        with self._cond:
            while True:
                now = time.monotonic()
                if now >= deadline or self._stop.is_set():
                    raise RemoteEmbedderError(
                        f"no embedding endpoint answered within {self.timeout_s:g}s ({last})"
                    )
                untried = [n for n in self.nodes if n not in tried and n.up]
                if not untried and tried:
                    return None
                ready = [
                    n
                    for n in untried
                    if now >= n.busy_until and not (bulk and n.outstanding >= self.max_outstanding)
                ]
                if ready:
                    fewest = min(n.outstanding for n in ready)
                    ties = [n for n in ready if n.outstanding == fewest]
                    node = ties[next(self._turn) % len(ties)]
                    node.outstanding += 1
                    node.requests += 1
                    return node
                self._cond.wait(min(0.25, deadline - now))

    def _note(self, node: RemoteNode, failure: Failed) -> None:
        with self._cond:
            now = time.monotonic()
            node.errors[failure.kind] += 1
            if failure.kind in ("unreachable", "broken", "mismatch"):
                node.mark_down(now, self.backoff_max_s, failure.detail)
            elif failure.kind == "busy":
                node.busy_until = now + (failure.retry_after_s or 1.0)
        log.info("embedding request to %s failed (%s): %s", node.url, failure.kind, failure.detail)

    def _post(self, node: RemoteNode, texts: list[str]) -> Vectors:
        body = {"model": self.remote_model, "input": texts, "encoding_format": "base64"}
        try:
            response = self._client.post(node.url, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise Failed("unreachable", type(exc).__name__) from None
        except httpx.HTTPError as exc:  # a read timeout, a dropped connection
            raise Failed("broken", type(exc).__name__) from None
        if response.status_code != 200:
            raise status_failure(response)
        return vectors(response, len(texts), self._dimension)

    # -- the probe: at start, then as the health check --

    def _probe_all(self, expected: Vectors | None, tolerance: float) -> Vectors:
        reference = expected
        for node in self.nodes:
            probed = self._probe(node, deadline=time.monotonic() + self.timeout_s)
            if reference is None:
                reference = probed
            elif (why := differs(probed, reference, tolerance)) is not None:
                against = "the local model" if expected is not None else self.nodes[0].url
                raise RemoteEmbedderError(f"{node.url} embeds differently from {against}: {why}")
        assert reference is not None
        return reference

    def _probe(self, node: RemoteNode, deadline: float) -> Vectors:
        """The probe texts' vectors from ``node``, retried while it is unreachable or busy
        (it may be starting); a refusal (wrong key, unknown model) is final."""
        while True:
            try:
                return self._post(node, list(PROBE_TEXTS))
            except Failed as failure:
                final = failure.kind == "refused" or time.monotonic() >= deadline
                if final:
                    raise RemoteEmbedderError(
                        f"the embedding endpoint {node.url} did not answer the probe "
                        f"({failure.kind}: {failure.detail}); not starting with it"
                    ) from None
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def _check_health(self) -> None:
        while not self._stop.wait(self._due_in()):
            for node in self.nodes:
                if self._stop.is_set() or time.monotonic() < node.next_check:
                    continue
                try:
                    answer = self._post(node, list(PROBE_TEXTS))
                    why = differs(answer, self.reference, self._tolerance)
                except Failed as failure:
                    if failure.kind == "busy":  # up, but not now: only set aside
                        with self._cond:
                            node.busy_until = time.monotonic() + (failure.retry_after_s or 1.0)
                            node.next_check = node.busy_until + self.health_interval_s
                        continue
                    why = f"{failure.kind}: {failure.detail}"
                except Exception as exc:  # the checker must outlive any surprise
                    why = f"{type(exc).__name__}: {exc}"
                with self._cond:
                    now = time.monotonic()
                    if why is None:
                        node.mark_up(now, self.health_interval_s)
                    elif node.up or now >= node.next_check:
                        node.mark_down(now, self.backoff_max_s, why)
                    self._cond.notify_all()

    def _due_in(self) -> float:
        soonest = min(n.next_check for n in self.nodes) - time.monotonic()
        return max(0.05, min(self.health_interval_s, soonest))


def connect(
    urls: Sequence[str],
    *,
    remote_model: str,
    local_dir: Path,
    same_as_local: bool = False,
    **options: Any,
) -> RemoteEmbedder:
    """A ``RemoteEmbedder`` counting tokens with ``local_dir``'s tokenizer (passages are cut
    as locally). ``same_as_local``: the endpoints must embed the probe texts as the local
    model does (within ``LOCAL_TOLERANCE``); the vectors then carry the local model's tag,
    so switching between local and remote embedding re-embeds nothing."""
    from transformers import AutoTokenizer  # heavy: imported on use

    from retrieval.embedder import SentenceTransformerEmbedder, count_with, model_id

    tokenizer = AutoTokenizer.from_pretrained(str(local_dir), local_files_only=True)
    lock = threading.Lock()

    def count_tokens(texts: Sequence[str]) -> list[int]:
        return count_with(tokenizer, lock, texts)

    expected = None
    if same_as_local:
        local = SentenceTransformerEmbedder(local_dir)
        expected = local.embed_batch(list(PROBE_TEXTS))
        del local  # only needed for the comparison
        options |= {"model_id": model_id(local_dir), "tolerance": LOCAL_TOLERANCE}
    return RemoteEmbedder(
        urls, remote_model=remote_model, count_tokens=count_tokens, expected=expected, **options
    )
