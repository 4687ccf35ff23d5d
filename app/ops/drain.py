"""The graceful drain: what SIGTERM does before the server stops.

app/ops/server.py calls :meth:`Drain.begin` from its SIGTERM handler, then awaits
:meth:`Drain.settle` before it lets uvicorn shut down:

1. ``begin``: ``/health/ready`` answers 503 at once and every new generation request gets
   503 with ``Retry-After``. The listener stays open meanwhile, so load balancers and
   clients hear that, instead of a refused connection.
2. ``settle``: the generation requests already running get up to ``drain_s`` to finish.
   Those still running then are cut: the task serving each is cancelled, exactly as when a
   client leaves (the engine frees the sequence; a chat answer is stored, marked stopped),
   and the client gets one last event saying the server is shutting down.
3. uvicorn then shuts down as it always does: it closes the listener, lets the other
   requests finish, and the lifespan's shutdown stops the ingest worker, which
   checkpoints the vector index.

:class:`DrainGate` is the ASGI middleware that refuses and tracks generation requests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from dataclasses import dataclass

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import AppError

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5  # another replica answers at once; this one is back after a restart
CUT_GRACE_S = 5.0  # how long cut requests get to unwind (store a partial answer) after the cut
SHUTTING_DOWN = "the server is shutting down; ask again in a moment"

# Requests that start generating: refused while draining, tracked while they run.
_NEW_GENERATION = re.compile(
    r"POST /(?:ui/ask|ui/prefetch|api/prefetch|ui/messages/\d+/(?:regenerate|edit)|api/chat"
    r"|api/completions"
    r"|v1/completions|v1/chat/completions)/?"
)
# The web chat's answer stream, opened right after a question was accepted: tracked (it
# generates) but not refused while draining, since its question was accepted before.
_ANSWER_STREAM = re.compile(r"GET /ui/answers/\d+/stream/?")


class ShuttingDown(AppError):
    status = 503
    title = "Shutting down"

    def __init__(self) -> None:
        super().__init__(SHUTTING_DOWN, headers={"Retry-After": str(RETRY_AFTER_S)})


@dataclass(eq=False)
class _Running:
    """One generation request being served, as the drain sees it."""

    task: asyncio.Task[object]
    path: str
    started: bool = False  # its response has begun
    event_stream: bool = False  # ... as server-sent events
    complete: bool = False  # ... and ended
    cut: bool = False  # the drain cancelled it


@dataclass(frozen=True)
class DrainReport:
    finished: int  # requests that ended on their own during the drain
    cut: int  # requests still running at the deadline


class Drain:
    """The draining flag and the generation requests running now (event loop only, apart
    from ``begin``, which a signal handler may call)."""

    def __init__(self, drain_s: float) -> None:
        self.drain_s = drain_s
        self._draining = threading.Event()
        self._closed = False  # settled: nothing generates any more
        self._running: set[_Running] = set()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    @property
    def running(self) -> int:
        return len(self._running)

    def begin(self) -> None:
        if not self.draining:
            log.info("draining: new questions get 503; running answers get %.0fs", self.drain_s)
        self._draining.set()

    async def settle(self) -> DrainReport:
        """Wait for running generation requests (up to ``drain_s``), cut the rest, and
        wait (briefly) for those to unwind."""
        self.begin()
        loop = asyncio.get_running_loop()
        before = len(self._running)
        await self._until_idle(loop.time() + self.drain_s)
        self._closed = True
        cut = list(self._running)
        for running in cut:
            running.cut = True
            running.task.cancel()
        await self._until_idle(loop.time() + CUT_GRACE_S)
        report = DrainReport(finished=max(before - len(cut), 0), cut=len(cut))
        log.info("drained: %d answers finished, %d cut at the deadline", report.finished, len(cut))
        return report

    async def _until_idle(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while self._running and loop.time() < deadline:
            await asyncio.sleep(0.05)

    def refuses(self, method: str, path: str) -> bool:
        request = f"{method} {path}"
        if _NEW_GENERATION.fullmatch(request):
            return self.draining
        return self._closed and _ANSWER_STREAM.fullmatch(request) is not None

    @staticmethod
    def generates(method: str, path: str) -> bool:
        request = f"{method} {path}"
        return bool(_NEW_GENERATION.fullmatch(request) or _ANSWER_STREAM.fullmatch(request))


class DrainGate:
    """ASGI middleware: 503 for new generation requests while draining; every generation
    request is tracked so the drain can wait for it and, at the deadline, cut it."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        method, path = str(scope.get("method", "")), scope["path"]
        if not Drain.generates(method, path):
            await self.app(scope, receive, send)
            return
        if self.drain.refuses(method, path):
            raise ShuttingDown  # rendered by the app's error handler, in each door's shape
        task = asyncio.current_task()
        assert task is not None
        running = _Running(task, path)
        self.drain._running.add(running)
        try:
            await self.app(scope, receive, _tracking(running, send))
        except asyncio.CancelledError:
            if not running.cut:
                raise
            task.uncancel()
            await _end(running, send)
        finally:
            self.drain._running.discard(running)


def _tracking(running: _Running, send: Send) -> Send:
    async def tracked(message: Message) -> None:
        if running.cut:
            return  # whatever the app still says after the cut is not the client's
        if message["type"] == "http.response.start":
            running.started = True
            headers = dict(message.get("headers", []))
            content_type = bytes(headers.get(b"content-type", b""))
            running.event_stream = content_type.startswith(b"text/event-stream")
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            running.complete = True
        await send(message)

    return tracked


async def _end(running: _Running, send: Send) -> None:
    """Finish the response of a cut request: a 503 if nothing was sent yet, a last event
    in the door's own shape if it is a stream."""
    if running.complete:
        return
    if not running.started:
        raise ShuttingDown
    body = _last_event(running.path).encode() if running.event_stream else b""
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _last_event(path: str) -> str:
    """The event that ends a cut stream, as each door reports a failure mid-stream."""
    if path.startswith("/v1/"):  # the OpenAI SDKs raise APIError on a chunk with "error"
        error = {"message": SHUTTING_DOWN, "type": "server_error", "param": None}
        return f"data: {json.dumps({'error': {**error, 'code': 'server_shutting_down'}})}\n\n"
    if path.startswith("/ui/"):  # the web chat's stream ends with a "done" partial
        html = (
            '<div class="error" role="alert"><strong>Shutting down</strong> '
            f"{SHUTTING_DOWN}; what was written so far is kept.</div>"
        )
        return f"event: done\ndata: {html}\n\n"
    return f"event: error\ndata: {json.dumps({'status': 503, 'detail': SHUTTING_DOWN})}\n\n"
