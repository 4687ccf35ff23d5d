"""Bounds on MCP tool arguments, which are as hostile as any ``/v1`` body: an agent's
arguments come from a model that may have been told anything by a document it read.

Each bound is in the tool's input schema (so a client sees it) and checked by the SDK's
argument validation (so a call past it is a tool error naming the field, never work done).
The numbers follow the API's: a question or query is what ``/api/chat`` and ``/api/search``
take, ``k`` what ``/api/search`` allows.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.chat.answering import MAX_QUESTION_CHARS
from app.schemas import MAX_ROW_ID

MAX_K = 50  # as SearchIn.k
DEFAULT_K = 5
MAX_COLLECTIONS = 20  # collections named in one call
MAX_NAME_CHARS = 200  # a collection's name (longer ones cannot exist)
MAX_DOCUMENTS = 200  # documents listed in one call; ``offset`` pages through the rest
DEFAULT_DOCUMENTS = 50
MAX_OFFSET = 1_000_000
MAX_PAGE = 100_000  # pages of one document: far beyond any real one
MAX_PAGE_CHARS = 50_000  # of one page's text returned; longer ones are cut (``truncated``)
MAX_BODY_BYTES = 256 * 1024  # one MCP message over HTTP (tool arguments are small)

Query = Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS)]
RowId = Annotated[int, Field(ge=1, le=MAX_ROW_ID)]
CollectionRef = RowId | Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
CollectionRefs = Annotated[list[CollectionRef], Field(min_length=1, max_length=MAX_COLLECTIONS)]
K = Annotated[int, Field(ge=1, le=MAX_K)]
Limit = Annotated[int, Field(ge=1, le=MAX_DOCUMENTS)]
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]
PageNumber = Annotated[int, Field(ge=1, le=MAX_PAGE)]
