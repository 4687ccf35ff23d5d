"""Sign in and sign out: server-rendered pages, plain forms (htmx is not needed)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, MediaType, Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect, Template
from markupsafe import escape
from msgspec import Struct

from app.auth.guards import (
    Forbidden,
    TooManyRequests,
    auth_of,
    check_same_origin,
    client_address,
    current_principal,
    own_origin,
)
from app.auth.redirects import safe_next
from app.auth.sessions import COOKIE_NAME
from app.config.settings import Settings

MAX_FIELD = 1024


class LoginForm(Struct):
    name: str = ""
    password: str = ""
    next: str = "/"


def session_cookie(
    request: Request[Any, Any, Any],
    value: str,
    max_age: int,
    *,
    key: str = COOKIE_NAME,
    path: str = "/",
) -> Cookie:
    settings: Settings = request.app.state.settings
    secure = settings.auth.cookie_secure == "always" or (
        settings.auth.cookie_secure == "auto" and request.url.scheme == "https"
    )
    return Cookie(
        key=key,
        value=value,
        max_age=max_age,
        path=path,
        httponly=True,
        secure=secure,
        samesite="lax",
    )


def login_context(
    request: Request[Any, Any, Any], next: str, *, error: str | None = None
) -> dict[str, Any]:
    """What login.html shows: the form (unless RAGDESK_LOCAL_LOGIN=false), the error, and
    the single sign-on link (``sso``: its label and URL, or None when it is off)."""
    auth = request.app.state.settings.auth
    target = safe_next(next)
    sso = None
    if auth.oidc_enabled:
        query = "" if target == "/" else "?" + urlencode({"next": target})
        sso = {"name": auth.oidc_provider_name, "url": f"/sso/login{query}"}
    return {"next": target, "error": error, "sso": sso, "local_login": auth.local_login}


class AuthPages(Controller):
    @get("/login", opt={"public": True})
    async def login_page(self, request: Request[Any, Any, Any], next: str = "/") -> Response[Any]:
        if current_principal(request) is not None:
            return Redirect(safe_next(next))
        context = login_context(request, next)
        if not context["local_login"]:  # single sign-on is the only way in: go there now
            return Redirect(context["sso"]["url"], status_code=303)
        return Template("login.html", context=context)

    @post("/login", opt={"public": True}, status_code=303)
    async def login(
        self,
        request: Request[Any, Any, Any],
        data: Annotated[LoginForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Response[Any]:
        check_same_origin(request)  # no session yet to hold a token: the origin must match
        if not request.app.state.settings.auth.local_login:
            raise Forbidden("sign-in with a password is turned off; use single sign-on")
        auth = auth_of(request)
        name, password = data.name.strip()[:MAX_FIELD], data.password[:MAX_FIELD]
        address = client_address(request)
        wait = auth.logins.begin(name, address)  # counted now: parallel guesses add up
        if wait > 0:
            raise TooManyRequests(wait, "too many failed sign-ins; try again later")
        user = await asyncio.to_thread(auth.users.authenticate, name, password) if name else None
        if user is None:
            await asyncio.sleep(auth.logins.delay(name, address))
            context = {
                **login_context(request, data.next, error="Wrong user name or password."),
                "name": name[:64],  # kept in the form: only the password is typed again
            }
            return Template("login.html", context=context, status_code=401)
        auth.logins.succeeded(name, address)
        # A new session id and CSRF token; the session the browser came with (if any) ends,
        # so a cookie planted or kept from before sign-in is worth nothing afterwards.
        previous = request.cookies.get(COOKIE_NAME)
        token, _ = await asyncio.to_thread(auth.sessions.create, user, replacing=previous)
        lifetime = int(auth.sessions.lifetime_s)
        return Redirect(
            safe_next(data.next),
            status_code=303,
            cookies=[session_cookie(request, token, lifetime)],
        )

    @post("/logout", status_code=303)
    async def logout(self, request: Request[Any, Any, Any]) -> Response[Any]:
        principal = current_principal(request)
        if principal is None or not principal.via_session:
            raise Forbidden("only a browser session can sign out")
        cookie = request.cookies.get(COOKIE_NAME, "")
        auth = auth_of(request)
        id_token = await asyncio.to_thread(auth.sessions.id_token, cookie)
        await asyncio.to_thread(auth.sessions.delete, cookie)
        expired = session_cookie(request, "", 0)
        after = "/login"
        if id_token and auth.oidc is not None:  # signed in by the provider: end that too
            after = await auth.oidc.logout_url(id_token, own_origin(request) + "/login") or after
        if request.headers.get("hx-request"):
            return Response("", status_code=200, headers={"HX-Redirect": after}, cookies=[expired])
        if after != "/login":
            return _leave_for(after, expired)
        return Redirect("/login", status_code=303, cookies=[expired])


def _leave_for(url: str, expired: Cookie) -> Response[Any]:
    """A page that moves on to the provider's logout. Not a redirect: the sign-out form's
    redirects are held to CSP ``form-action 'self'``, which a refresh is not."""
    target = escape(url)
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0;url={target}"><title>Signing out</title></head>'
        f'<body><p>Signed out of Ragdesk. <a href="{target}">Continue</a></p></body></html>'
    )
    return Response(body, status_code=200, media_type=MediaType.HTML, cookies=[expired])
