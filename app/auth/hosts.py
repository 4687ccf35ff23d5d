"""Only serve the host names we are meant to (a defence against DNS rebinding and Host
header tricks): anything else gets 400 before routing."""

from __future__ import annotations

import json

from litestar.response.base import ASGIResponse
from litestar.types import ASGIApp, Receive, Scope, Send


def host_name(header: str) -> str:
    """The name in a Host header, without its port (``[::1]:8000`` → ``[::1]``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(name: str, allowed: list[str]) -> bool:
    for pattern in allowed:
        pattern = pattern.lower()
        if pattern == name or (pattern.startswith("*.") and name.endswith(pattern[1:])):
            return True
    return False


class AllowedHosts:
    """ASGI middleware; ``allowed`` as in ``Settings.served_hosts``."""

    def __init__(self, app: ASGIApp, allowed: list[str]):
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        host = headers.get(b"host", b"").decode("latin-1")
        if host and host_allowed(host_name(host), self.allowed):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {"error": {"status": 400, "title": "Bad request", "detail": "unknown host"}}
        ).encode()
        response = ASGIResponse(body=body, status_code=400, media_type="application/json")
        await response(scope, receive, send)
