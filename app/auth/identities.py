"""Accounts of single sign-on: a provider's user (issuer + subject: never the e-mail
address alone, which a provider may let people change or reuse) is linked to one Ragdesk
user, made at the first sign-in. At each sign-in the provider's group claim sets the role
(RAGDESK_OIDC_GROUP_ROLES) and the user's groups (``Groups.sync_claimed``)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.auth.groups import Groups
from app.auth.principal import Role, User
from app.auth.users import NAME, Users
from app.config.settings import AuthSettings
from retrieval.db import Database
from retrieval.sql import IntegrityError, Session

NO_PASSWORD = ""  # an SSO account has none; Users.authenticate refuses it
LINK_ATTEMPTS = 5  # races lost to another process's writes before a first sign-in gives up


class SignInRefused(Exception):
    """The provider vouched for someone Ragdesk will not let in (a disabled account)."""


@dataclass(frozen=True)
class ClaimRules:
    """How the group claim maps onto roles and collections (from the auth settings)."""

    groups_claim: str = "groups"
    roles: Mapping[str, Role] = field(default_factory=dict)
    # group -> {collection id -> may write}, collection names already resolved
    collections: Mapping[str, Mapping[int, bool]] = field(default_factory=dict)
    # provider group -> the local group (an admin's) its members join
    local_groups: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(
        cls, settings: AuthSettings, collection_id: Callable[[str], int]
    ) -> ClaimRules:
        """The rules of the settings; ``collection_id`` names a collection (made if missing)."""
        collections = {
            group: {collection_id(name): access == "write" for name, access in grants.items()}
            for group, grants in settings.oidc_group_collections.items()
        }
        return cls(
            settings.oidc_groups_claim,
            dict(settings.oidc_group_roles),
            collections,
            dict(settings.oidc_group_map),
        )

    def groups_of(self, claims: Mapping[str, Any]) -> list[str]:
        value = claims.get(self.groups_claim)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return []
        return [g for g in value if isinstance(g, str)][:1000]

    def role_of(self, groups: Sequence[str]) -> Role | None:
        """admin if any group maps to it; staff otherwise; None: no mapping, leave it."""
        if not self.roles:
            return None
        admins = {g.casefold() for g, role in self.roles.items() if role == "admin"}
        # case-insensitive, as group membership is matched
        return "admin" if any(g.casefold() in admins for g in groups) else "staff"


class Identities:
    def __init__(self, db: Database, users: Users, groups: Groups):
        self.db = db
        self.users = users
        self.groups = groups

    def user_of(self, issuer: str, subject: str) -> User | None:
        row = (
            self.db.read()
            .execute(
                "SELECT user_id FROM user_identities WHERE issuer = ? AND subject = ?",
                [issuer, subject],
            )
            .fetchone()
        )
        return self.users.get(int(row[0])) if row else None

    def sign_in(
        self, issuer: str, subject: str, claims: Mapping[str, Any], rules: ClaimRules
    ) -> User:
        """The linked user (made now on a first sign-in), with role and groups from the
        claims. Raises ``SignInRefused`` for a disabled account."""
        groups = rules.groups_of(claims)
        role = rules.role_of(groups)
        now = time.time()
        user, made = self.user_of(issuer, subject), False
        if user is None:
            user, made = self._link(issuer, subject, claims, role or "staff", now)
        if user.disabled:
            raise SignInRefused("this account is disabled")
        if not made:
            with self.db.write() as db:
                db.execute(
                    "UPDATE user_identities SET last_sign_in_at = ?"
                    " WHERE issuer = ? AND subject = ?",
                    [now, issuer, subject],
                )
            if role is not None and role != user.role:
                self.users.set_role(user.id, role)
        self.groups.sync_claimed(user.id, groups, rules.collections, rules.local_groups)
        found = self.users.get(user.id)
        assert found is not None
        return found

    def _link(
        self, issuer: str, subject: str, claims: Mapping[str, Any], role: Role, now: float
    ) -> tuple[User, bool]:
        """Insert-or-get: (the identity's user, whether it was made now). Two first sign-ins
        of one identity at once (two tabs, a double click) both miss it in ``user_of``;
        the one that writes second finds the first one's link here and signs in as that
        user instead of failing on the unique link. The write lock is per process: should
        another process on the same file commit the link or the user name between our
        look and our insert, the unique constraint refuses ours and we look again."""
        base = _name_from(claims, subject)
        for _ in range(LINK_ATTEMPTS):
            try:
                with self.db.write() as db:
                    linked = db.execute(
                        "SELECT user_id FROM user_identities WHERE issuer = ? AND subject = ?",
                        [issuer, subject],
                    ).fetchone()
                    made = None if linked else _insert(db, issuer, subject, base, role, now)
            except IntegrityError:
                continue
            if made is not None:
                return made, True
            user = self.users.get(int(linked[0]))
            if user is not None:  # None: deleted meanwhile, and its link with it
                return user, False
        raise SignInRefused("the account could not be set up; try again")


def _free_name(db: Session, base: str) -> str:
    """``base``, or ``base-2``, ``base-3`` … whichever no user has (names ignore case)."""
    taken = {
        str(r[0]).casefold()
        for r in db.execute(
            "SELECT name FROM users WHERE name LIKE ? ESCAPE '\\'",
            [base.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"],
        )
    }
    return next(n for n in _candidates(base) if n.casefold() not in taken)


def _insert(db: Session, issuer: str, subject: str, base: str, role: Role, now: float) -> User:
    """A new SSO user, named ``base`` or the next free variant, linked to the identity."""
    name = _free_name(db, base)
    cursor = db.execute(
        "INSERT INTO users (name, role, password_hash, created_at) VALUES (?, ?, ?, ?)",
        [name, role, NO_PASSWORD, now],
    )
    user_id = int(cursor.lastrowid or 0)
    db.execute(
        "INSERT INTO user_identities (issuer, subject, user_id, created_at,"
        " last_sign_in_at) VALUES (?, ?, ?, ?, ?)",
        [issuer, subject, user_id, now, now],
    )
    return User(user_id, name, role)


def _name_from(claims: Mapping[str, Any], subject: str) -> str:
    """A readable user name: preferred_username, else the e-mail address, else the subject
    (only a label: the link is issuer + subject)."""
    for claim in ("preferred_username", "email"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            name = _cleaned(value)
            if name:
                return name
    return _cleaned(f"sso-{subject}") or "sso-user"


def _cleaned(value: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._@-]+", "-", value.strip())
    name = name.lstrip("._@-")[:56]
    return name if NAME.fullmatch(name) else ""


def _candidates(base: str) -> Iterator[str]:
    yield base
    for n in range(2, 1_000_000):
        yield f"{base}-{n}"
