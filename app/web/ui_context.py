"""What the desktop-style shell shows: sidebar, conversation groups, status bar."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from app.auth.access import (
    current_user_id,
    readable_collections,
    readable_documents,
    visible_conversation_ids,
)
from app.auth.scope import current_access
from app.chat.feedback import AnswerFeedback, Feedback
from app.chat.local_models import ChatModels
from app.chat.records import Conversation, Message
from app.errors import UnprocessableInput
from app.state import Services
from retrieval.records import CollectionRecord, DocumentRecord
from retrieval.types import DocumentStatus

CONVERSATION_LIMIT = 200


@dataclass(frozen=True)
class ConversationGroup:
    label: str
    items: list[tuple[Conversation, bool]]  # (conversation, pinned)


def group_conversations(
    listing: list[tuple[Conversation, bool]], now: float | None = None
) -> list[ConversationGroup]:
    """Pinned first, then Today / Yesterday / Previous 7 days / Older by last activity,
    in the server's local time; empty groups are left out."""
    today = datetime.fromtimestamp(time.time() if now is None else now).date()
    labels = ("Pinned", "Today", "Yesterday", "Previous 7 days", "Older")
    groups: dict[str, list[tuple[Conversation, bool]]] = {label: [] for label in labels}
    for conversation, pinned in listing:
        label = "Pinned" if pinned else _age_label(today, conversation.updated_at)
        groups[label].append((conversation, pinned))
    return [ConversationGroup(label, items) for label, items in groups.items() if items]


def _age_label(today: date, timestamp: float) -> str:
    day = datetime.fromtimestamp(timestamp).date()
    if day >= today:
        return "Today"
    if day == today - timedelta(days=1):
        return "Yesterday"
    return "Previous 7 days" if day >= today - timedelta(days=7) else "Older"


def conversation_list_context(services: Services, query: str = "") -> dict[str, Any]:
    only = visible_conversation_ids(services.auth)
    listing = services.conversations.listing(query, CONVERSATION_LIMIT, only)
    return {"groups": group_conversations(listing), "query": query}


def cited_documents(services: Services, message: Message) -> dict[int, DocumentRecord]:
    """The documents an answer cites that the caller may still read, by id (the inspector
    shows their details; a citation of one it may no longer read is left out)."""
    ids = sorted({c.document_id for c in message.citations})
    found = [d for i in ids if (d := services.store.get_document(i)) is not None]
    return {d.id: d for d in readable_documents(found)}


def library_context(services: Services) -> dict[str, Any]:
    return {"collections": readable_collections(services.store.collections())}


def writable_collections(services: Services) -> list[CollectionRecord]:
    """The collections the caller may add documents to (none: no upload in the UI)."""
    readable = readable_collections(services.store.collections())
    access = current_access()
    if access is None or access.principal is None:
        return readable
    writable = services.auth.members.writable(access.principal)
    return readable if writable is None else [c for c in readable if c.id in writable]


def upload_context(
    services: Services, opened_from: int | None = None, scope: Collection[int] | None = None
) -> dict[str, Any]:
    """The upload dialog's choice of collection: those the caller may write to, the one
    whose table it was opened from chosen, else one the conversation searches (``scope``),
    else the default collection, else the first."""
    choices = writable_collections(services)
    ids = [c.id for c in choices]
    candidates = (opened_from, *sorted(scope or ()), services.collection_id)
    chosen = next((i for i in candidates if i in ids), None)
    return {
        "upload_collections": choices,
        "upload_chosen": chosen if chosen is not None else (ids[0] if ids else None),
    }


def shell_context(services: Services, conversation_id: int | None) -> dict[str, Any]:
    conversations = services.conversations
    conversation = conversations.get(conversation_id) if conversation_id else None
    messages = conversations.messages(conversation.id) if conversation else []
    # Opened, a conversation shows its latest answer's sources (as after it was written).
    latest = next((m for m in reversed(messages) if m.role == "assistant"), None)
    return {
        **library_context(services),
        **conversation_list_context(services),
        "conversation": conversation,
        "pinned": conversations.is_pinned(conversation.id) if conversation else False,
        "messages": messages,
        "latest_answer": latest,
        "latest_documents": cited_documents(services, latest) if latest else {},
        "feedback": feedback_given(services, messages),
        "suggestions": [] if conversation else suggested_questions(services),
        "status": status_context(services),
        **upload_context(services, scope=conversation.scope if conversation else None),
        **model_context(services, conversation),
        **scope_context(services, conversation),
    }


def scope_context(services: Services, conversation: Conversation | None) -> dict[str, Any]:
    """The composer's scope control: the collections the caller may read, those this
    conversation searches (all when none were chosen) and how the choice reads."""
    readable = readable_collections(services.store.collections())
    chosen = conversation.scope if conversation else None
    picked = [c for c in readable if chosen is None or c.id in chosen]
    everything = chosen is None or len(picked) == len(readable)
    return {
        "scope_collections": readable,
        "scope_chosen": {c.id for c in picked},
        "scope_value": "" if everything else ",".join(str(c.id) for c in picked),
        "scope_label": scope_label(readable, picked),
    }


