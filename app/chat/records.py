"""The records of a conversation: the conversation, its messages, the citations each
answer used and what the model was shown for it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from llm.support import Unsupported
from retrieval.types import Box, as_boxes

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Citation:
    number: int
    chunk_id: int
    document_id: int
    title: str
    page: int
    start: int
    end: int
    snippet: str
    # where the passage stands on its PDF page: (x0, y0, x1, y1), fractions of the page
    # from its top-left corner; none for other kinds, or not found
    boxes: tuple[Box, ...] = ()
    label: str = ""  # the page's name where it is not "page n" ("Slide 3", "Sheet “Prices”")

    def __post_init__(self) -> None:  # read back from JSON: lists, made tuples again
        object.__setattr__(self, "boxes", as_boxes(self.boxes))

    @property
    def where(self) -> str:
        """Where the passage is, for people: "page 4", "Slide 3", "Sheet “Prices”"."""
        return self.label or f"page {self.page}"

    @property
    def url(self) -> str:
        return f"/documents/{self.document_id}/pages/{self.page}?chunk={self.chunk_id}#passage"

    def url_in(self, answer_id: int) -> str:
        """The viewer link that also steps through the other citations of answer ``answer_id``."""
        return self.url.replace("#passage", f"&answer={answer_id}#passage")


@dataclass(frozen=True)
class ShownSource:
    """A source as the model was shown it (its text may have been shortened to fit)."""

    citation: Citation
    text: str


@dataclass(frozen=True)
class TurnContext:
    """What the model saw and said for one answer, so the next turn's prompt can repeat it
    verbatim: the exact generated text, the sources first listed with this turn, and the
    numbers of earlier sources it referred to again."""

    answer: str
    sources: tuple[ShownSource, ...] = ()
    refers: tuple[int, ...] = ()
    query: str | None = None  # what was searched for (None: stored before queries were)
    # the collections searched, by name then (None: all the asker could read)
    scope: tuple[str, ...] | None = None
    model: str | None = None  # the model that wrote it (None: stored before this was kept)

    def to_json(self) -> str:
        return json.dumps(
            {
                "answer": self.answer,
                "sources": [
                    {"citation": s.citation.__dict__, "text": s.text} for s in self.sources
                ],
                "refers": list(self.refers),
                "query": self.query,
                "scope": None if self.scope is None else list(self.scope),
                "model": self.model,
            }
        )

    @classmethod
    def from_json(cls, raw: str) -> TurnContext:
        data = json.loads(raw)
        sources = tuple(
            ShownSource(Citation(**s["citation"]), s["text"]) for s in data.get("sources", [])
        )
        refers = tuple(int(n) for n in data.get("refers", []))
        query = data.get("query")
        scope = data.get("scope")
        model = data.get("model")
        return cls(
            str(data["answer"]),
            sources,
            refers,
            None if query is None else str(query),
            None if scope is None else tuple(str(name) for name in scope),
            None if model is None else str(model),
        )


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: Role
    content: str
    citations: tuple[Citation, ...]
    created_at: float
    reply_to: int | None = None
    context: TurnContext | None = None
    unsupported: tuple[Unsupported, ...] = ()  # sentences no cited passage supports
    version: int = 1  # an answer's place among the answers to its question (1: the first)
    versions: int = 1  # how many answers its question has had (regenerating adds one)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Message:
        citations = tuple(Citation(**c) for c in json.loads(row["citations"] or "[]"))
        context = row.get("context")
        unsupported = tuple(Unsupported(**u) for u in json.loads(row.get("unsupported") or "[]"))
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            role=row["role"],
            content=row["content"],
            citations=citations,
            created_at=row["created_at"],
            reply_to=row["reply_to"],
            context=TurnContext.from_json(context) if context else None,
            unsupported=unsupported,
            version=row.get("version") or 1,
            versions=row.get("versions") or 1,
        )


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created_at: float
    updated_at: float
    model: str | None = None  # the model chosen for it (None: the configured chat model)
    scope: frozenset[int] | None = None  # the collections it searches (None: all readable)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Conversation:
        raw = row.get("scope")
        scope = None if raw is None else frozenset(int(i) for i in json.loads(raw))
        return cls(**conversation_fields(row), model=row.get("model"), scope=scope)


def conversation_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name in ("id", "title", "created_at", "updated_at")}
