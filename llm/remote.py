"""A model served by any OpenAI-compatible server: vLLM, SGLang, llama.cpp's server.

Each request streams on a daemon thread; a light "guard" thread watches for cancellation and
the deadline, which a blocked socket read would hide until the next chunk (or the headers)."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from llm.channel import Completion
from llm.params import (
    BackendStats,
    CompletionRequest,
    Finished,
    FinishReason,
    Overloaded,
    TextDelta,
    Usage,
    token_budget,
)
from llm.prompt import CompletionFormat, PromptFormat

_GUARD_POLL_S = 0.05  # how late a deadline may be noticed; cancellation wakes at once
_SAMPLING: tuple[str, ...] = ("temperature", "top_p", "top_k", "min_p")
_SAMPLING += ("frequency_penalty", "presence_penalty")  # OpenAI's, vLLM's and llama.cpp's names


# How a call failed, for a fleet (llm/fleet.py) choosing where the next one goes: the host
# cannot be reached; it answered 503; it refused this request (4xx: the request's fault); it
# answered another 5xx or an error event; the connection broke (a crash, a cut stream).
Failure = Literal["none", "unreachable", "busy", "refused", "server", "broken"]


@dataclass(frozen=True)
class Outcome:
    """How one upstream call ended: ``sent`` text chunks had streamed by then."""

    failure: Failure
    sent: int
    retry_after_s: float | None = None


# Called as a call ends, before its Finished is pushed; True: the hook took the stream over
# (it retries elsewhere, or pushes its own Finished) and this one is not pushed.
EndHook = Callable[[Outcome, Finished], bool]


@dataclass
class _Call:
    """One request in flight: what has streamed so far and the socket it streams on."""

    request: CompletionRequest
    prompt_estimate: int
    out: Completion = field(default_factory=Completion)
    on_end: EndHook | None = None
    failure: Failure = "none"
    retry_after_s: float | None = None
    sent: int = 0
    reported: Usage | None = None  # the upstream's own count, when it sends one
    done: threading.Event = field(default_factory=threading.Event)
    sock: object = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def usage(self) -> Usage:
        return self.reported or Usage(self.prompt_estimate, 0, self.sent)

    def attach(self, response: httpx.Response | None) -> None:
        stream = response.extensions.get("network_stream") if response else None
        with self.lock:  # so that the guard never shuts down a connection back in the pool
            self.sock = stream.get_extra_info("socket") if stream is not None else None

    def abort(self) -> None:
        """Wake a reader blocked on the socket: shutdown() interrupts a pending recv, close()
        from another thread does not. The plain-socket method also bypasses TLS teardown."""
        with self.lock, contextlib.suppress(OSError):  # OSError: already closed by the peer
            if isinstance(self.sock, socket.socket):
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)


class RemoteBackend:
    """Forwards completions to an OpenAI-compatible server; see the module docstring."""

    device = "remote"
    memory_bytes = 0  # nothing is loaded here

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        remote_model: str | None = None,
        api_key: str | None = None,
        context_tokens: int = 4096,
        max_tokens_cap: int = 2048,
        timeout_s: float = 300.0,
        max_concurrent: int = 64,
    ):
        self.name, self.remote_model = name, remote_model or name
        self.context_tokens, self.max_concurrent = context_tokens, max_concurrent
        self.max_tokens_cap = max_tokens_cap
        self.prompt_format: PromptFormat = CompletionFormat()
        root = base_url.rstrip("/")
        self.url = root + ("/completions" if root.endswith("/v1") else "/v1/completions")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        n = max_concurrent  # all kept alive: reconnecting for each request wastes time
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        # A dead host should fail fast; a busy one may take long before its first token.
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
        self._client = httpx.Client(headers=headers, timeout=timeout, limits=limits)
        self._running, self._lock = 0, threading.Lock()

    def count_tokens(self, text: str) -> int:
        """A rough estimate (4 characters a token): tokenizing and context checks are upstream."""
        return max(1, len(text) // 4)

    def submit(self, request: CompletionRequest) -> Completion:
        return self.start(request, Completion())

    def start(
        self, request: CompletionRequest, out: Completion, on_end: EndHook | None = None
    ) -> Completion:
        """``submit`` streaming into ``out``, which may be a stream a failed call began."""
        with self._lock:
            if self._running >= self.max_concurrent:
                # Refuse rather than queue unseen in the connection pool.
                raise Overloaded(f"{self.name}: {self._running} requests already in flight")
            self._running += 1
        call = _Call(request, self.count_tokens(request.prompt), out, on_end)
        for target in (self._read, self._guard):
            threading.Thread(target=target, args=(call,), daemon=True).start()
        return call.out

    def _guard(self, call: _Call) -> None:
        while not call.done.is_set():
            if call.out.wait_cancelled(_GUARD_POLL_S) or call.request.expired():
                reason: FinishReason = "cancelled" if call.out.cancelled else "deadline"
                call.out.push(Finished(reason, call.usage(), self.name))  # even before headers
                call.abort()
                return

    def _read(self, call: _Call) -> None:
        reason: FinishReason = "error"
        error: str | None = None
        try:
            with self._client.stream("POST", self.url, json=self._body(call.request)) as resp:
                call.attach(resp)
                reason, error = self._events(call, resp)
                call.attach(None)  # before the connection goes back to the pool (not on errors)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            call.failure = "unreachable"
            error = f"{self.name}: cannot reach the upstream server: {exc}"
        except httpx.TimeoutException:
            call.failure = "server"
            error = f"{self.name}: the upstream server did not answer within the timeout"
        except Exception as exc:  # whatever happens, the consumer must get a Finished
            call.failure = "broken"
            error = f"{self.name}: upstream request failed: {type(exc).__name__}: {exc}"
        finally:
            call.done.set()
            with self._lock:
                self._running -= 1
            finished = Finished(reason, call.usage(), self.name, error)
            # Cut off by the guard (cancelled, past the deadline): nothing the upstream did.
            failed = error is not None and not call.out.cancelled and not call.request.expired()
            outcome = Outcome(call.failure if failed else "none", call.sent, call.retry_after_s)
            if call.on_end is None or not call.on_end(outcome, finished):
                # Ignored when the guard or a [DONE] already finished the stream: first wins.
                call.out.push(finished)

    def _events(self, call: _Call, response: httpx.Response) -> tuple[FinishReason, str | None]:
        if response.status_code >= 400:
            response.read()
            call.failure, call.retry_after_s = _failure(response)
            return "error", f"{self.name}: upstream answered {_error_message(response)}"
        reason: FinishReason = "stop"
        done = False
        for line in response.iter_lines():
            if call.out.cancelled or call.request.expired():
                return ("cancelled" if call.out.cancelled else "deadline"), None
            if done or not line.startswith("data:"):
                continue  # blank lines, other SSE fields; after [DONE], drain for reuse
            data = line[5:].strip()
            if done := data == "[DONE]":  # finish at once; draining must not delay the consumer
                call.out.push(Finished(reason, call.usage(), self.name))
                continue
            chunk = json.loads(data)
            if chunk.get("error") or chunk.get("object") == "error":  # OpenAI's, or vLLM's
                call.failure = "server"
                return "error", f"{self.name}: upstream failed mid-stream: {data}"
            for choice in chunk.get("choices") or ():
                if choice.get("text"):
                    call.out.push(TextDelta(choice["text"]))
                    call.sent += 1
                if choice.get("finish_reason"):
                    reason = "length" if choice["finish_reason"] == "length" else "stop"
            if usage := chunk.get("usage"):
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                call.reported = Usage(usage["prompt_tokens"], cached, usage["completion_tokens"])
        if not done:
            call.failure = "broken"
        return (reason, None) if done else ("error", f"{self.name}: upstream stream cut short")

    def _body(self, request: CompletionRequest) -> dict[str, Any]:
        p = request.params
        body: dict[str, Any] = {name: getattr(p, name) for name in _SAMPLING}
        # From an estimate of the prompt's length: upstream checks the real count.
        prompt_tokens, context = self.count_tokens(request.prompt), self.context_tokens
        body["max_tokens"] = token_budget(p.max_tokens, prompt_tokens, context, self.max_tokens_cap)
        body["repeat_penalty"] = body["repetition_penalty"] = p.repeat_penalty  # llama.cpp, vLLM
        body.update(model=self.remote_model, prompt=request.prompt, stop=list(p.stop))
        body.update(stream=True, stream_options={"include_usage": True})
        if p.seed is not None:
            body["seed"] = p.seed
        if request.grammar is not None:
            body["grammar"] = request.grammar  # GBNF: llama.cpp's server honours it
        return body

    def stats(self) -> BackendStats:
        return BackendStats(self._running, 0, self.max_concurrent, 0, 0)

    @property
    def running(self) -> int:
        return self._running

    @property
    def idle(self) -> bool:
        return self._running == 0

    def close(self) -> None:
        self._client.close()


# The longest a server's own Retry-After keeps it out of a fleet (health checks go on).
MAX_RETRY_AFTER_S = 300.0


def _failure(response: httpx.Response) -> tuple[Failure, float | None]:
    status = response.status_code
    if status == 503:
        with contextlib.suppress(ValueError):  # seconds; an HTTP date is rare enough to ignore
            wait = float(response.headers.get("Retry-After", ""))
            if math.isfinite(wait):  # "inf" or 1e300 must not park an endpoint for ever
                return "busy", min(max(0.0, wait), MAX_RETRY_AFTER_S)
        return "busy", None
    return ("server" if status >= 500 else "refused"), None


def _error_message(response: httpx.Response) -> str:
    """The status and the server's words: OpenAI's ``{"error": {"message"}}``, vLLM's
    ``message`` or FastAPI's ``detail``; else the start of the body."""
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict):
            err = body.get("error")
            message = (err.get("message") if isinstance(err, dict) else err) or body.get("message")
            if message := message or body.get("detail"):
                return f"HTTP {response.status_code}: {message}"
    return f"HTTP {response.status_code}: {response.text[:200].strip() or response.reason_phrase}"
