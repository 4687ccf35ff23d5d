"""Server-rendered pages and htmx partials, with hostile strings everywhere they can appear."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from litestar.testing import TestClient

from tests.conftest import fake_model, sse_events, upload, wait_indexed

HOSTILE = '<img src="http://evil.example/x.png" onerror="alert(1)">'


class _MarkupAudit(HTMLParser):
    """Collects what injected markup would look like: images, inline scripts, on* handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "img" or (tag == "script" and "src" not in names):
            self.found.append(tag)
        self.found += [name for name in names if name.startswith("on")]


def injected_markup(html: str) -> list[str]:
    audit = _MarkupAudit()
    audit.feed(html)
    return audit.found


def test_home_page_is_the_app_shell(client: TestClient[Any]) -> None:
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    for landmark in (
        'id="messages"',
        'id="ask-form"',
        'id="sources-pane"',
        'id="upload-dialog"',
        'id="statusbar"',
    ):
        assert landmark in html
    assert "/static/vendor/htmx-2.0.11.min.js" in html
    assert not re.search(r"<script>(?!</script>)", html)  # no inline script
    assert client.get("/static/vendor/htmx-2.0.11.min.js").status_code == 200


def test_hostile_filename_and_content_are_escaped_everywhere(client: TestClient[Any]) -> None:
    body = f"{HOSTILE}\n\nThe canteen opens at noon.".encode()
    created = upload(client, (f"{HOSTILE}.txt", body)).json()["documents"][0]
    wait_indexed(client, created["id"])
    for url in (
        "/",
        "/ui/library",
        f"/ui/documents/{created['id']}/row",
        f"/documents/{created['id']}/pages/1",
    ):
        html = client.get(url).text
        assert injected_markup(html) == [], url


def test_ask_then_stream_renders_escaped_tokens_and_linked_citations(
    client: TestClient[Any],
) -> None:
    created = upload(
        client, ("canteen.md", b"# Canteen\n\nThe canteen opens at noon daily.")
    ).json()
    document_id = created["documents"][0]["id"]
    wait_indexed(client, document_id)
    fake_model(client).enqueue(["<b>", "Noon", " daily", " [1]."])
    turn = client.post("/ui/ask", data={"message": "When does the canteen open?"})
    assert turn.status_code == 200
    assert turn.headers["hx-push-url"].startswith("/c/")
    question_id = int(re.search(r'sse-connect="/ui/answers/(\d+)/stream"', turn.text).group(1))  # type: ignore[union-attr]

    stream = client.get(f"/ui/answers/{question_id}/stream")
    events = sse_events(stream.text)
    name, reading = events[0]  # what the model reads, shown while it prefills
    assert name == "sources" and "Reading 1 passage:" in reading
    assert f'href="/documents/{document_id}/pages/1?chunk=' in reading
    assert "[1] Canteen, page 1" in reading
    tokens = [data for name, data in events if name == "token"]
    assert tokens[0].strip() == "<p>&lt;b&gt;</p>"  # each event: the answer so far, rendered
    assert tokens[-1].strip() == "<p>&lt;b&gt;Noon daily [1].</p>"
    name, done = events[-1]
    assert name == "done"
    assert f'href="/documents/{document_id}/pages/1?chunk=' in done
    assert 'id="sources-pane" hx-swap-oob="true"' in done
    assert "<b>" not in done

    again = sse_events(client.get(f"/ui/answers/{question_id}/stream").text)
    assert [name for name, _ in again] == ["done"]  # a reconnect replays, never regenerates
    assert len(fake_model(client).history) == 1


def test_document_page_highlights_the_cited_passage(client: TestClient[Any]) -> None:
    created = upload(
        client, ("g.md", b"# Guide\n\nFirst part.\n\n# Other\n\nSecond part here.")
    ).json()
    document_id = created["documents"][0]["id"]
    wait_indexed(client, document_id)
    hit = client.post("/api/search", json={"query": "second part", "k": 1}).json()["hits"][0]
    page = client.get(f"/documents/{document_id}/pages/1?chunk={hit['chunk_id']}")
    assert page.status_code == 200
    assert '<mark id="passage">' in page.text
    marked = page.text.split('<mark id="passage">')[1].split("</mark>")[0]
    assert "Second part here." in marked
    assert client.get(f"/documents/{document_id}/pages/9").status_code == 404
    assert client.get("/documents/999/pages/1").status_code == 404


def test_upload_form_reports_each_file(client: TestClient[Any]) -> None:
    response = client.post(
        "/ui/documents",
        files=[("file", ("ok.txt", b"hello there")), ("file", ("bad.exe", b"MZ\x00\x00binary"))],
    )
    assert response.status_code == 200
    assert 'data-status="queued"' in response.text
    assert 'data-status="rejected"' in response.text and "bad.exe" in response.text


def test_htmx_errors_render_the_error_partial(client: TestClient[Any]) -> None:
    response = client.post("/ui/ask", data={"message": "   "}, headers={"HX-Request": "true"})
    assert response.status_code == 422
    assert 'role="alert"' in response.text and "<html" not in response.text
    page = client.get("/c/424242")
    assert page.status_code == 404 and "<html" in page.text


def test_final_answer_is_sanitised_markdown_in_the_stream_and_on_reload(
    client: TestClient[Any],
) -> None:
    created = upload(client, ("canteen.md", b"# Canteen\n\nThe canteen opens at noon.")).json()
    wait_indexed(client, created["documents"][0]["id"])
    fake_model(client).enqueue(
        [
            "Opening:\n\n",
            "- **noon** [1]\n",
            "- ",
            HOSTILE,
            "\n\n",
            "```\nopen()\n```\n",
            "[x](javascript:alert(1))",
        ]
    )
    turn = client.post("/ui/ask", data={"message": "When does the canteen open?"})
    question_id = int(re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1))  # type: ignore[union-attr]
    events = sse_events(client.get(f"/ui/answers/{question_id}/stream").text)
    name, done = events[-1]
    assert name == "done"
    page = client.get(turn.headers["hx-push-url"]).text
    for html in (done, page):
        assert '<li><strong>noon</strong> <a class="cite"' in html
        assert "<pre><code>open()\n</code></pre>" in html
        assert injected_markup(html) == []
        assert "javascript:" not in html.replace("[x](javascript:alert(1))", "")
    assert all("<img" not in data for _, data in events)


def test_an_answer_renders_as_markdown_while_it_is_written(client: TestClient[Any]) -> None:
    """#26 item 8: answers rendered as plain text until the last token."""
    created = upload(client, ("canteen.md", b"# Canteen\n\nThe canteen opens at noon daily."))
    wait_indexed(client, created.json()["documents"][0]["id"])
    fake_model(client).enqueue(["**Opening", " hours**", ":\n\n- noon", " [1]\n- six", " [1]"])
    turn = client.post("/ui/ask", data={"message": "When does the canteen open?"})
    question_id = int(re.search(r'sse-connect="/ui/answers/(\d+)/stream"', turn.text).group(1))  # type: ignore[union-attr]
    events = sse_events(client.get(f"/ui/answers/{question_id}/stream").text)
    tokens = [data for name, data in events if name == "token"]
    assert "**Opening" in tokens[0]  # not closed yet: shown as written
    assert "<strong>Opening hours</strong>" in tokens[1]  # closed: bold at once
    assert "<li>noon</li>" in tokens[2] and "<ul>" in tokens[2]  # a list as soon as it starts
    assert "<li>noon [1]</li>" in tokens[3]
    assert tokens[-1].count("<li>") == 2
    assert "<script" not in "".join(tokens)
