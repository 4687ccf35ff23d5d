"""Only serve the host names we are meant to (a defence against DNS rebinding and Host
header tricks), and only paths a file system or router can take: anything else gets 400
before routing."""

from __future__ import annotations

import json
import re

from litestar.response.base import ASGIResponse
from litestar.types import ASGIApp, Receive, Scope, Send

# RFC 9110 Host: a reg-name or IPv4 address, or an IPv6 literal in brackets, then an
# optional port; nothing else (``127.0.0.1:8000@evil.test`` is not a host).
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9._~-]+)(?::[0-9]{1,5})?")


def host_name(header: str) -> str | None:
    """The name in a Host header, without its port (``[::1]:8000`` → ``[::1]``); None
    when the header is not a well-formed host."""
    match = _HOST.fullmatch(header.strip().lower())
    return match.group(1) if match else None


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
        name = host_name(headers.get(b"host", b"").decode("latin-1"))
        if name is None or not host_allowed(name, self.allowed):
            await _refuse("unknown host", scope, receive, send)
        elif "\x00" in scope.get("path", ""):  # no file or route has one; os calls raise
            await _refuse("the path contains a NUL character", scope, receive, send)
        else:
            await self.app(scope, receive, send)


async def _refuse(detail: str, scope: Scope, receive: Receive, send: Send) -> None:
    body = json.dumps({"error": {"status": 400, "title": "Bad request", "detail": detail}})
    response = ASGIResponse(body=body.encode(), status_code=400, media_type="application/json")
    await response(scope, receive, send)
