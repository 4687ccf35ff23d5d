"""Rows named in a route's path must be the principal's to see, or they do not exist (404).

Checked in the guard for every route, so a new route with ``{conversation_id}``,
``{question_id}``/``{message_id}``, ``{document_id}`` or ``{collection_id}`` in its path is
covered without
further code. Changing a document (any non-GET method) needs write access to its
collection (403 when it may be read but not written).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.auth.principal import Principal
from app.auth.service import Auth
from app.errors import AppError, NotFound
from retrieval.store import DocumentStore

MESSAGE_PARAMS = ("question_id", "message_id", "answer_id")
ROW_PARAMS = ("conversation_id", "document_id", "collection_id", *MESSAGE_PARAMS)
MAX_ROW_ID = 2**63 - 1


class WriteForbidden(AppError):
    status = 403
    title = "Forbidden"


def check_path_rows(
    auth: Auth,
    store: DocumentStore,
    principal: Principal,
    params: Mapping[str, Any],
    *,
    writing: bool,
) -> None:
    # The guard runs before validation: an id out of a 64-bit key's range (SQLite's
    # integer, PostgreSQL's BIGINT) names no row, so it is left to the handler's own
    # validation (422) and not looked up here.
    params = {
        name: value
        for name in ROW_PARAMS
        if isinstance(value := params.get(name), int) and 1 <= value <= MAX_ROW_ID
    }
    conversation_id = params.get("conversation_id")
    if conversation_id is not None and not auth.ownership.may_see(principal, conversation_id):
        raise NotFound("no such conversation")
    for name in MESSAGE_PARAMS:
        if (message_id := params.get(name)) is not None:
            owner = auth.ownership.message_conversation(message_id)
            if owner is None or not auth.ownership.may_see(principal, owner):
                raise NotFound("no such message")
    document_id = params.get("document_id")
    if document_id is not None:
        check_document(auth, store, principal, document_id, writing=writing)
    collection_id = params.get("collection_id")
    if collection_id is not None:
        if not auth.members.can_read(principal, collection_id):
            raise NotFound("no such collection")
        if writing and not auth.members.can_write(principal, collection_id):
            raise WriteForbidden("you may read this collection but not change it")


def check_document(
    auth: Auth, store: DocumentStore, principal: Principal, document_id: int, *, writing: bool
) -> None:
    document = store.get_document(document_id)
    if document is None or not auth.members.can_read(principal, document.collection_id):
        raise NotFound("no such document")
    if writing and not auth.members.can_write(principal, document.collection_id):
        raise WriteForbidden("you may read this collection but not change it")
