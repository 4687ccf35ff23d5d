"""Everything accounts need, built once per app from Settings (``services.auth``)."""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass

from app.auth.audit import Audit
from app.auth.groups import Groups
from app.auth.identities import Identities
from app.auth.keys import ApiKeys
from app.auth.members import Members
from app.auth.oidc import OidcClient, PendingLogins
from app.auth.ownership import Ownership
from app.auth.passwords import Passwords, generate_password
from app.auth.ratelimit import (
    FailureLimiter,
    KeyFailures,
    LoginLimiter,
    LoginThrottle,
    RequestLimiter,
    TokenBuckets,
)
from app.auth.sessions import Sessions
from app.auth.users import Users
from app.config.settings import Settings
from retrieval.db import Database

log = logging.getLogger(__name__)
FIRST_ADMIN = "admin"


@dataclass
class Auth:
    users: Users
    sessions: Sessions
    keys: ApiKeys
    members: Members
    ownership: Ownership
    audit: Audit
    buckets: RequestLimiter  # per key or user
    logins: LoginLimiter
    key_failures: FailureLimiter
    groups: Groups
    identities: Identities
    sso_logins: PendingLogins
    sso_starts: RequestLimiter  # per client address: each start stores a sign-in under way
    oidc: OidcClient | None  # None: single sign-on is off


def passwords_for(settings: Settings) -> Passwords:
    auth = settings.auth
    return Passwords(
        time_cost=auth.password_time_cost,
        memory_kib=auth.password_memory_kib,
        parallelism=auth.password_parallelism,
    )


@dataclass
class Limits:
    buckets: RequestLimiter
    logins: LoginLimiter
    key_failures: FailureLimiter
    sso_starts: RequestLimiter


def open_limits(settings: Settings, db: Database) -> Limits:
    """The rate limits and throttles: in memory on SQLite (one process owns its data
    directory); in the database on PostgreSQL, where every front counts against one
    budget (app/auth/shared_limits.py)."""
    auth = settings.auth
    sso_burst = max(1, math.ceil(auth.oidc_logins_per_minute))
    if db.dialect == "postgresql":
        from app.auth.shared_limits import (  # psycopg: imported only when used
            SharedKeyFailures,
            SharedLoginThrottle,
            SharedTokenBuckets,
        )

        return Limits(
            buckets=SharedTokenBuckets(
                db, "requests", auth.rate_limit_per_minute, auth.rate_limit_burst
            ),
            logins=SharedLoginThrottle(
                db,
                per_user=auth.login_max_failures_per_user,
                per_address=auth.login_max_failures_per_address,
                window_s=auth.login_failure_window_s,
            ),
            key_failures=SharedKeyFailures(
                db, auth.key_max_failures_per_address, auth.login_failure_window_s
            ),
            sso_starts=SharedTokenBuckets(db, "sso_starts", auth.oidc_logins_per_minute, sso_burst),
        )
    return Limits(
        buckets=TokenBuckets(auth.rate_limit_per_minute, auth.rate_limit_burst),
        logins=LoginThrottle(
            per_user=auth.login_max_failures_per_user,
            per_address=auth.login_max_failures_per_address,
            window_s=auth.login_failure_window_s,
        ),
        key_failures=KeyFailures(auth.key_max_failures_per_address, auth.login_failure_window_s),
        sso_starts=TokenBuckets(auth.oidc_logins_per_minute, sso_burst),
    )


def open_auth(settings: Settings, db: Database) -> Auth:
    auth = settings.auth
    users, groups = Users(db, passwords_for(settings)), Groups(db)
    limits = open_limits(settings, db)
    return Auth(
        users=users,
        sessions=Sessions(db, auth.session_lifetime_s, auth.session_idle_s),
        keys=ApiKeys(db),
        members=Members(db),
        ownership=Ownership(db),
        audit=Audit(db),
        buckets=limits.buckets,
        logins=limits.logins,
        key_failures=limits.key_failures,
        groups=groups,
        identities=Identities(db, users, groups),
        sso_logins=PendingLogins(db),
        sso_starts=limits.sso_starts,
        oidc=OidcClient(auth) if auth.oidc_enabled else None,
    )


def ensure_first_admin(auth: Auth) -> str | None:
    """With no user at all, create ``admin`` with a random password and print it once
    (stdout, not the log: log files are kept and shipped). Returns the password."""
    if auth.users.count() > 0:
        return None
    password = generate_password()
    auth.users.create(FIRST_ADMIN, password, role="admin")
    banner = "=" * 72
    print(
        f"{banner}\nFirst start: created the administrator account.\n"
        f"  user: {FIRST_ADMIN}\n  password: {password}\n"
        "This password is shown only once. Sign in and keep it safe; more users:\n"
        f"  ragdesk users create NAME [--admin]\n{banner}",
        file=sys.stdout,
        flush=True,
    )
    log.warning("created the first administrator account %r", FIRST_ADMIN)
    return password
