"""Who is making a request, and what they may read and write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["admin", "staff"]
ROLES: tuple[Role, ...] = ("admin", "staff")


@dataclass(frozen=True)
class User:
    id: int
    name: str
    role: Role
    disabled: bool = False

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True)
class Principal:
    """A signed-in user (``csrf_token`` set) or an API key (``key_id`` set).

    ``collections`` limits what may be read; None means every collection the user may
    read (all of them for an admin). ``read_only`` keys cannot change documents.
    """

    user: User
    csrf_token: str | None = None
    key_id: int | None = None
    read_only: bool = False
    key_collections: frozenset[int] | None = None

    @property
    def is_admin(self) -> bool:
        return self.user.is_admin

    @property
    def via_session(self) -> bool:
        return self.key_id is None

    @property
    def restricted(self) -> bool:
        """A read-only or collection-limited key: it may not administer, manage keys or
        see the user's stored conversations (whose answers cite any of their collections)."""
        return self.key_id is not None and (self.read_only or self.key_collections is not None)

    @property
    def may_load_any_model(self) -> bool:
        """An admin's session or full key may name a model chat does not offer (loading
        one costs gigabytes); a restricted key may not, as it may not administer."""
        return self.is_admin and not self.restricted

    @property
    def may_monitor(self) -> bool:
        """Metrics and health detail: an admin's session or key; a read-only key is enough
        (Prometheus needs nothing more), a collection-limited one is not."""
        return self.is_admin and self.key_collections is None

    @property
    def rate_key(self) -> str:
        return f"key:{self.key_id}" if self.key_id is not None else f"user:{self.user.id}"