def scope_label(readable: list[CollectionRecord], picked: list[CollectionRecord]) -> str:
    if len(picked) == len(readable):
        return "All collections"
    return ", ".join(c.name for c in picked) or "No collection open to you"


def choose_scope(services: Services, raw: str) -> frozenset[int] | None:
    """A scope from the composer ("": all; else comma-separated collection ids), kept to
    the collections the caller may read (422 when none of them is left)."""
    if not raw.strip():
        return None
    readable = {c.id for c in readable_collections(services.store.collections())}
    try:
        asked = {int(part) for part in raw.split(",") if part.strip()}
    except ValueError:
        raise UnprocessableInput("the scope is a list of collection ids") from None
    kept = frozenset(asked & readable)
    if not kept:
        raise UnprocessableInput("choose at least one collection to search")
    return None if kept == readable else kept


def feedback_given(services: Services, messages: list[Message]) -> dict[int, Feedback]:
    """The caller's 👍/👎 on the answers shown, by answer id."""
    user_id = current_user_id()
    if user_id is None:
        return {}
    store = AnswerFeedback(services.db)
    given = (store.of(m.id, user_id) for m in messages if m.role == "assistant")
    return {f.message_id: f for f in given if f is not None}


SUGGESTIONS = 4


def suggested_questions(services: Services) -> list[str]:
    """First questions for an empty chat, from the titles of the documents the caller may
    read (the most recently added first); no model is asked."""
    readable = [c.id for c in readable_collections(services.store.collections())]
    if not readable:
        return []
    rows = services.db.read().execute(
        "SELECT id FROM documents WHERE status = ?"  # noqa: S608 - only placeholders
        f" AND collection_id IN ({', '.join('?' * len(readable))})"
        " ORDER BY created_at DESC, id DESC LIMIT ?",
        [DocumentStatus.INDEXED.value, *readable, SUGGESTIONS * 3],
    )
    questions: list[str] = []
    for (document_id,) in rows:
        document = services.store.get_document(document_id)
        title = " ".join(document.display_title.split())[:80] if document else ""
        question = f"What does “{title}” say?"
        if title and question not in questions:
            questions.append(question)
    return questions[:SUGGESTIONS]


def served_models(services: Services) -> set[str] | None:
    """The names the running server can load (None: still starting)."""
    models = services.models
    return None if models is None else {*models.names, *models.aliases}


def model_context(services: Services, conversation: Conversation | None) -> dict[str, Any]:
    """The composer's choice of model: those chat offers (the default first) and the one
    this conversation chose ("" for the default, or one no longer offered)."""
    offered = ChatModels(services.db, services.settings).offered(served_models(services))
    chosen = conversation.model if conversation else None
    names = {m.name for m in offered[1:]}
    return {
        "model_choices": offered,
        "chosen_model": chosen if chosen in names else "",
        "prefetch": services.settings.generation.prefetch,  # the question box sends drafts
    }


def choose_model(services: Services, raw: str) -> str | None:
    """A conversation's choice of model, checked (None: the default; 400 if not offered)."""
    return ChatModels(services.db, services.settings).choose(raw, served_models(services))


def status_context(services: Services) -> dict[str, Any]:
    """The status bar: the index as far as the caller may read it, the documents of it still
    being ingested, and the answers being written (each from its retrieval until it is
    stored, so one is counted before its first token too)."""
    retrieval = services.retrieval
    models = services.loaded_models()
    stats = [m.stats() for m in models]
    waiting = sum(s.waiting for s in stats)
    answering = services.chat.answering if services.chat is not None else 0
    # Answers of chat waiting in an engine's queue are counted as waiting, not twice;
    # requests that came in by another door (/v1) are only seen by the engines.
    running = max(sum(s.running for s in stats), answering - waiting)
    return {
        "ready": services.ready,
        "problem": _problem_for_caller(services),
        "model": ", ".join(m.name for m in models) or None,
        "device": ", ".join(sorted({m.device for m in models})) or None,
        "running": running,
        "waiting": waiting,
        "embedder": retrieval.embedder.model_id if retrieval else None,
        **_index_counts(services),
    }


def _index_counts(services: Services) -> dict[str, int]:
    """Documents and searchable passages in the collections the caller may read, and how
    many of those documents are queued, parsed or embedded now (what the upload badge
    calls "Processing")."""
    readable = {c.id for c in readable_collections(services.store.collections())}
    rows = services.db.read().execute(
        "SELECT collection_id, status, COUNT(*), SUM(chunk_count) FROM documents"
        " GROUP BY collection_id, status"
    )
    documents = passages = queue = 0
    for collection_id, status, count, chunks in rows:
        if collection_id not in readable:
            continue
        documents += int(count)
        if status == DocumentStatus.INDEXED.value:
            passages += int(chunks or 0)
        elif not DocumentStatus(status).is_terminal:
            queue += int(count)
    return {"documents": documents, "vectors": passages, "queue": queue}


def _problem_for_caller(services: Services) -> str | None:
    """Why the service is not ready, as ``/health/ready`` tells the caller."""
    access = current_access()
    principal = access.principal if access is not None else None
    return services.problem_told(monitor=principal is not None and principal.may_monitor)
