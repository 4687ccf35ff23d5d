"""The SDK's Streamable HTTP transport, run for the app's lifetime.

Stateless, with JSON responses: each POST to ``/mcp`` carries one message and gets its
answer as one JSON body, so every call is authenticated, rate-limited and permission
filtered on its own by the app's guard, nothing is held between calls, and any number of
app processes can serve the same clients. The SDK's DNS-rebinding check is off: the app's
``AllowedHosts`` middleware already holds the Host header to the served names, and a
browser tricked into calling has no API key to send.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from litestar import Litestar
from litestar.types import Receive, Scope, Send

from app.mcp_door.limits import MAX_BODY_BYTES
from app.state import Services

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


class McpDoor:
    def __init__(self, manager: StreamableHTTPSessionManager):
        self.manager = manager

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.manager.handle_request(scope, receive, send)  # type: ignore[arg-type]


def open_door(services: Services) -> McpDoor:
    """The server and its transport (the SDK is imported here: a second's work, on start)."""
    from mcp.server.transport_security import TransportSecuritySettings

    from app.mcp_door.server import build_server

    server = build_server(services)
    server.streamable_http_app(  # configures the transport; its Starlette app is not used
        stateless_http=True,
        json_response=True,
        max_request_body_size=MAX_BODY_BYTES,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return McpDoor(server.session_manager)


@asynccontextmanager
async def mcp_lifespan(app: Litestar) -> AsyncIterator[None]:
    """After the services (the tools use them); stops before them."""
    door = await asyncio.to_thread(open_door, app.state.services)
    async with door.manager.run():
        app.state.mcp_door = door
        try:
            yield
        finally:
            del app.state.mcp_door
