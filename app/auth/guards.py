"""The one app-wide guard: who is asking, may they, and not too often.

Every route handler runs it. Handlers marked ``opt={"public": True}`` (health, login,
static files) are the explicit allowlist; ``opt={"admin": True}`` needs the admin role;
``opt={"monitoring": True}`` (metrics) an admin's session or key, read-only will do.
Requests authenticated by the session cookie must also carry the session's CSRF token
(``X-CSRF-Token`` header, which htmx sends from ``hx-headers``, or a ``csrf_token`` form
field) on every state-changing method, and may not come from a foreign origin. Bearer
keys are not sent by browsers on their own, so they need neither.

What the guard asks the database (keys, sessions, rate limits, rows named in the path)
runs on a worker thread, never on the event loop: a database that stops answering holds
up the requests that need it, for ``RAGDESK_DATABASE_TIMEOUT_S`` at most, not the server.
Two kinds of route answer whatever the database does: ``opt={"storeless": True}``
(liveness, static files) asks nothing about who is asking, and ``opt={"store_free": True}``
(readiness, metrics) waits ``STORE_FREE_WAIT_S`` for the answer, then takes a key this
process verified lately (``ApiKeys.verified_lately``) or, on a public route, no one.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from litestar.connection import ASGIConnection, Request
from litestar.handlers.base import BaseRouteHandler

from app.auth.principal import Principal
from app.auth.resources import check_path_rows
from app.auth.scope import NO_ACCESS, Access, set_access
from app.auth.service import Auth
from app.auth.sessions import COOKIE_NAME
from app.errors import AppError, is_store_unavailable

T = TypeVar("T")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
STORE_FREE_WAIT_S = 0.5  # how long readiness and metrics wait to learn who is asking
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
API_PREFIXES = ("/api/", "/v1/", "/metrics")
# What the UI requests on its own, on a timer (``hx-trigger="every …"``): not use of the
# session, or an open tab left alone would never reach the idle timeout. A test keeps this
# in step with the templates.
BACKGROUND_POLLS = re.compile(
    r"/ui/(status|library|documents/\d+/(row|table-row))|/admin/sources/\d+/row"
)


class NotAuthenticated(AppError):
    status = 401
    title = "Sign-in required"

    def __init__(self, detail: str = "sign in, or send an API key as 'Authorization: Bearer'"):
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="ragdesk"'})


class Forbidden(AppError):
    status = 403
    title = "Forbidden"


class TooManyRequests(AppError):
    status = 429
    title = "Too many requests"

    def __init__(self, retry_after_s: float, detail: str = "too many requests; slow down"):
        super().__init__(detail, headers={"Retry-After": str(max(1, int(retry_after_s + 0.999)))})


def auth_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Auth:
    auth: Auth = connection.app.state.services.auth
    return auth


def current_principal(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal | None:
    """Who the guard found (None on public routes for an anonymous visitor)."""
    principal: Principal | None = connection.scope.get("user")
    return principal


def may_load_any_model(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    """Whether the caller may name a model chat does not offer (Principal.may_load_any_model)."""
    principal = current_principal(connection)
    return principal is not None and principal.may_load_any_model


def bearer_token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


Who = tuple[Principal | None, frozenset[int] | None]  # and the collections it may read


def identify(connection: ASGIConnection[Any, Any, Any, Any], auth: Auth) -> Principal | None:
    """The key's principal when an Authorization header is sent (a bad key is no one, even
    with a cookie), else the session's. Asks the database: call it on a worker thread."""
    token = bearer_token(connection)
    if token is not None:
        return key_principal(connection, auth, token)
    cookie = connection.cookies.get(COOKIE_NAME)
    return session_principal(connection, auth, cookie) if cookie else None


def who(connection: ASGIConnection[Any, Any, Any, Any], auth: Auth) -> Who:
    principal = identify(connection, auth)
    return principal, auth.members.readable(principal) if principal is not None else frozenset()


