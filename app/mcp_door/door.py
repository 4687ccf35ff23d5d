"""The SDK's Streamable HTTP transport, run for the app's lifetime.

Stateless, with JSON responses: each POST to ``/mcp`` carries one message and gets its
answer as one JSON body, so every call is authenticated, rate-limited and permission
filtered on its own by the app's guard, nothing is held between calls, and any number of
app processes can serve the same clients. The SDK's DNS-rebinding check is off: the app's
``AllowedHosts`` middleware already holds the Host header to the served names, and a
browser tricked into calling has no API key to send.

Stateless means POST only. The Streamable HTTP spec lets a server that offers no stream
of its own answer GET with 405 (the SDK's transport would instead hold a GET open as an
event stream that never ends, pinging), and DELETE ends a session, of which there are none
here: every method but POST gets 405 with ``Allow: POST``. The two refusals made before
the SDK (405, and 413 for a message over ``MAX_BODY_BYTES``) carry a JSON-RPC error as
the SDK's own do, which its client shows as the call's error at any status.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from litestar import Litestar
from litestar.types import HTTPRequestEvent, Receive, ReceiveMessage, Scope, Send

from app.mcp_door.limits import MAX_BODY_BYTES
from app.state import Services

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


# JSON-RPC's "Invalid Request": what the SDK's transport answers a request it refuses.
INVALID_REQUEST = -32600
NOT_POST = "Method Not Allowed: this MCP server is stateless; send each JSON-RPC message as a POST"
TOO_LARGE = f"Request body too large: an MCP message is at most {MAX_BODY_BYTES // 1024} KiB"


class McpDoor:
    def __init__(self, manager: StreamableHTTPSessionManager):
        self.manager = manager

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            await refuse(send, 405, NOT_POST, [(b"allow", b"POST")])
            return
        body = await bounded_body(scope, receive, MAX_BODY_BYTES)
        if body is None:
            await refuse(send, 413, TOO_LARGE)
            return
        replay = _replaying(body, receive)
        await self.manager.handle_request(scope, replay, send)  # type: ignore[arg-type]


async def bounded_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The request's body, or None once it is over ``limit`` bytes (by its Content-Length
    or as read: a chunked body has none), reading no more of it than that."""
    for name, value in scope.get("headers", []):
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            return None
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left: nothing more to read
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body already read, then waits on the real one (for the
    client's disconnect)."""
    first: HTTPRequestEvent = {"type": "http.request", "body": body, "more_body": False}
    sent = False

    async def replay() -> ReceiveMessage:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return first

    return replay


async def refuse(
    send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A JSON-RPC error (no request id: none was read) at HTTP ``status``."""
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    payload = json.dumps(error).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload, "more_body": False})


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
