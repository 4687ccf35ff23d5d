"""The application's error hierarchy and the one handler that renders every error.

htmx requests get the ``_error.html`` partial, ``/api`` and ``/v1`` get JSON, browsers
get a full error page. Unexpected exceptions are logged and shown as a plain 500
without internals.
"""

from __future__ import annotations

import logging
import sys
from typing import Any
from urllib.parse import urlencode, urlsplit

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from app.auth.redirects import safe_next
from llm.params import EngineError, Overloaded
from retrieval.blobs import BlobsUnavailable
from retrieval.disk import is_disk_full

log = logging.getLogger(__name__)


class AppError(Exception):
    status = 400
    title = "Bad request"

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}


class NotFound(AppError):
    status = 404
    title = "Not found"


class UnprocessableInput(AppError):
    status = 422
    title = "Invalid input"


class UnsupportedMediaType(AppError):
    status = 415
    title = "Unsupported file type"


class InsufficientStorage(AppError):
    status = 507
    title = "Disk full"

    def __init__(self) -> None:
        super().__init__(
            "the server's disk is full, so nothing was changed; try again once an "
            "administrator has freed space"
        )


class StorageUnavailable(AppError):
    """The store of uploaded originals (a bucket, a shared volume) cannot be reached: the
    reason goes to the log and to admins' readiness, never to the caller (it names hosts)."""

    status = 503
    title = "Unavailable"

    def __init__(self) -> None:
        super().__init__(
            "the storage of uploaded files cannot be reached, so nothing was changed; try "
            "again shortly",
            headers={"Retry-After": "10"},
        )


class DatabaseUnavailable(AppError):
    """PostgreSQL cannot be reached, answers too slowly, or refuses writes (a failover):
    the reason (it names the host) goes to the log and to admins' readiness, never to
    the caller."""

    status = 503
    title = "Unavailable"

    def __init__(self) -> None:
        super().__init__(
            "the database cannot be reached just now; try again shortly",
            headers={"Retry-After": "5"},
        )


class Busy(AppError):
    status = 503
    title = "Busy"

    def __init__(self, detail: str, retry_after_s: int = 1):
        super().__init__(detail, headers={"Retry-After": str(retry_after_s)})


class NotReady(AppError):
    status = 503
    title = "Starting up"

    def __init__(self, detail: str = "the models are still loading; try again shortly"):
        super().__init__(detail, headers={"Retry-After": "5"})


def from_engine(exc: EngineError) -> AppError:
    """An engine's refusal as an application error with the same status and headers."""
    error = AppError(exc.detail, headers=_engine_headers(exc))
    error.status = exc.status
    error.title = _title_for(exc.status)
    return error


def _engine_headers(exc: EngineError) -> dict[str, str]:
    return {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, Overloaded) else {}


def as_disk_full(request: Request[Any, Any, Any], exc: Exception) -> Exception:
    """A full disk, wherever it surfaced, as ``InsufficientStorage`` (and told to the
    services' disk watch, which logs it once and makes readiness report it); the store of
    originals out of reach as ``StorageUnavailable`` and the database as
    ``DatabaseUnavailable`` (503, ``Retry-After``; readiness is told at once)."""
    if isinstance(exc, BlobsUnavailable):
        return StorageUnavailable()
    services = getattr(request.app.state, "services", None)
    if is_store_unavailable(exc):
        if services is not None:
            services.database.failed(str(exc))  # logs the change, once
        else:
            log.error("the database cannot be used: %s", exc)  # the password blanked
        return DatabaseUnavailable()
    full = services.disk.saw(exc) if services is not None else is_disk_full(exc)
    return InsufficientStorage() if full else exc


def is_store_unavailable(exc: BaseException) -> bool:
    """``exc`` is retrieval.pg's ``StoreUnavailable``. That module (psycopg) is loaded
    only on PostgreSQL: when it is not loaded, no such exception can have been raised."""
    pg = sys.modules.get("retrieval.pg")
    return pg is not None and isinstance(exc, pg.StoreUnavailable)


