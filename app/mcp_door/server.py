"""The MCP server: Ragdesk's tools registered with the official SDK's ``MCPServer``.

Each tool reads who is calling from the HTTP request that carried the call (the guard
put the key's principal in its scope), sets that caller's access for the task, and hands
over to ``McpTools``. The SDK validates the arguments against the bounds in ``limits``;
an ``AppError`` (not found, empty question, models loading) becomes a ``ToolError``, which
the client reads as a tool result with ``isError`` and the reason; anything unexpected is
logged and reported without its details (the SDK's own rule), never an HTTP 500.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from app.auth.principal import Principal
from app.auth.scope import Access, set_access
from app.errors import AppError
from app.mcp_door.limits import (
    DEFAULT_DOCUMENTS,
    DEFAULT_K,
    CollectionRef,
    CollectionRefs,
    K,
    Limit,
    Offset,
    PageNumber,
    Query,
    RowId,
)
from app.mcp_door.results import Answer, Collections, Documents, PageText, SearchResults
from app.mcp_door.tools import Caller, McpTools
from app.state import Services
from app.usage.events import set_channel

T = TypeVar("T")
READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
INSTRUCTIONS = (
    "Ragdesk answers from the organisation's own documents. Use `search` to find passages "
    "(each with a link to its page in Ragdesk), `ask` for a grounded answer with numbered "
    "citations, `list_collections`/`list_documents` to see what there is, and `read_page` "
    "to read a cited page whole. You see only the collections your API key may read."
)


class NoCaller(AppError):
    status = 401
    title = "Unauthorized"


def build_server(services: Services) -> MCPServer:
    tools = McpTools(services)
    server: MCPServer = _quietly(
        lambda: MCPServer("ragdesk", version="1", instructions=INSTRUCTIONS)
    )

    async def run(ctx: Context, work: Callable[[Caller], Awaitable[T]]) -> T:
        with _refusals_as_tool_errors():
            return await work(caller(ctx, services))

    @server.tool(annotations=READ_ONLY)
    async def search(
        ctx: Context,
        query: Annotated[Query, Field(description="What to look for, in plain words.")],
        collections: Annotated[
            CollectionRefs | None,
            Field(description="Collection ids or names to search (default: all you may read)."),
        ] = None,
        k: Annotated[K, Field(description="How many passages to return.")] = DEFAULT_K,
    ) -> SearchResults:
        """Search the documents: the passages most relevant to `query`, best first, each
        with its document title, page number and a link to that page in Ragdesk."""
        return await run(ctx, lambda who: tools.search(who, query, collections, k))

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, openWorldHint=False))
    async def ask(
        ctx: Context,
        question: Annotated[Query, Field(description="The question, as a person would ask it.")],
        collections: Annotated[
            CollectionRefs | None,
            Field(description="Collection ids or names to answer from (default: all)."),
        ] = None,
    ) -> Answer:
        """Ask a question: an answer written from the documents only, with [n] markers
        that refer to its citations (title, page, link). It says so when the documents do
        not answer it. Stored as a conversation of your user in Ragdesk."""
        return await run(ctx, lambda who: tools.ask(who, question, collections))

    @server.tool(annotations=READ_ONLY)
    async def list_collections(ctx: Context) -> Collections:
        """The collections you may read, with their ids and how many documents each holds."""
        return await run(ctx, lambda _: tools.list_collections())

    @server.tool(annotations=READ_ONLY)
    async def list_documents(
        ctx: Context,
        collection: Annotated[CollectionRef, Field(description="A collection id or name.")],
        limit: Annotated[Limit, Field(description="How many documents to list.")] = (
            DEFAULT_DOCUMENTS
        ),
        offset: Annotated[Offset, Field(description="How many to skip (for the next page).")] = 0,
    ) -> Documents:
        """The documents of a collection: id, title, kind, status and number of pages."""
        return await run(ctx, lambda who: tools.list_documents(who, collection, limit, offset))

    @server.tool(annotations=READ_ONLY)
    async def read_page(
        ctx: Context,
        document_id: Annotated[RowId, Field(description="The document's id.")],
        page: Annotated[PageNumber, Field(description="The page number, from 1.")],
    ) -> PageText:
        """The whole text of one page of a document (a citation's `document_id` and
        `page`), if you may read its collection."""
        return await run(ctx, lambda who: tools.read_page(who, document_id, page))

    return server


def caller(ctx: Context, services: Services) -> Caller:
    """The key's principal from the HTTP request that carried this call, its access set
    for this task (and the threads it starts), as the guard sets it for a route."""
    request = ctx.request_context.request
    scope: dict[str, Any] = getattr(request, "scope", None) or {}
    principal = scope.get("user")
    if not isinstance(principal, Principal):  # the mount's guards let no one else through
        raise NoCaller("send an API key as 'Authorization: Bearer'")
    set_access(Access(principal, services.auth.members.readable(principal)))
    set_channel("mcp")  # its answers count as the MCP door's in usage analytics
    url = request.url  # type: ignore[union-attr]
    return Caller(principal, f"{url.scheme}://{url.netloc}")


@contextmanager
def _refusals_as_tool_errors() -> Iterator[None]:
    try:
        yield
    except AppError as exc:
        raise ToolError(exc.detail) from exc


def _quietly(make: Callable[[], T]) -> T:
    """``MCPServer()`` calls ``logging.basicConfig`` (a handler on the root logger at
    INFO): the app's logging is the operator's, so the root logger is put back as it was."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        return make()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
