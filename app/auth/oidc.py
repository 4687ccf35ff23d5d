"""OpenID Connect single sign-on (authorization code flow with PKCE), through Authlib.

Authlib does the protocol: discovery, the authorization URL (state, nonce, S256 code
challenge), the code exchange, and the ID token's signature (the provider's JWKS, fetched
again when a token names a key id it does not hold: key rotation) and claims. What is
ours: the claims that must be there and their values (issuer, audience, expiry, nonce),
and keeping each sign-in under way server-side (``sso_logins``), tied to the browser that
started it and usable once, so a callback URL replayed, or planted in another browser,
signs nobody in.
"""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass
from typing import Any, cast

from authlib.integrations.base_client import BaseApp
from authlib.integrations.base_client.async_app import AsyncOAuth2Mixin
from authlib.integrations.base_client.async_openid import AsyncOpenIDMixin
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc.errors import BadSignatureError, JoseError
from joserfc.jws import extract_compact

from app.auth.passwords import new_token, token_hash
from app.config.settings import AuthSettings
from retrieval.db import Database

log = logging.getLogger(__name__)
LOGIN_TTL_S = 600.0  # a sign-in must come back from the provider within this
# Sign-ins under way kept at most; past it the oldest go. Starting one is throttled per
# client address (``oidc_logins_per_minute``), but many addresses could still start them
# faster than LOGIN_TTL_S expires them.
MAX_PENDING_LOGINS = 10_000
HTTP_TIMEOUT_S = 10.0
CLOCK_LEEWAY_S = 60  # skew allowed on exp/iat/nbf


class SsoError(Exception):
    """A sign-in that failed; the message is safe to show (no token, no secret)."""


@dataclass(frozen=True)
class Pending:
    nonce: str
    code_verifier: str
    redirect_uri: str
    next: str


@dataclass(frozen=True)
class Identity:
    issuer: str
    subject: str
    claims: dict[str, Any]
    id_token: str


class _Provider(AsyncOAuth2Mixin, AsyncOpenIDMixin, BaseApp):  # type: ignore[misc]
    """Authlib's framework-neutral async OpenID client (Starlette's, without its session)."""

    client_cls = AsyncOAuth2Client