def _describe(exc: Exception) -> tuple[int, str, str, dict[str, str]]:
    if isinstance(exc, AppError):
        return exc.status, exc.title, exc.detail, exc.headers
    if isinstance(exc, EngineError):
        return exc.status, _title_for(exc.status), exc.detail, _engine_headers(exc)
    if isinstance(exc, ValidationException):
        # Malformed or missing fields are unprocessable input, as for our own checks.
        extra = exc.extra if isinstance(exc.extra, list) else []
        details = "; ".join(_field_message(item) for item in extra) or exc.detail
        return 422, "Invalid input", details, {}
    if isinstance(exc, HTTPException):
        return exc.status_code, _title_for(exc.status_code), exc.detail, dict(exc.headers or {})
    if isinstance(exc, RecursionError):  # msgspec decoding JSON nested ~1000 deep
        log.warning("refused a request nested too deeply to decode")
        return 400, "Bad request", "the request body is nested too deeply", {}
    log.exception("unhandled error", exc_info=exc)
    return HTTP_500_INTERNAL_SERVER_ERROR, "Server error", "something went wrong on our side", {}


def _field_message(item: Any) -> str:
    if isinstance(item, dict):
        key = item.get("key")
        message = item.get("message", "invalid")
        return f"{key}: {message}" if key else str(message)
    return str(item)


def _title_for(status: int) -> str:
    return {
        400: "Bad request",
        401: "Unauthorized",
        403: "Forbidden",
        404: "Not found",
        405: "Method not allowed",
        413: "Too large",
        415: "Unsupported file type",
        429: "Too many requests",
        507: "Disk full",
        502: "Bad gateway",
        503: "Unavailable",
    }.get(status, "Error")


def _to_login(request: Request[Any, Any, Any]) -> Response[Any]:
    """Pages send a visitor without a session to sign in, and back here afterwards.

    An htmx request (a background poll, a form) is a fragment, not a page: back to the page
    that made it (``HX-Current-URL``) if that is one of ours, else to the start page."""
    htmx = bool(request.headers.get("hx-request"))
    if htmx:
        here = _page_of_htmx(request)
    else:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    target = "/login" if here == "/" else f"/login?{urlencode({'next': here})}"
    if htmx:  # htmx follows HX-Redirect with a full page load
        return Response("", status_code=401, headers={"HX-Redirect": target})
    return Redirect(target, status_code=303)


def _page_of_htmx(request: Request[Any, Any, Any]) -> str:
    """The path (and query) of the page an htmx request came from: only a page of this
    origin, and only a plain local path; ``/`` otherwise."""
    current = urlsplit(request.headers.get("hx-current-url", ""))
    if (current.scheme or current.netloc) and (
        current.scheme != request.url.scheme or current.netloc != request.url.netloc
    ):
        return "/"
    path = current.path + (f"?{current.query}" if current.query else "")
    if "\\" in path or not path.startswith("/") or path.startswith("//"):
        return "/"
    return safe_next(path)


def handle_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Every error outside ``/v1`` (which answers in OpenAI's shape: app/openai/errors.py)."""
    path = request.url.path
    status, title, detail, headers = _describe(as_disk_full(request, exc))
    if status == 401 and not path.startswith(("/api/", "/health", "/metrics")):
        return _to_login(request)
    if path.startswith(("/api/", "/v1/", "/health", "/metrics")):
        return Response(
            {"error": {"status": status, "title": title, "detail": detail}},
            status_code=status,
            headers=headers,
            media_type=MediaType.JSON,
        )
    template = "_error.html" if request.headers.get("hx-request") else "error.html"
    return Template(
        template,
        context={"status": status, "title": title, "detail": detail},
        status_code=status,
        headers=headers,
    )
