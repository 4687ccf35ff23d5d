"""The document viewer's Previous/Next through one answer's citations: built on the server
from the stored answer, limited to what the reader may still read, 404 for others' answers."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from litestar.testing import TestClient

from tests.conftest import add_user, fake_model, login, sse_events, wait_indexed

DOCS = (
    ("team-a", "canteen.md", "# Canteen\n\nThe canteen serves soup at noon on weekdays."),
    ("team-b", "kitchen.md", "# Kitchen\n\nThe kitchen makes soup for the canteen at noon."),
    ("team-a", "menu.md", "# Menu\n\nSoup of the day at the canteen: lentils at noon."),
)


def setup(client: TestClient[Any]) -> dict[str, Any]:
    """Three documents in two collections; ann reads both; ann's answer cites all three."""
    services = client.app.state.services
    a, b = services.store.ensure_collection("team-a"), services.store.ensure_collection("team-b")
    ann = add_user(client, "ann")
    services.auth.members.add(a, ann.id)
    services.auth.members.add(b, ann.id)
    add_user(client, "bob")
    for collection, name, text in DOCS:
        response = client.post(
            f"/api/documents?collection={collection}", files=[("file", (name, text.encode()))]
        )
        assert response.status_code == 201, response.text
        wait_indexed(client, response.json()["documents"][0]["id"])
    sign_in_as(client, "ann")
    fake_model(client).enqueue(["Soup [1], made in the kitchen [2], lentils [3]."])
    response = client.post("/api/chat", json={"message": "When is soup at the canteen?"})
    done = next(json.loads(d) for e, d in sse_events(response.text) if e == "done")
    assert len(done["citations"]) == 3, done
    return {"answer": done["message_id"], "citations": done["citations"], "a": a, "b": b}


def sign_in_as(client: TestClient[Any], name: str) -> None:
    client.cookies.clear()
    client.headers.pop("Authorization", None)
    login(client, name)


def link(citation: dict[str, Any], answer: int) -> str:
    return citation["url"].replace("#passage", f"&answer={answer}")


def nav_links(page: str) -> dict[str, str]:
    found = re.findall(r'id="citation-(prev|next)" href="([^"]+)"', page)
    return {name: html.unescape(href) for name, href in found}


def test_next_and_previous_walk_the_answers_citations_in_order(client: TestClient[Any]) -> None:
    made = setup(client)
    answer, citations = made["answer"], made["citations"]
    urls = [link(c, answer) for c in citations]
    first = client.get(urls[0])
    assert first.status_code == 200
    assert "Citation 1 of 3" in first.text
    assert nav_links(first.text) == {"next": f"{urls[1]}#passage"}
    back = re.search(r'id="back-to-conversation" href="/c/(\d+)#message-(\d+)"', first.text)
    assert back is not None and int(back.group(2)) == answer  # the viewer leads back to it
    assert client.get(f"/c/{back.group(1)}").status_code == 200
    middle = client.get(nav_links(first.text)["next"])
    assert "Citation 2 of 3" in middle.text
    assert '<mark id="passage">' in middle.text and "kitchen makes soup" in middle.text
    assert nav_links(middle.text) == {"prev": f"{urls[0]}#passage", "next": f"{urls[2]}#passage"}
    last = client.get(nav_links(middle.text)["next"])
    assert "Citation 3 of 3" in last.text
    assert nav_links(last.text) == {"prev": f"{urls[1]}#passage"}
    # The answer's own links carry the answer id, in the sources pane and in the answer.
    sources = client.get(f"/ui/messages/{answer}/sources").text
    assert html.escape(f"{urls[0]}#passage") in sources


def test_a_citation_no_longer_readable_is_skipped(client: TestClient[Any]) -> None:
    made = setup(client)
    answer, citations = made["answer"], made["citations"]
    ann = client.app.state.services.auth.users.by_name("ann")
    client.app.state.services.auth.members.remove(made["b"], ann.id)  # kitchen.md: team-b
    page = client.get(link(citations[0], answer))
    assert "Citation 1 of 2" in page.text
    assert nav_links(page.text) == {"next": f"{link(citations[2], answer)}#passage"}
    assert client.get(link(citations[1], answer)).status_code == 404  # its page, too


def test_the_inspector_shows_the_cited_documents_details_while_readable(
    client: TestClient[Any],
) -> None:
    made = setup(client)
    sources = client.get(f"/ui/messages/{made['answer']}/sources").text
    assert sources.count("Document details") == 3
    assert "kitchen.md" in sources and f'href="/collections/{made["b"]}"' in sources
    ann = client.app.state.services.auth.users.by_name("ann")
    client.app.state.services.auth.members.remove(made["b"], ann.id)
    sources = client.get(f"/ui/messages/{made['answer']}/sources").text
    assert "kitchen" not in sources  # neither its details nor its snippet
    assert sources.count("Document details") == 2


def test_other_peoples_and_bad_answer_ids(client: TestClient[Any]) -> None:
    made = setup(client)
    answer, first = made["answer"], made["citations"][0]
    plain = first["url"].replace("#passage", "")
    sign_in_as(client, "tester")  # an admin reads every document, but it is ann's answer
    assert client.get(plain).status_code == 200
    assert client.get(link(first, answer)).status_code == 404
    sign_in_as(client, "ann")
    question = answer - 1  # the question before it: not an answer
    for bad in (str(question), "999999"):
        assert client.get(f"{plain}&answer={bad}").status_code == 404, bad
    for bad in ("abc", "-1", "0", "²", str(2**63)):  # never an overflow (500)
        assert client.get(f"{plain}&answer={bad}").status_code in (400, 422), bad
    assert client.get(f"{plain}&chunk={2**63}&answer={answer}").status_code in (400, 422)
    # A passage the answer does not cite: the viewer, without the citation bar.
    other = client.get(f"/documents/{first['document_id']}/pages/1?answer={answer}")
    assert other.status_code == 200
    assert "citation-nav" not in other.text
