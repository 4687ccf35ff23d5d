"""The MCP door at ``/mcp`` (app/mcp_door), driven with the official SDK's own client
(``streamable_http_client`` + ``ClientSession``) over real HTTP: a loopback uvicorn server
in a thread, fake models, as tests/test_schema_fuzz.py serves its app.

Two teams as in tests/test_permissions.py, but reached through groups: ann is in group A
(collection team-a), bob in group B (team-b, which holds the canary). The canary must
never reach ann through any tool, nor a key limited to team-a, while bob and an unlimited
admin key do find it (so the probe can fail).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from litestar import Litestar
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from app.factory import create_app
from app.mcp_door.limits import MAX_K
from app.state import Services
from llm.backend import FakeBackend
from retrieval.types import DocumentStatus
from tests.conftest import TEST_PASSWORD, fake_settings, wait_for
from tests.server import ServerProcess, free_port, http

CANARY = "zanzibarquokka"
SHARED = "The canteen serves soup at noon on weekdays."
TOOLS = {"search", "ask", "list_collections", "list_documents", "read_page"}


@dataclass
class Door:
    """A served app, its services (to arrange and inspect), its users' keys and row ids."""

    url: str
    app: Litestar
    keys: dict[str, str] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)

    @property
    def services(self) -> Services:
        services: Services = self.app.state.services
        return services

    @property
    def model(self) -> FakeBackend:
        backend = self.services.require_models().get("default")
        assert isinstance(backend, FakeBackend)
        return backend


@contextmanager
def served(data_dir: Path, **overrides: Any) -> Iterator[Door]:
    app = create_app(fake_settings(data_dir, allowed_hosts=["127.0.0.1"], **overrides))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/health/ready"), timeout=60)
        yield Door(url, app)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    with served(tmp_path_factory.mktemp("mcp") / "data") as door:
        _two_teams_in_groups(door)
        yield door


def _two_teams_in_groups(door: Door) -> None:
    services, auth = door.services, door.services.auth
    admin = auth.users.create("boss", TEST_PASSWORD, "admin")
    ann = auth.users.create("ann", TEST_PASSWORD, "staff")
    bob = auth.users.create("bob", TEST_PASSWORD, "staff")
    a, b = services.store.ensure_collection("team-a"), services.store.ensure_collection("team-b")
    for name, collection, member in (("group-a", a, ann), ("group-b", b, bob)):
        group = auth.groups.create(name)
        auth.groups.add_member(group.id, member.id)
        auth.groups.grant(group.id, collection)
    door.ids.update(a=a, b=b, ann=ann.id)
    for name, collection, text in (
        ("a_doc", a, f"# Canteen\n\n{SHARED}"),
        ("b_doc", b, f"# Canteen\n\n{SHARED} The secret soup is {CANARY}."),
    ):
        record, _ = services.library.submit(
            data=text.encode(), filename=f"{name}.md", collection_id=collection
        )
        door.ids[name] = record.id
        wait_for(lambda r=record: _indexed(services, r.id))  # type: ignore[misc]
    door.keys.update(
        admin=auth.keys.create(admin)[0],
        ann=auth.keys.create(ann)[0],
        bob=auth.keys.create(bob)[0],
        admin_only_a=auth.keys.create(admin, collections={a}, read_only=True)[0],
    )


def _indexed(services: Services, document_id: int) -> bool:
    document = services.store.get_document(document_id)
    assert document is not None and document.status != DocumentStatus.FAILED
    return document.status == DocumentStatus.INDEXED


# --- the SDK's client ------------------------------------------------------------------------
def session_run(url: str, key: str | None, work: Any) -> Any:
    """``work(session)`` in an initialised client session of the SDK against ``url/mcp``."""

    async def run() -> Any:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await work(session)

    return asyncio.run(run())


