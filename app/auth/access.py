"""What route handlers call to keep people to their own rows: conversations they own,
documents in collections they may read, uploads where they may write, the answer audit.
They read the request's principal from ``app.auth.scope`` (set by the guard)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from app.auth.principal import Principal
from app.auth.resources import WriteForbidden
from app.auth.scope import current_access
from app.auth.service import Auth
from app.chat.records import Citation, Message
from app.errors import NotFound
from retrieval.records import CollectionRecord, DocumentRecord

log = logging.getLogger(__name__)


def _principal() -> Principal | None:
    access = current_access()
    return access.principal if access is not None else None


def require_conversation(auth: Auth, conversation_id: int | None) -> None:
    """A conversation named in a form or body must be the principal's (404 otherwise)."""
    principal = _principal()
    if (
        conversation_id is not None
        and principal is not None
        and not auth.ownership.may_see(principal, conversation_id)
    ):
        raise NotFound("no such conversation")


def require_message(auth: Auth, message_id: int) -> None:
    """A message named in a query string must be in a conversation the principal may see."""
    principal = _principal()
    if principal is None:
        return
    owner = auth.ownership.message_conversation(message_id)
    if owner is None or not auth.ownership.may_see(principal, owner):
        raise NotFound("no such answer")


def current_user_id() -> int | None:
    """The caller's user id (the owner of conversations it starts); None outside a request."""
    principal = _principal()
    return None if principal is None else principal.user.id


def visible_conversation_ids(auth: Auth) -> frozenset[int] | None:
    """The conversations the caller may see, for filtering a listing in SQL (before its
    limit); None outside a request."""
    principal = _principal()
    return None if principal is None else auth.ownership.visible_ids(principal)


def readable_documents(documents: Iterable[DocumentRecord]) -> list[DocumentRecord]:
    access = current_access()
    if access is None or access.readable is None:
        return list(documents)
    return [d for d in documents if d.collection_id in access.readable]


def readable_collections(collections: Iterable[CollectionRecord]) -> list[CollectionRecord]:
    access = current_access()
    if access is None or access.readable is None:
        return list(collections)
    return [c for c in collections if c.id in access.readable]


def require_writable(auth: Auth, collection_id: int) -> None:
    """Uploads need write access to their collection (403; 404 if it may not be read)."""
    principal = _principal()
    if principal is None:
        return
    if not auth.members.can_read(principal, collection_id):
        raise NotFound("no such collection")
    if not auth.members.can_write(principal, collection_id):
        raise WriteForbidden("you may not add documents to this collection")


def answer_audit(auth: Auth) -> Callable[[Message], None] | None:
    """What to call once an answer is stored: record the passages the model was shown for
    it, and to whom (the caller of this request, captured now, since the answer may be
    stored after the client has gone). None outside a request."""
    principal = _principal()
    if principal is None:
        return None

    def record(answer: Message) -> None:
        with _audit_failure_logged(f"answer {answer.id}"):
            auth.audit.record_answer(principal, answer)

    return record


def request_audit(auth: Auth) -> Callable[[str, Sequence[Citation]], None]:
    """What to call once a grounded ``/v1`` answer (stored nowhere) has its sources:
    record the passages shown, under the response id, for this request's caller."""
    principal = _principal()

    def record(request_id: str, shown: Sequence[Citation]) -> None:
        if principal is None:
            return
        with _audit_failure_logged(request_id):
            pairs = [(c.chunk_id, c.document_id) for c in shown]
            auth.audit.record_request(principal, request_id, pairs)

    return record


@contextmanager
def _audit_failure_logged(what: str) -> Iterator[None]:
    """The answer is given or under way: a failed audit row must be seen, never fatal."""
    try:
        yield
    except Exception:
        log.exception("could not record the sources of %s", what)