async def who_without_waiting(
    connection: ASGIConnection[Any, Any, Any, Any], auth: Auth, *, public: bool, wait_s: float
) -> Who:
    """``who``, waited for ``wait_s`` (not at all while the database is known to be
    away); past that, or the database failing, a key verified lately stands in,
    else no one on a public route (readiness tells no detail then). A key never verified
    here waits for the database, as on any route."""
    lookup, failed = None, None
    if not store_known_away(connection):
        lookup = _in_thread(who, connection, auth)
        try:
            return await asyncio.wait_for(asyncio.shield(lookup), wait_s)
        except Exception as exc:
            if not isinstance(exc, TimeoutError) and not is_store_unavailable(exc):
                raise
            failed = None if isinstance(exc, TimeoutError) else exc
    token = bearer_token(connection)
    remembered = auth.keys.verified_lately(token) if token else None
    if remembered is not None:
        return remembered, remembered.key_collections if remembered.is_admin else frozenset()
    if public:
        return None, frozenset()
    if failed is not None:
        raise failed
    return await (lookup or _in_thread(who, connection, auth))


def store_known_away(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    """Whether the database watch last found the database unusable (asks nothing)."""
    services = getattr(connection.app.state, "services", None)
    return services is not None and services.database.problem(wait=False) is not None


def key_principal(
    connection: ASGIConnection[Any, Any, Any, Any], auth: Auth, token: str
) -> Principal | None:
    """The key's principal; a wrong or unknown key counts against the client's address,
    which past its limit may not present any key for a while (429)."""
    address = client_address(connection)
    wait = auth.key_failures.retry_after(address)
    if wait > 0:
        raise TooManyRequests(wait, "too many wrong API keys from this address; slow down")
    principal = auth.keys.authenticate(token) if token else None
    if principal is None:
        auth.key_failures.failed(address)
    return principal


def client_address(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """The peer's address (a trusted proxy's forwarded one: uvicorn resolves it)."""
    return connection.client.host if connection.client else "unknown"


def session_principal(
    connection: ASGIConnection[Any, Any, Any, Any], auth: Auth, cookie: str
) -> Principal | None:
    """The session's user. A session past its lifetime or idle timeout is deleted (so the
    cookie is no one from now on); a live one's use is recorded, at most once a minute,
    unless the request is one of the UI's background polls."""
    sessions = auth.sessions
    session = sessions.find(cookie)
    if session is None:
        return None
    if not sessions.live(session):
        sessions.delete(cookie)
        return None
    if sessions.touch_due(session) and not is_background_poll(connection):
        sessions.touch(cookie)
    return Principal(session.user, csrf_token=session.csrf_token)


def is_background_poll(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    method = connection.scope.get("method", "GET")
    return method == "GET" and BACKGROUND_POLLS.fullmatch(connection.url.path) is not None


async def require_principal(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    if handler.opt.get("storeless"):  # liveness, static files: nothing depends on who asks
        connection.scope["user"] = None
        set_access(NO_ACCESS)
        return
    auth = auth_of(connection)
    public = bool(handler.opt.get("public"))
    until = time.monotonic() + STORE_FREE_WAIT_S  # store_free: the guard's whole wait
    if handler.opt.get("store_free"):
        principal, readable = await who_without_waiting(
            connection, auth, public=public, wait_s=STORE_FREE_WAIT_S
        )
    else:
        principal, readable = await asyncio.to_thread(who, connection, auth)
    connection.scope["user"] = principal
    set_access(Access(principal, readable) if principal else NO_ACCESS)
    if public or connection.scope.get("method") == "OPTIONS":
        return  # OPTIONS: Litestar's own Allow/CORS preflight answers, which carry no key
    if principal is None:
        raise NotAuthenticated()
    method = connection.scope.get("method", "GET")
    if principal.via_session and method not in SAFE_METHODS:
        check_same_origin(connection)
        await check_csrf(connection, principal)
    if handler.opt.get("admin") and (not principal.is_admin or principal.restricted):
        raise Forbidden("this needs the admin role (and no read-only or collection-limited key)")
    if handler.opt.get("monitoring") and not principal.may_monitor:
        raise Forbidden("this needs an admin's session or key (not collection-limited)")
    if handler.opt.get("account") and not principal.via_session:
        raise Forbidden("keys and passwords are managed from a signed-in session, not with a key")
    admitting = _in_thread(admit, connection, auth, principal)
    if not handler.opt.get("store_free"):
        await admitting
        return
    # metrics: counted and recorded as any use, but not waited for past the short bound
    if store_known_away(connection):
        return
    try:
        await asyncio.wait_for(asyncio.shield(admitting), max(0.0, until - time.monotonic()))
    except Exception as exc:
        if not isinstance(exc, TimeoutError) and not is_store_unavailable(exc):
            raise


def _in_thread(work: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``work(*args)`` on a worker thread; its outcome may go unheard (a short wait gave
    up on it) without asyncio logging an exception nobody retrieved."""
    future = asyncio.ensure_future(asyncio.to_thread(work, *args))
    future.add_done_callback(lambda done: done.cancelled() or done.exception())
    return future


def admit(connection: ASGIConnection[Any, Any, Any, Any], auth: Auth, principal: Principal) -> None:
    """The rate limit, the rows named in the path, the key's last use: asks the database."""
    method = connection.scope.get("method", "GET")
    if connection.url.path.startswith(API_PREFIXES) or method not in SAFE_METHODS:
        wait = auth.buckets.take(principal.rate_key)
        if wait > 0:
            raise TooManyRequests(wait)
    services = connection.app.state.services
    check_path_rows(
        auth, services.store, principal, connection.path_params, writing=method not in SAFE_METHODS
    )
    if principal.key_id is not None and auth.keys.touch_due(principal.key_id):
        auth.keys.touch(principal.key_id)


def own_origin(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    url = connection.url
    return f"{url.scheme}://{url.netloc}"


def check_same_origin(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    """A browser says where a request comes from: refuse any other site's.

    ``Sec-Fetch-Site`` first (modern browsers always send it; ``none`` is the user typing
    the address); else ``Origin``, which must be ours ("null", sent by sandboxed frames and
    by some browsers under a strict referrer policy, is not). Clients that send neither
    are not browsers acting for someone else: the CSRF token still applies to them."""
    site = connection.headers.get("sec-fetch-site")
    if site is not None:
        if site not in ("same-origin", "none"):
            raise Forbidden("cross-site request refused")
        return
    origin = connection.headers.get("origin")
    if origin is not None and origin != own_origin(connection):
        raise Forbidden("cross-origin request refused")


async def check_csrf(connection: ASGIConnection[Any, Any, Any, Any], principal: Principal) -> None:
    sent = connection.headers.get(CSRF_HEADER)
    content_type = connection.headers.get("content-type", "")
    if sent is None and content_type.startswith("application/x-www-form-urlencoded"):
        # A plain form (sign out without JavaScript): the parsed form is cached for the handler.
        form = await Request[Any, Any, Any](connection.scope, connection.receive).form()
        value = form.get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    expected = principal.csrf_token or ""
    if not sent or not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise Forbidden("missing or wrong CSRF token; reload the page")


def csrf_token(request: object) -> str:
    """For templates: this session's CSRF token ('' when not signed in, or no request)."""
    scope = getattr(request, "scope", None)
    principal = scope.get("user") if isinstance(scope, dict) else None
    return principal.csrf_token or "" if isinstance(principal, Principal) else ""


def may_write(request: object, collection_id: int) -> bool:
    """For templates: whether the signed-in principal may change documents of
    ``collection_id`` (upload, re-ingest, delete); no write control is shown otherwise.
    Worked out once a request (a table has a row a document)."""
    scope = getattr(request, "scope", None)
    principal = scope.get("user") if isinstance(scope, dict) else None
    if not isinstance(principal, Principal):
        return False
    cache = scope.setdefault("ragdesk_writable", {})  # type: ignore[union-attr]
    if "ids" not in cache:
        services = request.app.state.services  # type: ignore[attr-defined]
        cache["ids"] = services.auth.members.writable(principal)
    writable: frozenset[int] | None = cache["ids"]
    return writable is None or collection_id in writable
