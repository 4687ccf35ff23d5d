"""Per-endpoint gauges and counters of the loaded fleets (llm/fleet.py), read when
Prometheus scrapes; registered by ``app.metrics.Metrics``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llm.backend import Backend
from llm.fleet import Fleet


class FleetGauges(Collector):
    def __init__(self, loaded: Callable[[], list[Backend]]):
        self._loaded = loaded

    def collect(self) -> Iterator[Metric]:
        fleets = [b for b in self._loaded() if isinstance(b, Fleet)]
        if not fleets:
            return
        labels = ["model", "endpoint"]
        up = GaugeMetricFamily(
            "ragdesk_fleet_endpoint_up", "1 while a fleet endpoint is in rotation.", labels=labels
        )
        outstanding = GaugeMetricFamily(
            "ragdesk_fleet_endpoint_outstanding",
            "Requests a fleet endpoint is answering.",
            labels=labels,
        )
        requests = CounterMetricFamily(
            "ragdesk_fleet_endpoint_requests", "Requests sent to a fleet endpoint.", labels=labels
        )
        errors = CounterMetricFamily(
            "ragdesk_fleet_endpoint_errors",
            "Failed requests by kind: unreachable, busy (503), refused (4xx), server (5xx or "
            "an error event), broken (the connection).",
            labels=[*labels, "kind"],
        )
        for fleet in fleets:
            for state in fleet.states():
                names = [fleet.name, state.url]
                up.add_metric(names, int(state.up))
                outstanding.add_metric(names, state.outstanding)
                requests.add_metric(names, state.requests)
                for kind, count in sorted(state.errors.items()):
                    errors.add_metric([*names, kind], count)
        yield from (up, outstanding, requests, errors)