def call(door: Door, who: str, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    result: CallToolResult = session_run(
        door.url, door.keys[who], lambda session: session.call_tool(tool, arguments)
    )
    return result


def ok(door: Door, who: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = call(door, who, tool, arguments)
    assert not result.is_error, result.content
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    return structured


def refused(door: Door, who: str, tool: str, arguments: dict[str, Any]) -> str:
    """The reason a tool call was refused (a tool error, not a protocol or HTTP failure)."""
    result = call(door, who, tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(getattr(block, "text", "") for block in result.content)


# --- the tools ------------------------------------------------------------------------------
def test_the_five_tools_are_listed_with_their_bounds(door: Door) -> None:
    listed = session_run(door.url, door.keys["ann"], lambda session: session.list_tools()).tools
    assert {tool.name for tool in listed} == TOOLS
    search = next(tool for tool in listed if tool.name == "search")
    assert search.input_schema["properties"]["k"]["maximum"] == MAX_K
    assert search.input_schema["required"] == ["query"]
    assert search.output_schema is not None and "passages" in search.output_schema["properties"]


def test_search_finds_passages_with_title_page_and_a_link_to_the_page(door: Door) -> None:
    found = ok(door, "ann", "search", {"query": "When is soup served?", "k": 3})
    assert found["query"] == "When is soup served?"
    [passage] = found["passages"]  # ann reads team-a only: one document, one passage
    assert passage["document_id"] == door.ids["a_doc"] and passage["page"] == 1
    assert passage["title"] == "Canteen" and SHARED in passage["text"]
    link = passage["link"]
    assert link.startswith(f"{door.url}/documents/{door.ids['a_doc']}/pages/1?chunk=")
    viewer = httpx.get(link, headers={"Authorization": f"Bearer {door.keys['ann']}"})
    assert viewer.status_code == 200 and "noon on weekdays" in viewer.text
    by_name = ok(door, "ann", "search", {"query": "soup", "collections": ["team-a"]})
    by_id = ok(door, "ann", "search", {"query": "soup", "collections": [door.ids["a"]]})
    assert by_name["passages"] == by_id["passages"] == found["passages"]


def test_ask_answers_from_the_documents_with_citations_and_audits_what_was_shown(
    door: Door,
) -> None:
    before = len(door.model.history)
    answer = ok(door, "ann", "ask", {"question": "When does the canteen serve soup?"})
    assert answer["grounded"] and "[1]" in answer["answer"]
    [cited] = answer["citations"]
    assert cited["number"] == 1 and cited["document_id"] == door.ids["a_doc"]
    assert cited["link"].startswith(f"{door.url}/documents/{door.ids['a_doc']}/pages/1")
    assert SHARED in door.model.history[before].prompt  # the chat pipeline's prompt
    conversation_id = int(answer["conversation_link"].rsplit("/", 1)[1])
    stored = door.services.conversations.messages(conversation_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].content == answer["answer"]
    # the answer audit, as /api/chat writes it: the passage shown, to ann, with her key
    shown = [s for s in door.services.auth.audit.shown(user_id=door.ids["ann"])]
    rows = [s for s in shown if s.message_id == stored[1].id]
    key = door.services.auth.keys.authenticate(door.keys["ann"])
    assert key is not None and key.key_id is not None
    assert [(r.document_id, r.key_id) for r in rows] == [(door.ids["a_doc"], key.key_id)]
    # usage analytics count it as the MCP door's, for ann's key
    usage = wait_for(
        lambda: (
            door.services.db.read()
            .execute(
                "SELECT channel, outcome, key_id FROM usage_events WHERE message_id = ?",
                [stored[1].id],
            )
            .fetchall()
        )
    )
    assert [tuple(row) for row in usage] == [("mcp", "answered", key.key_id)]


def test_ask_within_named_collections_and_when_nothing_is_found(door: Door) -> None:
    answer = ok(
        door, "admin", "ask", {"question": "What is the secret soup?", "collections": ["team-a"]}
    )
    assert {c["document_id"] for c in answer["citations"]} == {door.ids["a_doc"]}
    assert CANARY not in json.dumps(answer)
    conversation_id = int(answer["conversation_link"].rsplit("/", 1)[1])
    assert door.services.conversations.scope_of(conversation_id) == frozenset({door.ids["a"]})
    nothing = ok(door, "admin", "ask", {"question": "quantum chromodynamics lattice gauge"})
    assert not nothing["grounded"] and nothing["citations"] == []


def test_collections_documents_and_pages_are_those_the_key_may_read(door: Door) -> None:
    names = [c["name"] for c in ok(door, "ann", "list_collections", {})["collections"]]
    assert names == ["team-a"]
    listed = ok(door, "ann", "list_documents", {"collection": "team-a"})
    assert listed["total"] == 1 and listed["collection"]["id"] == door.ids["a"]
    [document] = listed["documents"]
    assert document["id"] == door.ids["a_doc"] and document["page_count"] == 1
    assert ok(door, "ann", "list_documents", {"collection": str(door.ids["a"])}) == listed
    assert (
        ok(door, "ann", "list_documents", {"collection": "team-a", "offset": 1})["documents"] == []
    )
    page = ok(door, "ann", "read_page", {"document_id": door.ids["a_doc"], "page": 1})
    assert SHARED in page["text"] and not page["truncated"] and page["page_count"] == 1
    assert "no page 2" in refused(
        door, "ann", "read_page", {"document_id": door.ids["a_doc"], "page": 2}
    )
    admin_names = {c["name"] for c in ok(door, "admin", "list_collections", {})["collections"]}
    assert {"team-a", "team-b"} <= admin_names


# --- refusals -------------------------------------------------------------------------------
def test_no_key_a_wrong_key_and_a_browser_session_are_refused(door: Door) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer rdk_wrong_key"}, {"Authorization": "Basic x"}):
        response = httpx.post(f"{door.url}/mcp", json=body, headers={**headers, **auth})
        assert response.status_code == 401, response.text
        error = response.json()["error"]  # a JSON-RPC error, as MCP clients read one
        assert error["data"]["status"] == 401 and "API key" in error["message"]
        assert response.headers["www-authenticate"].startswith("Bearer")
    login = httpx.post(
        f"{door.url}/login",
        data={"name": "ann", "password": TEST_PASSWORD},
        headers={"Origin": door.url},
    )
    assert login.status_code == 303 and login.cookies
    session = httpx.post(f"{door.url}/mcp", json=body, headers=headers, cookies=login.cookies)
    assert session.status_code in (401, 403)  # a session is no key (nor does it carry CSRF)
    with pytest.raises(BaseException) as failed:  # the SDK's client fails, saying why
        session_run(door.url, "rdk_wrong_key", lambda session: session.list_tools())
    assert "API key" in repr(failed.value)


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("search", {"query": "soup", "k": 0}, "k"),
    ("search", {"query": "soup", "k": 10**9}, "k"),
    ("search", {"query": "soup", "k": "all of them"}, "k"),
    ("search", {"query": ""}, "query"),
    ("search", {"query": "   "}, "empty"),
    ("search", {"query": "x" * 4001}, "query"),
    ("search", {"query": "soup", "collections": list(range(1, 1000))}, "collections"),
    ("search", {"query": "soup", "collections": ["n" * 5000]}, "collections"),
    ("search", {"query": "soup", "collections": []}, "collections"),
    ("search", {"query": "soup", "collections": [99999]}, "no collection"),
    ("search", {"query": "soup", "collections": ["team-b"]}, "no collection"),
    ("search", {"query": "soup", "collections": [{"id": 1}]}, "collections"),
    ("search", {}, "query"),
    ("ask", {"question": "y" * 100_000}, "question"),
    ("ask", {"question": "soup?", "collections": ["99999999999999999999999"]}, "no collection"),
    ("list_documents", {"collection": -1}, "collection"),
    ("list_documents", {"collection": 2**70}, "collection"),
    ("list_documents", {"collection": "team-a", "limit": 10**6}, "limit"),
    ("list_documents", {"collection": "team-a", "offset": -1}, "offset"),
    ("read_page", {"document_id": 0, "page": 1}, "document_id"),
    ("read_page", {"document_id": 2**64, "page": 1}, "document_id"),
    ("read_page", {"document_id": "1; DROP TABLE documents", "page": 1}, "document_id"),
    ("read_page", {"document_id": 1, "page": -5}, "page"),
    ("read_page", {"document_id": 10**12, "page": 1}, "no such document"),
    ("no_such_tool", {}, "no_such_tool"),
]


@pytest.mark.parametrize(("tool", "arguments", "named"), HOSTILE)
def test_hostile_arguments_are_clear_tool_errors(
    door: Door, tool: str, arguments: dict[str, Any], named: str
) -> None:
    assert named in refused(door, "ann", tool, arguments)


def test_a_message_too_large_is_refused_before_any_work(door: Door) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "search", "arguments": {"query": "z" * 1_000_000}},
    }
    response = httpx.post(
        f"{door.url}/mcp",
        json=body,
        headers={
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {door.keys['ann']}",
        },
    )
    assert response.status_code == 413
    assert ok(door, "ann", "list_collections", {})  # and the door still serves


