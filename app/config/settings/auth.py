"""The ``auth`` section: accounts and access."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.config.settings.section import Section


class AuthSettings(Section):
    """Accounts and access: sessions, password hashing, throttles, rate limits (app/auth)."""

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
