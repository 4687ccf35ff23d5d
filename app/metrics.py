"""Prometheus metrics at ``/metrics``, labelled by model.

Counters and histograms are fed by the engines as things happen (``EngineObserver``);
gauges are read from each loaded backend, and from the ingestion worker (index, queue,
embedding cache), when Prometheus scrapes. A scrape never waits on the database: what is
read from it (the vector count on PostgreSQL) is left out when it does not come within
``STORE_READ_WAIT_S``, and ``ragdesk_database_up`` is the watch's last finding.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.errors import is_store_unavailable
from app.fleet_metrics import FleetGauges
from llm.backend import Backend
from llm.params import FinishReason, Usage
from retrieval.disk import DiskWatch

if TYPE_CHECKING:
    from app.ops.database_watch import DatabaseWatch
    from retrieval.ingest import IngestWorker

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
GAP_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)
STORE_READ_WAIT_S = 0.5  # how long a scrape waits for a number read from the database


class Metrics:
    """One registry per app (tests build many apps); it is also the engines' observer."""

    def __init__(
        self,
        loaded: Callable[[], list[Backend]],
        worker: Callable[[], IngestWorker | None] = lambda: None,
        disk: DiskWatch | None = None,
    ):
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram(
            "ragdesk_time_to_first_token_seconds", "Submit to first token.", ["model"],
            registry=r, buckets=LATENCY_BUCKETS,
        )  # fmt: skip
        self.itl = Histogram(
            "ragdesk_inter_token_latency_seconds", "Gap between tokens.", ["model"],
            registry=r, buckets=GAP_BUCKETS,
        )  # fmt: skip
        self.prompt_tokens = Counter(
            "ragdesk_prompt_tokens", "Prompt tokens, cached or not.", ["model"], registry=r
        )
        self.cached_tokens = Counter(
            "ragdesk_cached_prompt_tokens", "Prompt tokens reused from the KV cache.", ["model"],
            registry=r,
        )  # fmt: skip
        self.generated_tokens = Counter(
            "ragdesk_generated_tokens", "Tokens generated.", ["model"], registry=r
        )
        self.requests = Counter(
            "ragdesk_requests", "Finished requests by reason.", ["model", "reason"], registry=r
        )
        self.rejects = Counter(
            "ragdesk_rejected_requests", "Refused before inference.", ["model", "reason"],
            registry=r,
        )  # fmt: skip
        self.prefetches = Counter(
            "ragdesk_prefetches", "Prefetches on draft questions by outcome.", ["outcome"],
            registry=r,
        )  # fmt: skip
        self.prefetch_cached = Counter(
            "ragdesk_prefetch_cached_prompt_tokens",
            "Prompt tokens found cached by answers whose draft was prefetched.", registry=r,
        )  # fmt: skip
        self.drafted = Counter(
            "ragdesk_speculative_drafted_tokens", "Drafted tokens checked by the model.",
            ["model", "method"], registry=r,
        )  # fmt: skip
        self.accepted = Counter(
            "ragdesk_speculative_accepted_tokens", "Drafted tokens the model accepted.",
            ["model", "method"], registry=r,
        )  # fmt: skip
        r.register(_BackendGauges(loaded))
        r.register(_RetrievalGauges(worker))
        r.register(FleetGauges(loaded))  # per-endpoint: app/fleet_metrics.py
        if disk is not None:
            r.register(_DiskGauges(disk))

    def watch_database(self, watch: DatabaseWatch) -> None:
        """Export whether the database server answers (PostgreSQL; SQLite always does)."""
        self.registry.register(_DatabaseGauges(watch))

    # --- EngineObserver ---------------------------------------------------------------------
    def first_token(self, model: str, seconds: float) -> None:
        self.ttft.labels(model).observe(seconds)

    def token_gap(self, model: str, seconds: float) -> None:
        self.itl.labels(model).observe(seconds)

    def finished(self, model: str, usage: Usage, reason: FinishReason) -> None:
        self.prompt_tokens.labels(model).inc(usage.prompt_tokens)
        self.cached_tokens.labels(model).inc(usage.cached_tokens)
        self.generated_tokens.labels(model).inc(usage.completion_tokens)
        self.requests.labels(model, reason).inc()

    def rejected(self, model: str, reason: str) -> None:
        self.rejects.labels(model, reason).inc()

    def prefetched(self, outcome: str, cached_tokens: int) -> None:
        """A prefetch on a draft question (app/chat/prefetch.py): started, used, wasted or
        skipped; a used one counts the prompt tokens its answer found cached."""
        self.prefetches.labels(outcome).inc()
        if cached_tokens:
            self.prefetch_cached.inc(cached_tokens)

    def speculated(self, model: str, method: str, drafted: int, accepted: int) -> None:
        """A finished request's speculative drafts (``SpeculationObserver``)."""
        self.drafted.labels(model, method).inc(drafted)
        self.accepted.labels(model, method).inc(accepted)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _BackendGauges(Collector):
    def __init__(self, loaded: Callable[[], list[Backend]]):
        self._loaded = loaded

    def collect(self) -> Iterator[Metric]:
        families = {
            "running": GaugeMetricFamily(
                "ragdesk_requests_running", "Requests generating.", labels=["model"]
            ),
            "waiting": GaugeMetricFamily(
                "ragdesk_requests_waiting", "Requests queued.", labels=["model"]
            ),
            "sequences": GaugeMetricFamily(
                "ragdesk_sequences", "Sequences the model decodes together.", labels=["model"]
            ),
            "kv_cells_used": GaugeMetricFamily(
                "ragdesk_kv_cells_used", "KV cache cells holding tokens.", labels=["model"]
            ),
            "kv_cells": GaugeMetricFamily(
                "ragdesk_kv_cells", "KV cache cells in total.", labels=["model"]
            ),
        }
        disk = {
            "kv_disk_hits": CounterMetricFamily(
                "ragdesk_kv_disk_hits",
                "Conversation KV states reloaded from disk.",
                labels=["model"],
            ),
            "kv_disk_misses": CounterMetricFamily(
                "ragdesk_kv_disk_misses",
                "Conversations with no usable state on disk.",
                labels=["model"],
            ),
            "kv_disk_bytes_written": CounterMetricFamily(
                "ragdesk_kv_disk_written_bytes",
                "Bytes of KV state written to disk.",
                labels=["model"],
            ),
            "kv_window_resumes": CounterMetricFamily(
                "ragdesk_kv_window_resumes",
                "Prompts whose cached prefix a sliding window had moved past, resumed from "
                "a checkpoint of the window.",
                labels=["model"],
            ),
            "kv_window_prefills": CounterMetricFamily(
                "ragdesk_kv_window_prefills",
                "Prompts whose cached prefix a sliding window had moved past, prefilled "
                "from the start (no checkpoint within the prefix).",
                labels=["model"],
            ),
            "prefetch_interrupts": CounterMetricFamily(
                "ragdesk_prefetch_interrupts",
                "Prefetch chunks stopped mid-decode by a request they stood in the way of.",
                labels=["model"],
            ),
        }
        for backend in self._loaded():
            stats = backend.stats()
            for field, gauge in families.items():
                gauge.add_metric([backend.name], getattr(stats, field))
            for field, counter in disk.items():
                counter.add_metric([backend.name], getattr(stats, field))
        yield from families.values()
        yield from disk.values()


