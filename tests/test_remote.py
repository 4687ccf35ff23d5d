"""RemoteBackend against a stand-in OpenAI-compatible server on loopback (standard library)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llm.backend import Backend, wait_idle
from llm.params import (
    CompletionRequest,
    Finished,
    Overloaded,
    SamplingParams,
    TextDelta,
    Usage,
)
from llm.remote import RemoteBackend
from tests.completions import collect

WORDS = ["The", " office", " opens", " at", " 8:00", "."]


@dataclass
class Upstream:
    """What the stand-in received and how it should answer the next requests."""

    url: str = ""
    words: list[str] = field(default_factory=lambda: list(WORDS))
    delay_s: float = 0.002
    header_delay_s: float = 0.0
    finish_reason: str = "stop"
    error: tuple[int, Any] | None = None  # (status, JSON body) answered instead of a stream
    mid_stream: dict[str, Any] | None = None  # an event sent after the first word
    complete: bool = True  # False: the stream is cut off with neither [DONE] nor its last chunk
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    disconnected: threading.Event = field(default_factory=threading.Event)


def make_handler(up: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # chunked streaming on a keep-alive connection

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):  # the client hung up mid-answer
                up.disconnected.set()

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            up.bodies.append(body)
            up.paths.append(self.path)
            up.auth.append(self.headers.get("Authorization"))
            self.answer()

        def answer(self) -> None:
            time.sleep(up.header_delay_s)
            if up.error is not None:
                status, payload = up.error
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, word in enumerate(up.words):
                self.event({"choices": [{"index": 0, "text": word, "finish_reason": None}]})
                time.sleep(up.delay_s)
                if i == 0 and up.mid_stream is not None:
                    self.send_chunk(f"data: {json.dumps(up.mid_stream)}\n\n".encode())
            if not up.complete:
                self.close_connection = True
                return
            self.event({"choices": [{"index": 0, "text": "", "finish_reason": up.finish_reason}]})
            usage = {
                "prompt_tokens": 12,
                "completion_tokens": len(up.words),
                "prompt_tokens_details": {"cached_tokens": 8},
            }
            self.event({"choices": [], "usage": usage})
            self.send_chunk(b"data: [DONE]\n\n")
            self.send_chunk(b"")  # the chunked body's end: the connection stays reusable

        def event(self, chunk: dict[str, Any]) -> None:
            chunk.update(id="cmpl-1", object="text_completion", model=up.bodies[-1]["model"])
            self.send_chunk(f"data: {json.dumps(chunk)}\n\n".encode())

        def send_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(up))
    server.daemon_threads = True
    server.block_on_close = False  # a slow stand-in stream must not hold up teardown
    up.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield up
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def backend(upstream: Upstream) -> Iterator[RemoteBackend]:
    remote = RemoteBackend("ragdesk-model", upstream.url, remote_model="org/served-model")
    yield remote
    remote.close()


def test_streams_text_and_reports_usage_and_model(backend: RemoteBackend) -> None:
    _: Backend = backend  # satisfies the Protocol structurally
    text, finished = collect(backend.submit(CompletionRequest("Question: when?")))
    assert text == "".join(WORDS)
    assert finished == Finished("stop", Usage(12, 8, len(WORDS)), "ragdesk-model")
    assert wait_idle(backend, 1.0)
    assert backend.stats().running == 0
    assert backend.stats().sequences == 64


def test_length_is_passed_through(upstream: Upstream, backend: RemoteBackend) -> None:
    upstream.finish_reason = "length"
    assert collect(backend.submit(CompletionRequest("p")))[1].reason == "length"
    upstream.finish_reason = "abort"  # anything unknown is reported as a plain stop
    assert collect(backend.submit(CompletionRequest("p")))[1].reason == "stop"


def test_sends_sampling_parameters_stop_grammar_and_key(upstream: Upstream) -> None:
    remote = RemoteBackend("m", upstream.url, api_key="sk-test")
    params = SamplingParams(
        max_tokens=7,
        temperature=0.0,
        top_k=5,
        top_p=0.5,
        min_p=0.1,
        repeat_penalty=1.1,
        frequency_penalty=0.2,
        presence_penalty=0.3,
        seed=42,
        stop=("\nQuestion:", "\n["),
    )
    collect(remote.submit(CompletionRequest("Hi", params, grammar='root ::= "x"')))
    collect(remote.submit(CompletionRequest("Hi")))
    remote.close()
    first, second = upstream.bodies
    assert first == {
        "model": "m",
        "prompt": "Hi",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 7,
        "temperature": 0.0,
        "top_p": 0.5,
        "top_k": 5,
        "min_p": 0.1,
        "repeat_penalty": 1.1,
        "repetition_penalty": 1.1,
        "frequency_penalty": 0.2,
        "presence_penalty": 0.3,
        "stop": ["\nQuestion:", "\n["],
        "seed": 42,
        "grammar": 'root ::= "x"',
    }
    assert "seed" not in second and "grammar" not in second and second["stop"] == []
    assert upstream.auth == ["Bearer sk-test", "Bearer sk-test"]


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_base_url_with_or_without_v1(upstream: Upstream, suffix: str) -> None:
    remote = RemoteBackend("m", upstream.url + suffix)
    assert collect(remote.submit(CompletionRequest("p")))[1].reason == "stop"
    remote.close()
    assert upstream.paths == ["/v1/completions"]
    assert upstream.auth == [None]


@pytest.mark.parametrize(
    ("status", "payload", "message"),
    [
        (503, {"error": {"message": "server busy", "type": "server_error"}}, "server busy"),
        (400, {"object": "error", "message": "context length exceeded", "code": 400}, "context"),
        (500, ["not", "an", "error", "object"], "not"),
    ],
)
def test_upstream_error_status_finishes_with_error(
    upstream: Upstream, backend: RemoteBackend, status: int, payload: Any, message: str
) -> None:
    upstream.error = (status, payload)
    text, finished = collect(backend.submit(CompletionRequest("p")))
    assert text == ""
    assert finished.reason == "error"
    assert finished.error is not None
    assert f"HTTP {status}" in finished.error and message in finished.error
    assert finished.model == "ragdesk-model"
    assert wait_idle(backend, 1.0)


@pytest.mark.parametrize(
    "event",
    [
        {"error": {"message": "out of memory", "type": "server_error"}},
        {"object": "error", "message": "out of memory", "code": 500},
    ],
)
def test_error_event_mid_stream(
    upstream: Upstream, backend: RemoteBackend, event: dict[str, Any]
) -> None:
    upstream.mid_stream = event
    text, finished = collect(backend.submit(CompletionRequest("p")))
    assert text == WORDS[0]
    assert finished.reason == "error"
    assert finished.error is not None and "out of memory" in finished.error
    assert finished.usage == Usage(1, 0, 1)  # estimated: the upstream sent no usage


def test_stream_cut_short_is_an_error(upstream: Upstream, backend: RemoteBackend) -> None:
    upstream.complete = False
    text, finished = collect(backend.submit(CompletionRequest("p")))
    assert text == "".join(WORDS)
    assert finished.reason == "error" and finished.error is not None
    assert wait_idle(backend, 1.0)


def test_connection_refused_finishes_with_error() -> None:
    with socket.socket() as probe:  # a port that was just free: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    remote = RemoteBackend("m", f"http://127.0.0.1:{port}")
    finished = collect(remote.submit(CompletionRequest("p")))[1]
    remote.close()
    assert finished.reason == "error"
    assert finished.error is not None and "cannot reach" in finished.error


def test_cancel_mid_stream_closes_the_upstream_connection(
    upstream: Upstream, backend: RemoteBackend
) -> None:
    upstream.words, upstream.delay_s = ["word "] * 200, 0.02  # four seconds if left to run
    completion = backend.submit(CompletionRequest("p"))
    events = iter(completion)
    assert isinstance(next(events), TextDelta)
    start = time.monotonic()
    completion.cancel()
    rest = list(events)
    assert time.monotonic() - start < 1.0
    finished = rest[-1]
    assert isinstance(finished, Finished) and finished.reason == "cancelled"
    assert upstream.disconnected.wait(1.0)
    assert wait_idle(backend, 1.0)


def test_cancel_before_the_upstream_answers(upstream: Upstream, backend: RemoteBackend) -> None:
    upstream.header_delay_s = 3.0
    completion = backend.submit(CompletionRequest("p"))
    time.sleep(0.05)
    start = time.monotonic()
    completion.cancel()
    assert collect(completion)[1].reason == "cancelled"
    # the guard answers long before the headers; the reader still waits for them
    assert time.monotonic() - start < upstream.header_delay_s / 2
    assert wait_idle(backend, upstream.header_delay_s + 5)  # it lets go once they arrive


def test_deadline_finishes_the_stream(upstream: Upstream, backend: RemoteBackend) -> None:
    upstream.words, upstream.delay_s = ["word "] * 200, 0.02
    start = time.monotonic()
    request = CompletionRequest("p", deadline=start + 0.15)
    text, finished = collect(backend.submit(request))
    assert finished.reason == "deadline"
    assert text and time.monotonic() - start < 2.0  # the stream would run for 4 s
    assert wait_idle(backend, 1.0)


def test_refuses_beyond_max_concurrent(upstream: Upstream) -> None:
    upstream.words, upstream.delay_s = ["word "] * 200, 0.02
    remote = RemoteBackend("m", upstream.url, max_concurrent=1)
    first = remote.submit(CompletionRequest("p"))
    assert remote.stats().running == 1 and not remote.idle
    with pytest.raises(Overloaded):
        remote.submit(CompletionRequest("p"))
    first.cancel()
    assert collect(first)[1].reason == "cancelled"
    assert wait_idle(remote, 1.0)
    remote.close()


def test_works_from_asyncio(backend: RemoteBackend) -> None:
    async def consume() -> tuple[str, Finished | None]:
        text, finished = "", None
        async for event in backend.submit(CompletionRequest("p")):
            if isinstance(event, TextDelta):
                text += event.text
            else:
                finished = event
        return text, finished

    text, finished = asyncio.run(consume())
    assert text == "".join(WORDS)
    assert finished is not None and finished.usage == Usage(12, 8, len(WORDS))


def test_count_tokens_is_a_rough_estimate(backend: RemoteBackend) -> None:
    assert backend.count_tokens("") == 1
    assert backend.count_tokens("x" * 400) == 100
    assert (backend.device, backend.memory_bytes) == ("remote", 0)


def test_without_max_tokens_upstream_gets_what_the_context_leaves_up_to_the_cap(
    upstream: Upstream,
) -> None:
    remote = RemoteBackend("m", upstream.url, context_tokens=8192, max_tokens_cap=2048)
    for prompt in ("Hi", "x" * 30_000):  # the second estimated at 7,500 tokens: 692 left
        collect(remote.submit(CompletionRequest(prompt, SamplingParams(max_tokens=None))))
    remote.close()
    assert [body["max_tokens"] for body in upstream.bodies] == [2048, 692]
