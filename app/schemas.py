"""What the JSON API takes and returns."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

import msgspec
from litestar.params import Parameter

from app.chat.records import Citation, Message
from llm.support import Unsupported
from retrieval.records import DocumentRecord
from retrieval.types import Hit

MAX_ROW_ID = 2**63 - 1  # SQLite's INTEGER range; larger numbers can name no row
RowId = Annotated[int, Parameter(ge=1, le=MAX_ROW_ID)]
"""An id or page number in a path or query: out of range is a 4xx, never an overflow."""


class DocumentOut(msgspec.Struct):
    id: int
    filename: str
    title: str | None
    kind: str
    size: int
    status: str
    error: str | None
    pages: int
    chunks: int
    created_at: float
    updated_at: float
    duplicate: bool = False

    @classmethod
    def of(cls, document: DocumentRecord, *, duplicate: bool = False) -> DocumentOut:
        return cls(
            id=document.id,
            filename=document.filename,
            title=document.title,
            kind=document.kind.value,
            size=document.size,
            status=document.status.value,
            error=document.error,
            pages=document.page_count,
            chunks=document.chunk_count,
            created_at=document.created_at,
            updated_at=document.updated_at,
            duplicate=duplicate,
        )


class DocumentList(msgspec.Struct):
    documents: list[DocumentOut]


class SearchIn(msgspec.Struct, forbid_unknown_fields=True):
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=4000)]
    k: Annotated[int, msgspec.Meta(ge=1, le=50)] = 5


class SearchOut(msgspec.Struct):
    """Passages as retrieval returns them (``retrieval.types.Hit``: one passage shape from
    the index to JSON), with scores rounded to 6 places."""

    hits: list[Hit]

    @classmethod
    def of(cls, hits: list[Hit]) -> SearchOut:
        return cls([replace(hit, score=round(hit.score, 6)) for hit in hits])


class ChatIn(msgspec.Struct, forbid_unknown_fields=True):
    message: Annotated[str, msgspec.Meta(min_length=1, max_length=4000)]
    conversation_id: Annotated[int, msgspec.Meta(ge=1, le=MAX_ROW_ID)] | None = None


class PrefetchIn(msgspec.Struct, forbid_unknown_fields=True):
    """A question still being typed (``POST /api/prefetch``)."""

    draft: Annotated[str, msgspec.Meta(max_length=4000)]
    conversation_id: Annotated[int, msgspec.Meta(ge=1, le=MAX_ROW_ID)] | None = None


class PrefetchOut(msgspec.Struct):
    status: str  # started, skipped, short, off


class CitationOut(msgspec.Struct):
    """A source an answer cites as ``[number]`` (native API and grounded ``/v1`` alike);
    ``url`` opens the viewer there."""

    number: int
    chunk_id: int
    document_id: int
    title: str
    page: int
    start: int
    end: int
    snippet: str
    url: str
    # the passage on its PDF page: [x0, y0, x1, y1] fractions of the page's width and
    # height from its top-left corner (RAGFlow's "positions"); empty for other kinds
    boxes: list[list[float]] = msgspec.field(default_factory=list)
    # the page's name where it is not "page n": "Slide 3", "Sheet “Prices”", "Message 2: …"
    label: str = ""

    @classmethod
    def of(cls, citation: Citation) -> CitationOut:
        fields = {**citation.__dict__, "boxes": [list(box) for box in citation.boxes]}
        return cls(url=citation.url, **fields)


class UnsupportedOut(msgspec.Struct):
    """A sentence of the answer that no cited passage supports (native API and grounded
    ``/v1`` alike): ``answer[start:end] == text``. ``reason``: ``"no source"`` (it cites
    nothing) or ``"not in the cited source"`` (what it cites does not say it). A lexical
    check, a prompt to look, not a verdict."""

    start: int
    end: int
    text: str
    reason: Literal["no source", "not in the cited source"]

    @classmethod
    def of(cls, unsupported: Unsupported) -> UnsupportedOut:
        return cls(unsupported.start, unsupported.end, unsupported.text, unsupported.reason)


class ChatSources(msgspec.Struct):
    """The passages the model is given for an answer, best first, numbered as it may cite
    them: sent before it starts writing. ``query``: what was searched for (a follow-up
    question carries the earlier turn's subject; ``retrieval.followup``)."""

    sources: list[CitationOut]
    query: str | None = None


class ChatDone(msgspec.Struct):
    """The stored answer. ``grounded``: it cites at least one source; ``unsupported``: its
    sentences no cited passage supports; ``query``: what was searched for; ``model``: the
    model that wrote it (None for answers stored before it was kept, and for none found)."""

    conversation_id: int
    message_id: int
    answer: str
    citations: list[CitationOut]
    unsupported: list[UnsupportedOut]
    grounded: bool
    query: str | None = None
    model: str | None = None

    @classmethod
    def of(cls, message: Message) -> ChatDone:
        return cls(
            conversation_id=message.conversation_id,
            message_id=message.id,
            answer=message.content,
            citations=[CitationOut.of(c) for c in message.citations],
            unsupported=[UnsupportedOut.of(u) for u in message.unsupported],
            grounded=bool(message.citations),
            query=searched_for(message),
            model=message.context.model if message.context else None,
        )


class Health(msgspec.Struct):
    status: str
    detail: str | None = None


class Readiness(Health):
    # "full" while writes are refused for space: reads go on, so readiness stays 200.
    disk: str = "ok"


# --- collections, conversations, accounts -------------------------------------------------
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]


