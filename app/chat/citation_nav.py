"""Stepping through one answer's citations in the document viewer: "Citation k of N" with
Previous and Next, possibly across documents and pages."""

from __future__ import annotations

from dataclasses import dataclass

from app.auth.access import readable_documents, require_message
from app.chat.records import Citation
from app.chat.rendering import shown_citations
from app.errors import NotFound
from app.state import Services


@dataclass(frozen=True)
class CitationNav:
    position: int  # 1-based
    total: int
    previous: str | None  # viewer links, None at either end
    next: str | None
    conversation: str = ""  # the answer in its conversation: the way back from the viewer


def readable_citations(services: Services, answer_id: int) -> list[Citation]:
    """The answer's citations in the order its text first cites them (as numbered on the
    page: :func:`shown_citations`), one per passage, leaving out documents the principal
    may no longer read (or that are gone). 404 for an answer not theirs."""
    require_message(services.auth, answer_id)
    message = services.conversations.message(answer_id)
    if message is None or message.role != "assistant":
        raise NotFound("no such answer")
    store = services.store
    documents = [store.get_document(i) for i in {c.document_id for c in message.citations}]
    readable = {d.id for d in readable_documents(d for d in documents if d is not None)}
    seen: set[int] = set()
    citations = []
    for citation in shown_citations(message):
        if citation.document_id in readable and citation.chunk_id not in seen:
            seen.add(citation.chunk_id)
            citations.append(citation)
    return citations


def citation_nav(
    services: Services, answer_id: int, document_id: int, page: int, chunk_id: int | None
) -> CitationNav | None:
    """Where the shown passage sits among the answer's citations (None: not among them)."""
    citations = readable_citations(services, answer_id)
    here = next(
        (
            i
            for i, c in enumerate(citations)
            if (c.chunk_id, c.document_id, c.page) == (chunk_id, document_id, page)
        ),
        None,
    )
    if here is None:
        return None
    answer = services.conversations.message(answer_id)
    back = f"/c/{answer.conversation_id}#message-{answer_id}" if answer is not None else ""
    return CitationNav(
        position=here + 1,
        total=len(citations),
        previous=citations[here - 1].url_in(answer_id) if here > 0 else None,
        next=citations[here + 1].url_in(answer_id) if here + 1 < len(citations) else None,
        conversation=back,
    )
