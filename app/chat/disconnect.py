"""A non-streamed answer whose client hangs up stops generating.

A streamed response notices a departed client when a write fails; a non-streamed one
writes nothing until the end, so without this a client that timed out (and retried)
would keep its sequence busy for the whole answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Request

from llm.channel import Completion


@asynccontextmanager
async def cancel_on_disconnect(
    request: Request[Any, Any, Any], completion: Completion
) -> AsyncIterator[None]:
    """While the block runs, cancel ``completion`` if the client disconnects. The request
    body has been read, so the only message left to receive is ``http.disconnect``."""

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        completion.cancel()

    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        watcher.cancel()
