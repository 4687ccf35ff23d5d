"""``/mcp``: the MCP door (app/mcp_door) mounted in the app, behind the app's guard.

The app-wide guard has already found the caller, set its access and taken a token from
its rate-limit bucket (every MCP message is a POST) when ``require_api_key`` runs: the door
is for API keys, exactly as ``/v1`` authenticates them, and a browser session is refused
(it would also lack the CSRF token). Errors before the door (no key, a bad key, too many
requests) keep their HTTP status and headers (``WWW-Authenticate``, ``Retry-After``) and
carry a JSON-RPC error, which MCP clients show as the call's error (the SDK's client reads
one at any status); never the sign-in redirect pages get.
"""

from __future__ import annotations

from typing import Any

from litestar import MediaType, Request, Response, asgi
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Receive, Scope, Send

from app.auth.guards import NotAuthenticated, current_principal
from app.errors import AppError, handle_error


def require_api_key(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    principal = current_principal(connection)
    if principal is None or principal.via_session:
        raise NotAuthenticated("the MCP endpoint takes an API key: 'Authorization: Bearer <key>'")


# JSON-RPC leaves -32000 to -32099 to the implementation: a refusal before any method ran.
REFUSED = -32001


def mcp_http_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if not isinstance(exc, AppError):
        return handle_error(request, exc)
    data = {"status": exc.status, "title": exc.title}
    return Response(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": REFUSED, "message": exc.detail, "data": data},
        },
        status_code=exc.status,
        headers=exc.headers,
        media_type=MediaType.JSON,
    )


@asgi(
    "/mcp",
    is_mount=True,
    copy_scope=True,
    guards=[require_api_key],
    exception_handlers={Exception: mcp_http_error},
)
async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    await scope["app"].state.mcp_door.handle(scope, receive, send)
