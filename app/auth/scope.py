"""The principal of the request being served, for code far from the route handler.

The guard sets it on every request (None for an anonymous visitor of a public route);
``asyncio.to_thread`` and the response's streaming tasks copy it, so a search run for an
answer stream or a listing built in a worker thread sees the same principal. Outside a
request (the CLI, library use, unit tests of services) nothing is set and nothing is
narrowed: ``ScopedRetriever`` and ``readable_now`` then mean "everything".
"""

from __future__ import annotations

from collections.abc import Collection
from contextvars import ContextVar
from dataclasses import dataclass

from app.auth.principal import Principal

_UNSET = object()


@dataclass(frozen=True)
class Access:
    principal: Principal | None
    readable: frozenset[int] | None  # None: every collection (an unscoped admin)

    def narrow(self, collection_ids: Collection[int] | None) -> frozenset[int] | None:
        """``collection_ids`` (None: all) limited to what may be read."""
        if self.readable is None:
            return None if collection_ids is None else frozenset(collection_ids)
        if collection_ids is None:
            return self.readable
        return self.readable & frozenset(collection_ids)


NO_ACCESS = Access(None, frozenset())
_current: ContextVar[Access | None] = ContextVar("ragdesk_access", default=None)


def set_access(access: Access) -> None:
    _current.set(access)


def current_access() -> Access | None:
    """This request's access (None outside any request)."""
    return _current.get()


def readable_now(collection_ids: Collection[int] | None = None) -> frozenset[int] | None:
    """What the current request may read of ``collection_ids`` (None: no limit)."""
    access = _current.get()
    if access is None:
        return None if collection_ids is None else frozenset(collection_ids)
    return access.narrow(collection_ids)