class OidcClient:
    def __init__(self, settings: AuthSettings):
        self.issuer = settings.oidc_issuer.rstrip("/")
        self.client_id = settings.oidc_client_id
        secret = settings.oidc_client_secret.get_secret_value()
        self._provider = _Provider(
            framework=None,
            name="oidc",
            client_id=self.client_id,
            client_secret=secret or None,
            server_metadata_url=f"{self.issuer}/.well-known/openid-configuration",
            client_kwargs={
                "scope": settings.oidc_scopes,
                "code_challenge_method": "S256",
                "token_endpoint_auth_method": "client_secret_basic" if secret else "none",
                "timeout": HTTP_TIMEOUT_S,
            },
        )

    async def metadata(self) -> dict[str, Any]:
        """The provider's discovery document (fetched once), whose issuer must be ours."""
        try:
            metadata = cast(dict[str, Any], await self._provider.load_server_metadata())
        except Exception as exc:
            self._provider.server_metadata.pop("_loaded_at", None)
            log.warning("single sign-on: discovery at %s failed: %s", self.issuer, exc)
            raise SsoError("the sign-in provider cannot be reached") from None
        if str(metadata.get("issuer", "")).rstrip("/") != self.issuer:
            self._provider.server_metadata.pop("_loaded_at", None)
            log.warning("single sign-on: discovery names issuer %r", metadata.get("issuer"))
            raise SsoError("the sign-in provider is misconfigured")
        return metadata

    async def authorization(self, redirect_uri: str, next: str) -> tuple[str, str, Pending]:
        """(URL to send the browser to, state, what the callback needs)."""
        await self.metadata()
        found = await self._provider.create_authorization_url(redirect_uri)
        pending = Pending(found["nonce"], found["code_verifier"], redirect_uri, next)
        return str(found["url"]), str(found["state"]), pending

    async def finish(self, code: str, pending: Pending) -> Identity:
        """Exchange the code (with the PKCE verifier) and validate the ID token."""
        metadata = await self.metadata()
        try:
            token = await self._provider.fetch_access_token(
                redirect_uri=pending.redirect_uri, code=code, code_verifier=pending.code_verifier
            )
        except Exception as exc:  # OAuthError, HTTP errors, a provider that is down
            log.warning("single sign-on: the code exchange failed: %s", exc)
            raise SsoError("the sign-in provider did not accept the sign-in") from None
        if "id_token" not in token:
            raise SsoError("the sign-in provider sent no ID token")
        options = {
            "iss": {"essential": True, "value": metadata["issuer"]},
            "aud": {"essential": True, "value": self.client_id},
            "sub": {"essential": True},
            "exp": {"essential": True},
            "iat": {"essential": True},
            "nonce": {"essential": True, "value": pending.nonce},
        }
        try:
            claims = await self._checked_claims(token, pending.nonce, options)
        except JoseError as exc:
            # Forged (wrong key or signature), for another client, expired, wrong nonce.
            log.warning("single sign-on: ID token refused: %r", exc)
            raise SsoError("the sign-in could not be verified") from None
        except Exception:
            log.exception("single sign-on: the ID token could not be checked")
            raise SsoError("the sign-in could not be verified") from None
        return Identity(
            issuer=str(claims["iss"]),
            subject=str(claims["sub"]),
            claims=dict(claims),
            id_token=str(token["id_token"]),
        )

    async def _checked_claims(
        self, token: dict[str, Any], nonce: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        """The ID token's claims, checked. Authlib fetches the JWKS again for a key id it
        has not seen (rotation); a token without a key id that fails with the keys held
        gets one fresh fetch too, so a rotation never locks such a provider's users out."""

        async def parse() -> dict[str, Any]:
            claims = await self._provider.parse_id_token(
                token, nonce=nonce, claims_options=options, leeway=CLOCK_LEEWAY_S
            )
            return dict(claims)

        try:
            return await parse()
        except BadSignatureError:
            if "kid" in extract_compact(str(token["id_token"]).encode()).headers():
                raise  # its key was found (fetched again if new): the signature is wrong
            await self._provider.fetch_jwk_set(force=True)
            return await parse()

    async def logout_url(self, id_token: str, post_logout_redirect_uri: str) -> str | None:
        """RP-initiated logout at the provider's end_session_endpoint (None: it has none)."""
        try:
            metadata = await self.metadata()
        except SsoError:
            return None
        if not metadata.get("end_session_endpoint"):
            return None
        found = await self._provider.create_logout_url(
            post_logout_redirect_uri=post_logout_redirect_uri,
            id_token_hint=id_token,
            client_id=self.client_id,
        )
        return str(found["url"])


class PendingLogins:
    """Sign-ins under way: by the SHA-256 of their state, tied to a random browser
    cookie (also stored hashed), taken once; at most ``max_pending`` of them."""

    def __init__(self, db: Database, max_pending: int = MAX_PENDING_LOGINS):
        self.db = db
        self.max_pending = max_pending

    def add(self, state: str, pending: Pending) -> str:
        """Store a sign-in; returns the browser's cookie value that must come back with it."""
        browser, now = new_token(), time.time()
        with self.db.write() as db:
            db.execute("DELETE FROM sso_logins WHERE created_at < ?", [now - LOGIN_TTL_S])
            # Full (a flood from many addresses): the oldest make room. A flood can then
            # crowd out sign-ins under way (they start again), but never fill the disk.
            crowded = db.execute(
                "DELETE FROM sso_logins WHERE state_hash NOT IN (SELECT state_hash"
                " FROM sso_logins ORDER BY created_at DESC, state_hash DESC LIMIT ?)",
                [self.max_pending - 1],
            ).rowcount
            db.execute(
                "INSERT INTO sso_logins (state_hash, browser_hash, nonce, code_verifier,"
                " redirect_uri, next, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    token_hash(state),
                    token_hash(browser),
                    pending.nonce,
                    pending.code_verifier,
                    pending.redirect_uri,
                    pending.next,
                    now,
                ],
            )
        if crowded:
            log.warning("single sign-on: %d sign-ins under way dropped to make room", crowded)
        return browser

    def take(self, state: str, browser: str) -> Pending | None:
        """The sign-in of ``state``, removed now whatever the outcome; None when unknown,
        used before, too old, or started in another browser."""
        if not state or len(state) > 256:
            return None
        with self.db.write() as db:
            row = db.execute(
                "DELETE FROM sso_logins WHERE state_hash = ? RETURNING browser_hash, nonce,"
                " code_verifier, redirect_uri, next, created_at",
                [token_hash(state)],
            ).fetchone()
        if row is None:
            return None
        browser_hash, nonce, code_verifier, redirect_uri, next_path, created_at = row
        fresh = time.time() - float(created_at) <= LOGIN_TTL_S
        same_browser = hmac.compare_digest(str(browser_hash), token_hash(browser[:256]))
        if not (fresh and same_browser):
            return None
        return Pending(str(nonce), str(code_verifier), str(redirect_uri), str(next_path))
