"""What the MCP tools return: frozen dataclasses, which the SDK turns into each tool's
output schema and structured result (and a JSON text block for clients that read text).

One passage shape, as everywhere else: a hit becomes a ``Citation`` (``citation_of``) and
its viewer link is the citation's own ``url``, made absolute for a client outside the app.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.chat.records import Citation, Message
from retrieval.records import CollectionRecord, DocumentRecord


@dataclass(frozen=True)
class Passage:
    """A retrieved or cited passage; ``link`` opens the web UI's viewer at its page with
    the passage highlighted (the caller signs in there to see it)."""

    document_id: int
    chunk_id: int
    title: str
    page: int
    text: str
    link: str
    score: float | None = None  # search only: the fused relevance, higher is better
    number: int | None = None  # ask only: the answer's ``[n]`` marker for this passage

    @classmethod
    def cited(
        cls,
        citation: Citation,
        base_url: str,
        *,
        text: str | None = None,
        score: float | None = None,
    ) -> Passage:
        return cls(
            document_id=citation.document_id,
            chunk_id=citation.chunk_id,
            title=citation.title,
            page=citation.page,
            text=citation.snippet if text is None else text,
            link=base_url + citation.url,
            score=None if score is None else round(score, 6),
            number=citation.number or None,
        )


@dataclass(frozen=True)
class SearchResults:
    query: str
    passages: list[Passage]


@dataclass(frozen=True)
class Answer:
    """A grounded answer: ``[n]`` markers in ``answer`` refer to ``citations[].number``.
    ``grounded`` is False when no source is cited (nothing relevant was found, or the answer
    was withheld as unsupported); ``conversation_link`` opens it in the web UI."""

    answer: str
    grounded: bool
    citations: list[Passage]
    unsupported: list[str]
    conversation_link: str

    @classmethod
    def of(cls, message: Message, base_url: str) -> Answer:
        return cls(
            answer=message.content,
            grounded=bool(message.citations),
            citations=[Passage.cited(c, base_url) for c in message.citations],
            unsupported=[u.text for u in message.unsupported],
            conversation_link=f"{base_url}/c/{message.conversation_id}",
        )


@dataclass(frozen=True)
class CollectionOut:
    id: int
    name: str
    document_count: int

    @classmethod
    def of(cls, record: CollectionRecord) -> CollectionOut:
        return cls(record.id, record.name, record.document_count)


@dataclass(frozen=True)
class Collections:
    collections: list[CollectionOut]


@dataclass(frozen=True)
class DocumentOut:
    id: int
    title: str
    filename: str
    kind: str
    status: str
    page_count: int
    link: str  # the first page in the web UI's viewer

    @classmethod
    def of(cls, record: DocumentRecord, base_url: str) -> DocumentOut:
        return cls(
            id=record.id,
            title=record.display_title,
            filename=record.filename,
            kind=str(record.kind.value),
            status=str(record.status.value),
            page_count=record.page_count,
            link=f"{base_url}/documents/{record.id}/pages/1",
        )


@dataclass(frozen=True)
class Documents:
    """One page of a collection's documents, newest last as the store lists them;
    ``total`` counts them all, so a client knows whether to ask for the next ``offset``."""

    collection: CollectionOut
    documents: list[DocumentOut]
    total: int
    offset: int


@dataclass(frozen=True)
class PageText:
    document_id: int
    title: str
    page: int
    page_count: int
    text: str
    truncated: bool  # the page was longer than the tool returns (see ``limits``)
    link: str