class _DiskGauges(Collector):
    """The data directory's disk: readiness stays 200 when it is full (reads still work),
    so this is where an alert looks."""

    def __init__(self, disk: DiskWatch):
        self._disk = disk

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "ragdesk_disk_full",
            "1 while the data directory's disk is full (writes refused with 507).",
            value=int(self._disk.full),
        )
        if (free := self._disk.free_bytes()) is not None:
            yield GaugeMetricFamily(
                "ragdesk_disk_free_bytes", "Free space on the data directory's disk.", value=free
            )


class _DatabaseGauges(Collector):
    """Readiness says 503 while the database cannot be used; this is where an alert looks
    across fronts. Read from the watch's last check: a scrape never waits on the server."""

    def __init__(self, watch: DatabaseWatch):
        self._watch = watch

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "ragdesk_database_up",
            "1 while the database answers; 0 while it cannot be used (unreachable, too"
            " slow, or found read-only).",
            value=int(self._watch.problem(wait=False) is None),
        )


class _RetrievalGauges(Collector):
    def __init__(self, worker: Callable[[], IngestWorker | None]):
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        worker = self._worker()
        if worker is None:  # still loading, or the embedder failed to
            return
        index = worker.index
        # on PostgreSQL (pgvector) the vector count is read from the database
        remote = worker.store.db.dialect == "postgresql"
        count = _read_briefly(lambda: index.count) if remote else index.count
        if count is None:
            return  # the database is away or slow: ragdesk_database_up says so
        mapped, pending, usage = index.mapped, worker.pending, worker.cache_usage
        yield GaugeMetricFamily(
            "ragdesk_index_vectors", "Passages in the vector index.", value=count
        )
        yield GaugeMetricFamily(
            "ragdesk_index_mapped",
            "1 when the vector index is searched memory-mapped from disk.",
            value=int(mapped),
        )
        yield GaugeMetricFamily(
            "ragdesk_ingestion_queue", "Documents waiting to be ingested.", value=pending
        )
        if usage is not None:  # known after the first prune
            cache = GaugeMetricFamily(
                "ragdesk_embedding_cache_bytes",
                "Embedding cache size; 'spare': vectors no live passage needs.",
                labels=["kind"],
            )
            cache.add_metric(["total"], usage.bytes)
            cache.add_metric(["spare"], usage.spare_bytes)
            yield cache


def _read_briefly(read: Callable[[], int]) -> int | None:
    """``read()`` on a thread of its own, waited for ``STORE_READ_WAIT_S``: None when it
    takes longer (it ends by itself, within the database's bound) or the database fails."""
    outcome: list[int | BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append(read())
        except BaseException as exc:  # handed to the scrape below
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="ragdesk-metrics-read", daemon=True).start()
    if not done.wait(STORE_READ_WAIT_S):
        return None
    if isinstance(found := outcome[0], BaseException):
        if is_store_unavailable(found):
            return None
        raise found
    return found
