"""uvicorn, with the graceful drain on SIGTERM (see app/ops/drain.py).

uvicorn's own SIGTERM handling closes the listener at once and then waits for open
connections; here the first SIGTERM drains first (readiness and new questions answer 503
while running answers finish, up to ``RAGDESK_DRAIN_S``) and only then lets uvicorn shut
down, and the process exits 0. A second SIGTERM ends the process at once, by the signal's
default action. SIGINT (Ctrl+C) stops without the drain, as uvicorn does, and also exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from types import FrameType
from typing import Any

import uvicorn

from app.ops.drain import Drain

log = logging.getLogger(__name__)

STARTUP_FAILURE = 3  # uvicorn's exit status when the app never started


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT:
            # uvicorn's own stop, minus recording the signal: it would raise it again once
            # shut down, and Ctrl+C would end in KeyboardInterrupt rather than exit 0.
            self.force_exit = self.should_exit  # a second Ctrl+C: stop waiting for clients
            self.should_exit = True
        elif sig != signal.SIGTERM or self._loop is None:
            super().handle_exit(sig, frame)
        elif self.drain.draining:
            stop_now()
        else:
            # Not recorded as captured: uvicorn would raise it again once shut down, and
            # the process would end by SIGTERM instead of exiting 0.
            self.drain.begin()  # readiness turns 503 before this handler returns
            self._loop.call_soon_threadsafe(self._start_draining)

    def _start_draining(self) -> None:
        self._draining = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self.drain.settle()
        except Exception:  # never keep a server that was told to stop
            log.exception("draining failed; shutting down anyway")
        finally:
            self.should_exit = True


def stop_now() -> None:
    """The second SIGTERM: end the process at once, as SIGTERM does by default. Nothing
    acknowledged is lost: SQLite has it, and the vector index catches up on start."""
    print("ragdesk: second SIGTERM, stopping at once", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def run(app: Any, drain: Drain, **options: Any) -> None:
    """``uvicorn.run(app, **options)`` with the drain on SIGTERM."""
    server = DrainingServer(uvicorn.Config(app, **options), drain)
    server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
