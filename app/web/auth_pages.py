"""Sign in and sign out: server-rendered pages, plain forms (htmx is not needed)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect, Template
from msgspec import Struct

from app.auth.guards import (
    Forbidden,
    TooManyRequests,
    auth_of,
    check_same_origin,
    client_address,
    current_principal,
)
from app.auth.redirects import safe_next
from app.auth.sessions import COOKIE_NAME
from app.config.settings import Settings

MAX_FIELD = 1024


class LoginForm(Struct):
    name: str = ""
    password: str = ""
    next: str = "/"


def session_cookie(request: Request[Any, Any, Any], value: str, max_age: int) -> Cookie:
    settings: Settings = request.app.state.settings
    secure = settings.auth.cookie_secure == "always" or (
        settings.auth.cookie_secure == "auto" and request.url.scheme == "https"
    )
    return Cookie(
        key=COOKIE_NAME,
        value=value,
        max_age=max_age,
        path="/",
        httponly=True,
        secure=secure,
        samesite="lax",
    )


class AuthPages(Controller):
    @get("/login", opt={"public": True})
    async def login_page(self, request: Request[Any, Any, Any], next: str = "/") -> Response[Any]:
        if current_principal(request) is not None:
            return Redirect(safe_next(next))
        return Template("login.html", context={"next": safe_next(next), "error": None})

    @post("/login", opt={"public": True}, status_code=303)
    async def login(
        self,
        request: Request[Any, Any, Any],
        data: Annotated[LoginForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Response[Any]:
        check_same_origin(request)  # no session yet to hold a token: the origin must match
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
                "next": safe_next(data.next),
                "error": "Wrong user name or password.",
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
        await asyncio.to_thread(auth_of(request).sessions.delete, cookie)
        expired = session_cookie(request, "", 0)
        if request.headers.get("hx-request"):
            return Response(
                "", status_code=200, headers={"HX-Redirect": "/login"}, cookies=[expired]
            )
        return Redirect("/login", status_code=303, cookies=[expired])
