"""The ``auth`` section: accounts and access."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from app.config.settings.section import Section

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")  # the names app/auth/users.py allows


class AuthSettings(Section):
    """Accounts and access: sessions, password hashing, throttles, rate limits, single
    sign-on (app/auth)."""

    session_lifetime_s: float = Field(
        43200.0, ge=60, le=90 * 86400, description="How long a browser session lasts."
    )
    session_idle_s: float = Field(
        7200.0,
        ge=0,
        le=90 * 86400,
        description="A browser session unused this long ends (the UI's own background polls "
        "do not count as use); 0 = no idle timeout, only session_lifetime_s.",
    )
    cookie_secure: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Mark the session cookie Secure: 'auto' when the request came over HTTPS.",
    )
    password_time_cost: int = Field(3, ge=1, le=20, description="argon2id passes per hash.")
    password_memory_kib: int = Field(
        65536, ge=8, le=4 * 1024 * 1024, description="argon2id memory per hash, in KiB."
    )
    password_parallelism: int = Field(4, ge=1, le=16, description="argon2id lanes.")
    login_max_failures_per_user: int = Field(
        5, ge=1, description="Failed logins for one user name within the window; then 429."
    )
    login_max_failures_per_address: int = Field(
        20, ge=1, description="Failed logins from one client address within the window."
    )
    login_failure_window_s: float = Field(
        900.0, gt=0, description="Window in which failed logins and API keys are counted."
    )
    key_max_failures_per_address: int = Field(
        30,
        ge=1,
        description="Wrong or unknown API keys from one client address within "
        "login_failure_window_s; then every key from it gets 429 until the window moves on.",
    )
    rate_limit_per_minute: float = Field(
        600.0, ge=0, description="Requests a minute per API key or user (0 = no limit)."
    )
    rate_limit_burst: int = Field(
        120, ge=1, description="Requests a key or user may make at once before the rate applies."
    )
    local_login: bool = Field(
        True,
        description="Sign-in with a local user name and password; false leaves single sign-on "
        "(oidc_issuer) as the only way in for browsers (API keys still work).",
    )
    oidc_logins_per_minute: float = Field(
        30.0,
        ge=0,
        description="Single sign-ons one client address may start a minute (/sso/login, "
        "bursts of as many); beyond it 429 with Retry-After (0 = no limit).",
    )
    oidc_issuer: str = Field(
        "",
        description="OpenID Connect single sign-on: the provider's issuer URL (its discovery "
        "document is <issuer>/.well-known/openid-configuration); empty = off. HTTPS, except "
        "on a loopback address.",
    )
    oidc_client_id: str = Field("", description="The client id registered at the provider.")
    oidc_client_secret: SecretStr = Field(
        SecretStr(""),
        description="The client secret; empty = a public client (PKCE only).",
    )
    oidc_provider_name: str = Field(
        "single sign-on",
        max_length=60,
        description="Shown on the sign-in page as 'Sign in with <name>'.",
    )
    oidc_scopes: str = Field(
        "openid profile email", description="Scopes asked for (must include openid)."
    )
    oidc_groups_claim: str = Field(
        "groups", description="The ID-token claim that lists the user's groups."
    )
    oidc_group_roles: dict[str, Literal["admin", "staff"]] = Field(
        default_factory=dict,
        description='Provider group -> role, as JSON ({"ragdesk-admins": "admin"}); when set, '
        "each sign-in sets the role from the groups (admin if any group says so).",
    )
    oidc_group_collections: dict[str, dict[str, Literal["read", "write"]]] = Field(
        default_factory=dict,
        description="Provider group -> {collection: read|write}, as JSON; the Ragdesk group of "
        "that name gets these collections, and members join it at sign-in.",
    )
    oidc_group_map: dict[str, str] = Field(
        default_factory=dict,
        description='Provider group -> a Ragdesk group an admin made, as JSON ({"eng-all": '
        '"engineering"}); members join it at sign-in. A provider group named neither here '
        "nor in oidc_group_collections joins nothing, whatever local group shares its name.",
    )

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_issuer)

    @model_validator(mode="after")
    def _sign_in_possible(self) -> AuthSettings:
        if self.oidc_issuer:
            if not self.oidc_client_id:
                raise ValueError("oidc_issuer needs oidc_client_id")
            if "openid" not in self.oidc_scopes.split():
                raise ValueError("oidc_scopes must include openid")
            url = urlsplit(self.oidc_issuer)
            if url.scheme != "https" and not (
                url.scheme == "http" and url.hostname in LOOPBACK_HOSTS
            ):
                raise ValueError("oidc_issuer must be an https URL (http only on loopback)")
        elif not self.local_login:
            raise ValueError("local_login=false needs single sign-on (oidc_issuer)")
        named = (
            *self.oidc_group_roles,
            *self.oidc_group_collections,
            *self.oidc_group_map,
            *self.oidc_group_map.values(),
        )
        odd = [g for g in named if not GROUP.fullmatch(g)]
        if odd:  # such a claim could never join its group: refuse rather than grant nothing
            raise ValueError(
                f"group names must be letters, digits and . _ @ - (up to 64): {odd}; "
                "for a provider that sends paths (Keycloak's '/eng'), turn off full group paths"
            )
        return self
