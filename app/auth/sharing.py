"""Who may open a shared conversation, and which of its citations they may see.

A share gives reading only. It is never an owner's right: the guard's conversation check
(``app.auth.resources``) still answers 404 to a reader for every ``{conversation_id}``
route, so a reader cannot rename, pin, ask in, regenerate, edit, give feedback in or
delete a shared conversation; the shared view has its own routes (``{shared_id}``). A
citation's passage is shown only to a reader who may read its document's collection now.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.auth.access import readable_documents
from app.auth.principal import Principal
from app.auth.service import Auth
from app.chat.records import Message
from app.chat.shares import Shares
from retrieval.store import DocumentStore


def may_read_shared(auth: Auth, shares: Shares, principal: Principal, conversation_id: int) -> bool:
    """The owner (it is theirs), or a user a share reaches (directly or through a group).
    A read-only or collection-limited key sees no stored conversation, shared or not:
    its answers would cite collections beyond the key's."""
    if principal.restricted:
        return False
    if auth.ownership.may_see(principal, conversation_id):
        return True
    return shares.reaches(principal.user.id, conversation_id)


def openable_documents(store: DocumentStore, messages: Iterable[Message]) -> frozenset[int]:
    """The documents the messages cite that this request's caller may open (those of
    collections they may read, still there)."""
    ids = sorted({c.document_id for m in messages for c in m.citations})
    found = [d for i in ids if (d := store.get_document(i)) is not None]
    return frozenset(d.id for d in readable_documents(found))
