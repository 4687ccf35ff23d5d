"""How the one-shot commands (``ingest``, ``reindex``, ``backup``) stop: SIGTERM (``kill``,
a container being stopped) is handled like Ctrl-C, so each command's own clean-up runs,
and an interrupted command exits with :data:`INTERRUPTED`, never 0: what it was asked to
do is not done, and a script or a Kubernetes Job must not take it for done (the server,
which has no such result, exits 0 on SIGTERM: ``app.ops.server``)."""

from __future__ import annotations

import signal
from types import FrameType

INTERRUPTED = 130  # the shell's status for a command stopped by Ctrl-C (128 + SIGINT)


def sigterm_interrupts() -> None:
    """From now on, SIGTERM raises :class:`KeyboardInterrupt` in the main thread."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
