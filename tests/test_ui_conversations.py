"""Conversations and documents in real headless Chromium: rename, pin, export, delete,
regenerate, edit and resend, citations that select their source, the document table."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.desktop_kit import SignedInServer, answered, page, server  # noqa: F401 - fixtures
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture

pytestmark = [pytest.mark.browser]


def test_rename_pin_export_and_delete_a_conversation(page: Any, server: SignedInServer) -> None:
    server.model.enqueue(["Open the upload dialog [1]."])
    page.goto("/")
    answered(page, "How do I upload documents?")
    url = page.url

    page.click("#rename-button")
    page.fill("#rename-input", "Uploading <b>files</b>")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('#conversation-title').innerText.includes('Uploading')"
    )
    assert page.locator("#conversation-title").inner_text() == "Uploading <b>files</b>"
    current = page.locator("#conversation-list a[aria-current=page]")
    assert current.inner_text() == "Uploading <b>files</b>"
    assert not page.locator("#rename-dialog").evaluate("d => d.open")

    page.click("#pin-button")
    page.wait_for_function("() => document.querySelector('#pin-button').innerText === 'Unpin'")
    assert page.locator("#conversation-list .group-label").first.inner_text() == "Pinned"
    page.reload()
    assert page.locator("#pin-button").get_attribute("aria-pressed") == "true"

    with page.expect_download() as download:
        page.click("#export-button")
    exported = Path(download.value.path()).read_text()
    assert download.value.suggested_filename.endswith(".md")
    assert exported.startswith("# Uploading <b>files</b>\n")
    assert "Open the upload dialog [1]." in exported

    page.fill("#conversation-filter", "zzz-no-such")
    page.wait_for_selector("#conversation-list .empty-list")
    page.fill("#conversation-filter", "uploading")
    page.wait_for_selector("#conversation-list a[aria-current=page]")

    page.click("#delete-conversation")
    page.click("#confirm-ok")  # the app's own dialog: "Delete this conversation…?"
    page.wait_for_url(lambda u: u.rstrip("/") == server.url)
    assert server.get(url.removeprefix(server.url)).status_code == 404
    assert page.locator("#conversation-list", has_text="Uploading").count() == 0


def finished(page: Any, text: str) -> None:
    """Wait for the answer holding ``text`` to be finished, so stored: its streamed text
    shows before that, and a reload in between would show the question unanswered."""
    page.wait_for_function(
        "t => [...document.querySelectorAll('#messages article.msg.assistant:not(.streaming)')]"
        ".some(a => a.innerText.includes(t))",
        arg=text,
    )


def test_regenerate_and_edit_and_resend(page: Any, server: SignedInServer) -> None:
    model = server.model
    model.enqueue(["First answer [1]."])
    page.goto("/")
    answered(page, "How do I upload files here?", "First answer")
    model.enqueue(["Second answer [1]."])
    page.locator("article.msg.assistant .regenerate-button").last.click()
    finished(page, "Second answer")
    assert "First answer" not in page.locator("#messages").inner_text()
    page.reload()
    assert "Second answer" in page.locator("#messages").inner_text()

    model.enqueue(["Edited answer [1]."])
    question = page.locator("article.msg.user").first
    question.locator(".edit-button").click()
    form = question.locator(".edit-form")
    assert form.is_visible()
    form.locator("textarea").fill("How do I upload documents, edited?")
    form.locator("button[type=submit]").click()
    page.click("#confirm-ok")  # the app's own dialog: "Resend this question?"
    finished(page, "Edited answer")
    page.reload()
    text = page.locator("#messages").inner_text()
    assert "How do I upload documents, edited?" in text and "Edited answer" in text
    assert "Second answer" not in text and "upload files here" not in text
    assert page.locator("article.msg").count() == 2


def test_a_citation_selects_its_source_in_the_inspector(page: Any, server: SignedInServer) -> None:
    server.model.enqueue(["Drop the files [1]."])
    page.goto("/")
    answer = answered(page, "How do I upload, with a citation?")
    page.locator("#sources-pane").evaluate("e => e.innerHTML = ''")  # as if nothing selected
    answer.locator("a.cite").first.click()
    page.locator("#passage-view mark#passage").wait_for()  # the passage, in the window
    selected = page.locator("#sources-pane .source.selected")
    selected.wait_for()
    assert "[1]" in selected.inner_text()
    assert "selected" in (answer.get_attribute("class") or "")


def test_document_table_sorts_filters_and_remembers_the_collection(
    page: Any, server: SignedInServer
) -> None:
    zebra = server.upload("zebra-notes.md", b"# Zebra\n\nStripes, " * 50)
    page.goto("/")
    page.click("#library a[data-collection-link]")
    page.wait_for_url("**/collections/*")
    assert page.evaluate("localStorage.getItem('ragdesk.collection')") == "1"

    def names() -> list[str]:
        return [
            n.strip()
            for n in page.locator("#document-table tbody td.col-name > a").all_inner_texts()
        ]

    page.click("th.col-name button")
    page.wait_for_selector("th.col-name[aria-sort=ascending]")
    assert names() == sorted(names(), key=str.casefold) and "Zebra" in names()
    page.click("th.col-name button")
    page.wait_for_selector("th.col-name[aria-sort=descending]")
    assert names()[0] == "Zebra"
    page.click("th.col-size button")
    page.wait_for_selector("th.col-size[aria-sort=ascending]")
    assert names()[-1] == "Zebra"  # the largest file

    page.fill("#document-filter", "zebra")
    page.wait_for_function(
        "() => document.querySelectorAll('#document-table tbody tr').length === 1"
    )
    assert names() == ["Zebra"]
    assert page.locator("th.col-size").get_attribute("aria-sort") == "ascending"  # sort kept
    page.reload()
    assert page.locator("#library li.selected a").get_attribute("data-collection-link") == "1"

    row = page.locator(f"#document-{zebra}")
    with page.expect_download() as download:
        row.locator("a[download]").click()
    assert Path(download.value.path()).read_bytes() == b"# Zebra\n\nStripes, " * 50
    before = server.get(f"/api/documents/{zebra}").json()["updated_at"]
    with page.expect_response(lambda r: r.url.endswith(f"/ui/documents/{zebra}/reingest")) as sent:
        row.locator("button[aria-label^='Re-ingest']").click()
    assert sent.value.status == 200
    page.wait_for_selector(f"#document-{zebra}[data-status=indexed]", timeout=10_000)
    again = server.get(f"/api/documents/{zebra}").json()
    assert again["updated_at"] > before and again["chunks"] >= 1
    row.locator("button[aria-label^='Delete']").click()
    page.click("#confirm-ok")  # the app's own dialog: "Delete this document…?"
    page.wait_for_selector(f"#document-{zebra}", state="detached")
    assert server.get(f"/api/documents/{zebra}").status_code == 404