# --- the no-leak probe ----------------------------------------------------------------------
def canary_reached(door: Door, who: str) -> dict[str, bool]:
    """Where team-b reaches ``who`` through the MCP tools: the canary (in its document) in
    any result or in the prompt ``ask`` gave the model, its name or document in a listing."""
    b, b_doc = door.ids["b"], door.ids["b_doc"]
    query = "What is the secret soup?"  # team-b's passage would match it best
    before = len(door.model.history)
    asked = call(door, who, "ask", {"question": query})
    prompts = " ".join(request.prompt for request in door.model.history[before:])
    probes = {
        "search": call(door, who, "search", {"query": query, "k": MAX_K}),
        "search team-b": call(door, who, "search", {"query": query, "collections": ["team-b"]}),
        "search by id": call(door, who, "search", {"query": query, "collections": [b]}),
        "ask": asked,
        "ask team-b": call(door, who, "ask", {"question": query, "collections": [b]}),
        "collections": call(door, who, "list_collections", {}),
        "documents": call(door, who, "list_documents", {"collection": b}),
        "page": call(door, who, "read_page", {"document_id": b_doc, "page": 1}),
    }
    # the listings name team-b and its document; every other tool would show the canary
    shows = {"collections": "team-b", "documents": "b_doc.md"}
    reached = {name: shows.get(name, CANARY) in _text(result) for name, result in probes.items()}
    reached["prompt"] = CANARY in prompts
    return reached


