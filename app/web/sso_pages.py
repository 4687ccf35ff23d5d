"""Single sign-on (OpenID Connect): ``/sso/login`` sends the browser to the provider,
``/sso/callback`` signs it in. Registered only when RAGDESK_OIDC_ISSUER is set
(``sso_routes``); sign-out is ``/logout`` (``auth_pages``), which also ends the session at
the provider when it offers that."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from litestar import Controller, Request, Response, get
from litestar.datastructures import Cookie
from litestar.params import Parameter
from litestar.response import Redirect, Template
from litestar.types import ControllerRouterHandler

from app.auth.guards import TooManyRequests, auth_of, client_address, own_origin
from app.auth.identities import ClaimRules, SignInRefused
from app.auth.oidc import LOGIN_TTL_S, OidcClient, SsoError
from app.auth.redirects import safe_next
from app.auth.sessions import COOKIE_NAME
from app.config.settings import Settings
from app.state import Services
from app.web.auth_pages import login_context, session_cookie

log = logging.getLogger(__name__)
SSO_COOKIE = "ragdesk_sso"  # ties a sign-in under way to the browser that started it
CALLBACK = "/sso/callback"


def sso_routes(settings: Settings) -> list[ControllerRouterHandler]:
    """The single sign-on routes, when it is configured (public routes exist only then)."""
    return [SsoPages] if settings.auth.oidc_enabled else []


def _browser_cookie(request: Request[Any, Any, Any], value: str, max_age: int) -> Cookie:
    return session_cookie(request, value, max_age, key=SSO_COOKIE, path="/sso/")


def _oidc(request: Request[Any, Any, Any]) -> OidcClient:
    oidc = auth_of(request).oidc
    assert oidc is not None, "the SSO routes are registered only with single sign-on on"
    return oidc


class SsoPages(Controller):
    path = "/sso"

    @get("/login", opt={"public": True})
    async def sso_login(self, request: Request[Any, Any, Any], next: str = "/") -> Response[Any]:
        """To the provider, with state, nonce and the PKCE challenge (S256). Public, and each
        start stores a sign-in under way: throttled per client address."""
        wait = auth_of(request).sso_starts.take(client_address(request))
        if wait > 0:
            raise TooManyRequests(wait, "too many sign-ins started from here; try again shortly")
        try:
            url, state, pending = await _oidc(request).authorization(
                own_origin(request) + CALLBACK, safe_next(next)
            )
        except SsoError as exc:
            return _failed(request, str(exc), 503)
        browser = await asyncio.to_thread(auth_of(request).sso_logins.add, state, pending)
        return Redirect(
            url, status_code=302, cookies=[_browser_cookie(request, browser, int(LOGIN_TTL_S))]
        )

    @get("/callback", opt={"public": True})
    async def sso_callback(
        self,
        request: Request[Any, Any, Any],
        code: str = "",
        sign_in: Annotated[str, Parameter(query="state")] = "",  # ``state`` is Litestar's
        error: str = "",
    ) -> Response[Any]:
        """Back from the provider: the state must be one this browser started, unused."""
        auth = auth_of(request)
        browser = request.cookies.get(SSO_COOKIE, "")
        pending = await asyncio.to_thread(auth.sso_logins.take, sign_in, browser)
        if pending is None:
            return _failed(request, "This sign-in has expired or was already used.")
        if error or not code:
            log.info("single sign-on: the provider answered %r", error[:100])
            return _failed(request, "The sign-in provider did not sign you in.")
        try:
            identity = await _oidc(request).finish(code, pending)
        except SsoError as exc:
            return _failed(request, f"Single sign-on failed: {exc}.")
        settings: Settings = request.app.state.settings
        services: Services = request.app.state.services
        rules = await asyncio.to_thread(
            ClaimRules.from_settings, settings.auth, services.store.ensure_collection
        )
        try:
            user = await asyncio.to_thread(
                auth.identities.sign_in, identity.issuer, identity.subject, identity.claims, rules
            )
        except SignInRefused as exc:
            return _failed(request, f"Single sign-on failed: {exc}.", 403)
        token, _ = await asyncio.to_thread(
            auth.sessions.create,
            user,
            replacing=request.cookies.get(COOKIE_NAME),
            id_token=identity.id_token,
        )
        cookies = [
            session_cookie(request, token, int(auth.sessions.lifetime_s)),
            _browser_cookie(request, "", 0),
        ]
        return Redirect(safe_next(pending.next), status_code=303, cookies=cookies)


def _failed(request: Request[Any, Any, Any], message: str, status: int = 401) -> Response[Any]:
    context = login_context(request, "/", error=message)
    return Template(
        "login.html",
        context=context,
        status_code=status,
        cookies=[_browser_cookie(request, "", 0)],
    )