class CollectionOut(msgspec.Struct):
    id: int
    name: str
    documents: int


class CollectionList(msgspec.Struct):
    collections: list[CollectionOut]


class CollectionIn(msgspec.Struct, forbid_unknown_fields=True):
    name: Name


class ConversationOut(msgspec.Struct):
    id: int
    title: str
    created_at: float
    updated_at: float


class ConversationList(msgspec.Struct):
    conversations: list[ConversationOut]


class MessageOut(msgspec.Struct):
    """A question or an answer. For an answer, ``grounded`` says whether it cites a source
    and ``unsupported`` lists its sentences no cited passage supports (as in ``ChatDone``);
    for a question ``grounded`` is null."""

    id: int
    role: str
    content: str
    created_at: float
    citations: list[CitationOut]
    unsupported: list[UnsupportedOut] = msgspec.field(default_factory=list)
    grounded: bool | None = None
    query: str | None = None  # an answer's search query (null: a question, or stored before)
    # the collections an answer searched, by name (null: all the asker could read)
    scope: list[str] | None = None

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        citations = [CitationOut.of(c) for c in message.citations]
        answer = message.role == "assistant"
        return cls(
            message.id,
            message.role,
            message.content,
            message.created_at,
            citations,
            unsupported=[UnsupportedOut.of(u) for u in message.unsupported],
            grounded=bool(message.citations) if answer else None,
            query=searched_for(message),
            scope=None
            if message.context is None or message.context.scope is None
            else list(message.context.scope),
        )


def searched_for(message: Message) -> str | None:
    """What retrieval searched for to answer ``message`` (None: not an answer, or older)."""
    return message.context.query if message.context is not None else None


class ConversationDetail(ConversationOut):
    messages: list[MessageOut]


class UserOut(msgspec.Struct):
    id: int
    name: str
    role: str
    disabled: bool


class UserList(msgspec.Struct):
    users: list[UserOut]


class UserIn(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    role: Literal["admin", "staff"] = "staff"


class UserCreated(UserOut):
    password: str  # generated, shown this once


class KeyOut(msgspec.Struct):
    id: int
    user_id: int
    user_name: str
    name: str
    prefix: str
    read_only: bool
    collections: list[int] | None  # None: every collection the user may read
    created_at: float
    last_used_at: float | None
    revoked_at: float | None


class KeyList(msgspec.Struct):
    keys: list[KeyOut]


class KeyIn(msgspec.Struct, forbid_unknown_fields=True):
    user: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    name: Annotated[str, msgspec.Meta(max_length=100)] = ""
    read_only: bool = False
    collections: Annotated[list[Name], msgspec.Meta(max_length=100)] | None = None


class KeyCreated(KeyOut):
    key: str  # shown this once; only its hash is kept


# --- collections as workspaces (app/documents/workspaces.py) ---------------------------------
OcrSetting = Literal["on", "off", "default"]


class CollectionPatch(msgspec.Struct, forbid_unknown_fields=True):
    """A change to a collection; a field left out (or null) is left as it is.
    ``default_model`` "" goes back to the deployment's chat model."""

    name: Name | None = None
    description: Annotated[str, msgspec.Meta(max_length=2000)] | None = None
    instructions: Annotated[str, msgspec.Meta(max_length=2000)] | None = None
    ocr: OcrSetting | None = None
    default_model: Annotated[str, msgspec.Meta(max_length=200)] | None = None


class CollectionDetail(msgspec.Struct):
    id: int
    name: str
    documents: int
    description: str
    instructions: str
    ocr: OcrSetting  # default: the deployment's RAGDESK_OCR
    default_model: str | None  # None: the deployment's chat model
    created_at: float
    updated_at: float


class CollectionDeleted(msgspec.Struct):
    id: int
    name: str
    documents_deleted: int


class CollectionMemberIn(msgspec.Struct, forbid_unknown_fields=True):
    user: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    write: bool = False  # may upload and delete documents too


class CollectionGroupIn(msgspec.Struct, forbid_unknown_fields=True):
    group: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    write: bool = False


class CollectionMemberOut(msgspec.Struct):
    user_id: int
    user: str
    write: bool


class CollectionGroupOut(msgspec.Struct):
    group_id: int
    group: str
    write: bool
    source: str


class CollectionAccess(msgspec.Struct):
    members: list[CollectionMemberOut]
    groups: list[CollectionGroupOut]