def _text(result: CallToolResult) -> str:
    texts = [getattr(block, "text", "") for block in result.content]
    return " ".join(texts) + json.dumps(result.structured_content)


def test_a_member_of_group_a_never_sees_group_bs_passages_through_any_tool(door: Door) -> None:
    for who in ("ann", "admin_only_a"):  # group A's member; a read-only key of team-a only
        assert not any(canary_reached(door, who).values())
        # not for want of answers: the same calls serve team-a's passage
        found = ok(door, who, "search", {"query": "What is the secret soup?", "k": MAX_K})
        assert {p["document_id"] for p in found["passages"]} == {door.ids["a_doc"]}
        answer = ok(door, who, "ask", {"question": "What is the secret soup?"})
        assert answer["grounded"] and CANARY not in json.dumps(answer)
    # the probe can fail: team-b's member and an unlimited admin key reach it everywhere
    assert all(canary_reached(door, "bob").values())
    assert all(canary_reached(door, "admin").values())


# --- rate limit -----------------------------------------------------------------------------
def test_the_api_rate_limit_applies_to_mcp_calls(tmp_path: Path) -> None:
    with served(tmp_path / "data", rate_limit_per_minute=1, rate_limit_burst=3) as limited:
        auth = limited.services.auth
        key = auth.keys.create(auth.users.create("eve", TEST_PASSWORD, "admin"))[0]
        # three messages: initialize, its notification, one call; the fourth is over
        session_run(limited.url, key, lambda session: session.list_tools())
        body = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
        response = httpx.post(
            f"{limited.url}/mcp",
            json=body,
            headers={
                "Accept": "application/json, text/event-stream",
                "Authorization": f"Bearer {key}",
            },
        )
        assert response.status_code == 429
        assert "too many requests" in response.json()["error"]["message"]
        assert int(response.headers["retry-after"]) >= 1


# --- the real models ------------------------------------------------------------------------
@pytest.mark.real
def test_an_agent_searches_and_asks_with_the_real_models(real_server: ServerProcess) -> None:
    """The bundled embedder finds a passage by meaning alone, and the bundled model answers
    through the door, citing only the document it was given. In a collection of its own:
    the real server is shared, and other tests' documents are about parking too."""
    url = real_server.url
    made = http.post(f"{url}/api/collections", json={"name": "mcp-garage"})
    assert made.status_code in (200, 201), made.text
    text = b"Visitors park in the east garage. The garage door code is 4417."
    uploaded = http.post(
        f"{url}/api/documents?collection=mcp-garage", files=[("file", ("garage.txt", text))]
    )
    assert uploaded.status_code == 201, uploaded.text
    document_id = uploaded.json()["documents"][0]["id"]
    wait_for(lambda: _indexed_over_http(url, document_id), timeout=120)

    async def search_and_ask(session: ClientSession) -> tuple[CallToolResult, CallToolResult]:
        where = ["mcp-garage"]
        query = {"query": "where can guests leave a car?", "collections": where}
        found = await session.call_tool("search", query)
        question = {"question": "What is the garage door code?", "collections": where}
        asked = await session.call_tool("ask", question)
        return found, asked

    found, asked = session_run(url, real_server.api_key, search_and_ask)
    assert not found.is_error and not asked.is_error, (found.content, asked.content)
    assert found.structured_content is not None and asked.structured_content is not None
    assert "east garage" in found.structured_content["passages"][0]["text"]
    answer = asked.structured_content
    assert answer["answer"].strip()
    assert {c["document_id"] for c in answer["citations"]} <= {document_id}


def _indexed_over_http(url: str, document_id: int) -> bool:
    document = http.get(f"{url}/api/documents/{document_id}").json()
    assert document["status"] != "failed", document
    return bool(document["status"] == "indexed")


def test_the_newest_protocol_revision_is_served_alike(door: Door) -> None:
    """The SDK's high-level ``Client`` probes for the stateless 2026 revision (no
    handshake) and takes it: the caller is still the key's, its calls still filtered."""

    async def run() -> tuple[str, CallToolResult, CallToolResult]:
        headers = {"Authorization": f"Bearer {door.keys['ann']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(f"{door.url}/mcp", http_client=http)) as client,
        ):
            found = await client.call_tool("search", {"query": "What is the secret soup?"})
            page = await client.call_tool(
                "read_page", {"document_id": door.ids["b_doc"], "page": 1}
            )
            return client.protocol_version, found, page

    version, found, page = asyncio.run(run())
    assert version in MODERN_PROTOCOL_VERSIONS
    assert found.structured_content is not None and CANARY not in _text(found)
    assert [p["document_id"] for p in found.structured_content["passages"]] == [door.ids["a_doc"]]
    assert page.is_error and "no such document" in _text(page)
