"""Fleet routing against stand-in OpenAI-compatible servers on loopback: fewest outstanding,
stickiness, Retry-After, backoff, retry once before the first token, mid-stream failure."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from app.config.models import _loader
from app.config.settings import ModelEntry, Settings
from app.metrics import Metrics
from llm.backend import Backend, wait_idle
from llm.fleet import Fleet
from llm.fleet_health import Endpoint
from llm.params import CompletionRequest, Overloaded
from llm.remote import MAX_RETRY_AFTER_S, RemoteBackend, _failure
from tests.test_remote import WORDS, Upstream, collect, make_handler


class Node(Upstream):
    """A stand-in endpoint that also answers health checks with ``health`` (and 404 for
    /health/ready when ``ready_path`` is False, as a non-Ragdesk server would)."""

    health: int = 200
    ready_path: bool = True
    gets: list[str]

    def __init__(self) -> None:
        super().__init__()
        self.gets = []


def start_node(node: Node) -> Callable[[], None]:
    class Handler(make_handler(node)):  # type: ignore[misc]
        def send_response(self, code: int, message: str | None = None) -> None:
            super().send_response(code, message)
            if code == 503:
                self.send_header("Retry-After", "30")

        def do_GET(self) -> None:
            node.gets.append(self.path)
            status = 404 if self.path == "/health/ready" and not node.ready_path else node.health
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads, server.block_on_close = True, False
    node.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return stop


@pytest.fixture
def nodes() -> Iterator[tuple[Node, Node]]:
    a, b = Node(), Node()
    stops = [start_node(a), start_node(b)]
    yield a, b
    for stop in stops:
        stop()


def dead_url() -> str:
    with socket.socket() as probe:  # a port that was just free: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def make_fleet() -> Iterator[Callable[..., Fleet]]:
    made: list[Fleet] = []

    def make(*urls: str, **kwargs: Any) -> Fleet:
        kwargs.setdefault("check_health", False)  # tests run the checks by hand
        fleet = Fleet("fleet-model", urls, remote_model="served", **kwargs)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.close()


def endpoint(fleet: Fleet, url: str) -> Endpoint:
    return next(e for e in fleet.endpoints if e.url == url)


def test_fewest_outstanding_wins(nodes: tuple[Node, Node], make_fleet: Any) -> None:
    a, b = nodes
    a.words = b.words = ["word "] * 200
    a.delay_s = b.delay_s = 0.02
    fleet = make_fleet(a.url, b.url)
    _: Backend = fleet  # satisfies the Protocol structurally
    running = [fleet.submit(CompletionRequest("p")) for _ in range(4)]
    assert [e.outstanding for e in fleet.endpoints] == [2, 2]
    assert fleet.stats().running == 4 and not fleet.idle
    running[0].cancel()
    running[2].cancel()  # the 1st and 3rd went to the first endpoint (ties taken in turn)
    assert wait_idle(fleet.endpoints[0].backend, 2.0)
    fleet.submit(CompletionRequest("p"))
    assert [e.outstanding for e in fleet.endpoints] == [1, 2]
    for completion in running:
        completion.cancel()


def test_ties_are_taken_in_turn_and_a_conversation_sticks(
    nodes: tuple[Node, Node], make_fleet: Any
) -> None:
    a, b = nodes
    fleet = make_fleet(a.url, b.url)
    for _ in range(4):
        assert collect(fleet.submit(CompletionRequest("p")))[0] == "".join(WORDS)
    assert (len(a.bodies), len(b.bodies)) == (2, 2)
    for _ in range(4):
        collect(fleet.submit(CompletionRequest("p", cache_key="conversation:1")))
    assert sorted((len(a.bodies), len(b.bodies))) == [2, 6]
    assert [e.requests for e in fleet.endpoints] == [len(a.bodies), len(b.bodies)]


def test_stickiness_is_bounded_and_moves_off_a_down_endpoint(
    nodes: tuple[Node, Node], make_fleet: Any
) -> None:
    a, b = nodes
    fleet = make_fleet(a.url, b.url, sticky_keys=2)
    for key in ("k1", "k2", "k3"):
        collect(fleet.submit(CompletionRequest("p", cache_key=key)))
    assert list(fleet._sticky) == ["k2", "k3"]  # least recently used forgotten
    served = fleet._sticky["k3"]
    served.mark_down(time.monotonic(), 60)
    collect(fleet.submit(CompletionRequest("p", cache_key="k3")))
    assert fleet._sticky["k3"] is not served
    served.mark_up(time.monotonic(), 5)
    collect(fleet.submit(CompletionRequest("p", cache_key="k3")))  # stays where it went
    assert fleet._sticky["k3"] is not served


def test_a_503_is_retried_elsewhere_and_its_retry_after_respected(
    nodes: tuple[Node, Node], make_fleet: Any
) -> None:
    a, b = nodes
    a.error = (503, {"error": {"message": "queue full"}})
    fleet = make_fleet(a.url, b.url)
    text, finished = collect(fleet.submit(CompletionRequest("p")))
    assert (text, finished.reason, finished.model) == ("".join(WORDS), "stop", "fleet-model")
    busy = endpoint(fleet, a.url)
    assert busy.up and busy.busy_until - time.monotonic() > 25  # Retry-After: 30
    for _ in range(3):
        collect(fleet.submit(CompletionRequest("p")))
    assert (len(a.bodies), len(b.bodies)) == (1, 4)
    assert fleet.states()[0].errors == {"busy": 1}


def test_unreachable_endpoint_is_taken_out_and_checked_with_backoff(
    nodes: tuple[Node, Node], make_fleet: Any
) -> None:
    a, _ = nodes
    dead = dead_url()
    fleet = make_fleet(dead, a.url)  # the dead one is first in turn
    assert collect(fleet.submit(CompletionRequest("p")))[1].reason == "stop"
    down = endpoint(fleet, dead)
    assert not down.up and down.failures == 1
    assert 0.5 < down.next_check - time.monotonic() <= 1.0
    for _ in range(3):
        collect(fleet.submit(CompletionRequest("p")))
    assert len(a.bodies) == 4 and down.requests == 1
    down.next_check = 0.0  # due now: the check fails again and the wait doubles
    fleet.health.check_due()
    assert not down.up and down.failures == 2
    assert 1.5 < down.next_check - time.monotonic() <= 2.0
    waits = []
    for _ in range(8):
        down.mark_down(0.0, 30.0)
        waits.append(down.next_check)
    assert waits == [4, 8, 16, 30, 30, 30, 30, 30]


def test_health_check_takes_out_and_brings_back(nodes: tuple[Node, Node], make_fleet: Any) -> None:
    a, b = nodes
    b.ready_path = False  # not a Ragdesk server: checked on /v1/models
    fleet = make_fleet(a.url, b.url, health_interval_s=5)
    fleet.health.check_due()
    assert [e.up for e in fleet.endpoints] == [True, True]
    assert a.gets == ["/health/ready"] and b.gets == ["/health/ready", "/v1/models"]
    a.health = 503  # draining, say
    endpoint(fleet, a.url).next_check = 0.0
    fleet.health.check_due()
    assert [e.up for e in fleet.endpoints] == [False, True]
    for _ in range(2):
        collect(fleet.submit(CompletionRequest("p")))
    assert (len(a.bodies), len(b.bodies)) == (0, 2)
    a.health = 200
    endpoint(fleet, a.url).next_check = 0.0
    assert fleet.health.check_due() > 0
    assert [e.up for e in fleet.endpoints] == [True, True]
    assert endpoint(fleet, a.url).failures == 0


def test_background_checker_runs(nodes: tuple[Node, Node], make_fleet: Any) -> None:
    a, b = nodes
    a.health = 500
    fleet = make_fleet(a.url, b.url, check_health=True, health_interval_s=0.1)
    deadline = time.monotonic() + 5
    while len(b.gets) < 3 and time.monotonic() < deadline:  # every interval while up
        time.sleep(0.02)
    assert len(b.gets) >= 3
    assert not endpoint(fleet, a.url).up and endpoint(fleet, b.url).up


def test_failure_before_the_first_token_is_retried_once_only(
    nodes: tuple[Node, Node], make_fleet: Any
) -> None:
    a, b = nodes
    a.error = b.error = (500, {"error": {"message": "boom"}})
    fleet = make_fleet(a.url, b.url)
    text, finished = collect(fleet.submit(CompletionRequest("p")))
    assert text == "" and finished.reason == "error"
    assert finished.error is not None and "boom" in finished.error
    assert (len(a.bodies), len(b.bodies)) == (1, 1)
    assert all(e.up for e in fleet.endpoints)  # a 500 says nothing about the host
    assert wait_idle(fleet, 1.0)


def test_a_refused_request_is_not_retried(nodes: tuple[Node, Node], make_fleet: Any) -> None:
    a, b = nodes
    a.error = (400, {"error": {"message": "context length exceeded"}})
    fleet = make_fleet(a.url, b.url)
    finished = collect(fleet.submit(CompletionRequest("p")))[1]
    assert finished.reason == "error" and "context length" in (finished.error or "")
    assert (len(a.bodies), len(b.bodies)) == (1, 0)


def test_failure_mid_stream_keeps_the_text_and_says_so(
    nodes: tuple[Node, Node], make_fleet: Any
) -> None:
    a, b = nodes
    a.complete = False  # the words, then the connection closes: a crash mid-answer
    fleet = make_fleet(a.url, b.url)
    text, finished = collect(fleet.submit(CompletionRequest("p")))
    assert text == "".join(WORDS)
    assert finished.reason == "error" and finished.status == 502
    assert finished.error is not None and "mid-answer" in finished.error and a.url in finished.error
    assert len(b.bodies) == 0  # text was streamed: never sent twice
    assert not endpoint(fleet, a.url).up
    assert fleet.states()[0].errors == {"broken": 1}


def test_no_endpoint_up_is_overloaded(make_fleet: Any) -> None:
    fleet = make_fleet(dead_url(), dead_url())
    assert collect(fleet.submit(CompletionRequest("p")))[1].reason == "error"  # tried both
    assert not any(e.up for e in fleet.endpoints)
    with pytest.raises(Overloaded) as refused:
        fleet.submit(CompletionRequest("p"))
    assert "no endpoint is up" in refused.value.detail and refused.value.retry_after_s >= 1


def test_cancel_reaches_the_endpoint(nodes: tuple[Node, Node], make_fleet: Any) -> None:
    a, b = nodes
    a.words, a.delay_s = ["word "] * 200, 0.02
    fleet = make_fleet(a.url, b.url)
    completion = fleet.submit(CompletionRequest("p"))
    next(iter(completion))
    completion.cancel()
    assert collect(completion)[1].reason == "cancelled"
    assert a.disconnected.wait(1.0) and wait_idle(fleet, 1.0)


def test_metrics_show_each_endpoint(nodes: tuple[Node, Node], make_fleet: Any) -> None:
    a, b = nodes
    a.error = (503, {"error": {"message": "busy"}})
    fleet = make_fleet(a.url, b.url)
    collect(fleet.submit(CompletionRequest("p")))
    text = Metrics(lambda: [fleet]).render().decode()
    model = 'model="fleet-model"'
    assert f'ragdesk_fleet_endpoint_up{{endpoint="{a.url}",{model}}} 1.0' in text
    assert f'ragdesk_fleet_endpoint_requests_total{{endpoint="{b.url}",{model}}} 1.0' in text
    assert (
        f'ragdesk_fleet_endpoint_errors_total{{endpoint="{a.url}",kind="busy",{model}}} 1.0' in text
    )
    assert "ragdesk_fleet_endpoint_outstanding{" in text


def test_a_url_list_configures_a_fleet_and_one_url_stays_plain(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    settings = Settings.model_validate(
        {
            "models": {"big": {"url": [a.url, b.url]}, "one": {"url": a.url}},
            "fleet_health_interval_s": 2,
            "fleet_backoff_max_s": 7,
        }
    )
    entries = settings.generation.models
    assert entries["big"] == ModelEntry(url=a.url, urls=(a.url, b.url))
    assert entries["big"].endpoints == (a.url, b.url) and entries["one"].endpoints == (a.url,)
    metrics = Metrics(lambda: [])
    fleet = _loader(settings, "big", entries["big"], metrics)()
    single = _loader(settings, "one", entries["one"], metrics)()
    try:
        assert isinstance(fleet, Fleet) and isinstance(single, RemoteBackend)
        assert (fleet.health.interval_s, fleet.backoff_max_s) == (2, 7)
        assert [e.url for e in fleet.endpoints] == [a.url, b.url]
    finally:
        fleet.close()
        single.close()
    with pytest.raises(ValueError, match="distinct"):
        ModelEntry.model_validate({"url": [a.url, a.url]})


@pytest.mark.parametrize(
    ("header", "wait"),
    [("7", 7.0), ("-3", 0.0), ("1e9", MAX_RETRY_AFTER_S), ("inf", None), ("x", None)],
)
def test_a_servers_retry_after_is_believed_only_within_bounds(
    header: str, wait: float | None
) -> None:
    assert _failure(httpx.Response(503, headers={"Retry-After": header})) == ("busy", wait)
