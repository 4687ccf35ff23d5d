"""The desktop UI, round two (issue #14), in real headless Chromium against an in-process
server: the upload dialog's collection, no upload for readers, document actions at 1024 and
1280 px, citation numbers, Send while streaming, no CSP violation on a conversation."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_PASSWORD
from tests.desktop_kit import SignedInServer, answered, page, server  # noqa: F401
from tests.server import sign_in
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import ask

pytestmark = [pytest.mark.browser]

SHOTS = Path("/tmp/ragdesk-round2")


@contextmanager
def person(
    browser: Any, server: SignedInServer, name: str, *, width: int = 1400, height: int = 860
) -> Iterator[tuple[Any, list[str]]]:
    """A page signed in as ``name`` (made with TEST_PASSWORD), and its console errors."""
    context = browser.new_context(viewport={"width": width, "height": height}, base_url=server.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    server.model.token_delay_s = 0.0
    sign_in(page, name, TEST_PASSWORD)
    try:
        yield page, errors
    finally:
        context.close()


def staff(server: SignedInServer, name: str, *, can_write: bool) -> int:
    """A staff user who is a member of the default collection."""
    services = server.app.state.services
    user = services.auth.users.create(name, TEST_PASSWORD, role="staff")
    services.auth.members.add(services.collection_id, user.id, can_write=can_write)
    return int(user.id)


def collection(server: SignedInServer, name: str) -> int:
    created = httpx.post(
        f"{server.url}/api/collections", json={"name": name}, headers=server.headers
    )
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


def filenames(server: SignedInServer, collection_id: int) -> set[str]:
    return {d.filename for d in server.app.state.services.store.list_documents(collection_id)}


# --- 1. the upload dialog's collection ------------------------------------------------------


def test_upload_lands_in_the_collection_its_table_was_opened_from(
    page: Any, server: SignedInServer, tmp_path: Path
) -> None:
    handbook = collection(server, "handbook")
    default = server.app.state.services.collection_id
    page.goto(f"/collections/{handbook}")
    page.click(".collection-view [data-open-dialog=upload-dialog]")
    choice = page.locator("#upload-collection")
    assert choice.is_visible()
    assert choice.input_value() == str(handbook)  # preselected: the table it came from
    names = choice.locator("option").evaluate_all("os => os.map(o => o.textContent.trim())")
    assert sorted(names) == ["default", "handbook"]
    memo = tmp_path / "handbook-memo.md"
    memo.write_text("# Handbook memo\n\nThe handbook memo belongs in the handbook.")
    page.set_input_files("#upload-input", str(memo))
    page.click("#upload-form button[type=submit]")
    page.locator("#upload-rows .upload-row", has_text="handbook-memo.md").wait_for()
    assert "handbook-memo.md" in filenames(server, handbook)
    assert "handbook-memo.md" not in filenames(server, default)

    page.goto("/")  # from the chat, the default collection unless another is chosen
    page.keyboard.press("u")
    assert page.locator("#upload-collection").input_value() == str(default)
    page.locator("#upload-collection").select_option(str(handbook))
    other = tmp_path / "second-memo.md"
    other.write_text("# Second memo\n\nA second memo for the handbook collection.")
    page.set_input_files("#upload-input", str(other))
    page.click("#upload-form button[type=submit]")
    page.locator("#upload-rows .upload-row", has_text="second-memo.md").wait_for()
    assert "second-memo.md" in filenames(server, handbook)


# --- 2. no upload for readers; a failed upload is a row --------------------------------------


UPLOAD_ENTRIES = "[data-action=upload], [data-open-dialog=upload-dialog]"


def test_readers_see_no_upload_and_a_failed_upload_is_a_row(
    browser: Any, server: SignedInServer, tmp_path: Path
) -> None:
    staff(server, "reader", can_write=False)
    default = server.app.state.services.collection_id
    with person(browser, server, "reader") as (page, errors):
        page.goto("/")
        assert page.locator(UPLOAD_ENTRIES).count() == 0
        page.keyboard.press("u")
        assert page.locator("dialog[open]").count() == 0
        page.goto(f"/collections/{default}")
        assert page.locator(UPLOAD_ENTRIES).count() == 0
        assert errors == []

    writer = staff(server, "writer", can_write=True)
    memo = tmp_path / "revoked.md"
    memo.write_text("# Revoked\n\nWritten while the right to write was taken away.")
    members = server.app.state.services.auth.members
    with person(browser, server, "writer") as (page, errors):
        page.goto("/")
        page.keyboard.press("u")
        page.set_input_files("#upload-input", str(memo))
        members.add(default, writer, can_write=False)  # taken away while the dialog is open
        page.click("#upload-form button[type=submit]")
        row = page.locator("#upload-rows .upload-row[data-status=failed]").first
        row.wait_for()
        assert "revoked.md" in row.inner_text()
        assert "You may not add documents to this collection" in row.inner_text()
        assert not page.locator("#toast").is_visible()

        members.remove(default, writer)  # no longer a member at all
        page.click("#upload-form button[type=submit]")
        page.locator("#upload-rows .upload-row[data-status=failed]").nth(1).wait_for()
        text = page.locator("#upload-rows .upload-row").first.inner_text()
        assert "This collection does not exist or is not open to you" in text
        assert "Not found" not in text

        page.route(  # refused before the server looked at it: still a row, in plain words
            "**/ui/documents",
            lambda route: route.fulfill(status=413, body="Request Entity Too Large"),
        )
        page.click("#upload-form button[type=submit]")
        page.locator("#upload-rows .upload-row[data-status=failed]").nth(2).wait_for()
        text = page.locator("#upload-rows .upload-row").first.inner_text()
        assert "too large" in text and "revoked.md" in text
        assert not page.locator("#toast").is_visible()
        # the browser logs each refused request itself; nothing else may be logged
        assert [e for e in errors if "Failed to load resource" not in e] == [], errors


# --- 3. the document table's actions at 1024 and 1280 px -------------------------------------


@pytest.mark.parametrize("window", [1024, 1280])
def test_document_actions_are_visible_and_work(
    browser: Any, server: SignedInServer, window: int
) -> None:
    name = f"quarterly-expenses-and-travel-reimbursement-guidelines-{window}.md"
    document_id = server.upload(name, f"# Guidelines {window}\n\nClaims within 30 days.".encode())
    default = server.app.state.services.collection_id
    with person(browser, server, "tester", width=window, height=768) as (page, errors):
        page.goto(f"/collections/{default}")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"documents-{window}.png"))
        scroller = page.locator(".table-scroll")
        assert scroller.evaluate("e => e.scrollWidth <= e.clientWidth"), "no sideways scroll"
        clip = scroller.bounding_box()
        row = page.locator(f"#document-{document_id}")
        actions = row.locator(".col-actions a, .col-actions button")
        assert actions.count() == 3
        for n in range(3):
            box = actions.nth(n).bounding_box()
            assert box is not None
            assert box["x"] >= 0 and box["x"] + box["width"] <= window, (n, box)
            assert clip["x"] <= box["x"] and box["x"] + box["width"] <= clip["x"] + clip["width"]
        with page.expect_download() as download:
            actions.nth(0).click()
        assert download.value.suggested_filename == name
        with page.expect_response(lambda r: r.url.endswith("/reingest")) as reingest:
            actions.nth(1).click()
        assert reingest.value.status == 200
        page.locator(f"#document-{document_id}[data-status=indexed]").wait_for(timeout=15_000)
        page.locator(f"#document-{document_id} .col-actions button.danger").click()
        page.click("#confirm-ok")  # the app's own dialog: the confirmation
        page.locator(f"#document-{document_id}").wait_for(state="detached")
        assert server.get(f"/api/documents/{document_id}").status_code == 404
        assert errors == []


def test_a_confirmed_delete_survives_the_row_refreshing_behind_the_dialog(
    page: Any, server: SignedInServer
) -> None:
    """A row being ingested replaces itself every second; a Delete confirmed after that still
    goes out (htmx drops a request whose element has left the page)."""
    document_id = server.upload("refreshing.md", b"# Refreshing\n\nA row that refreshes.")
    page.goto(f"/collections/{server.app.state.services.collection_id}")
    page.locator(f"#document-{document_id} .col-actions button.danger").click()
    page.locator("#confirm-dialog[open]").wait_for()
    before = page.locator(f"#document-{document_id}").element_handle()
    page.evaluate(  # what the row's own polling does: swap in a fresh copy of itself
        "id => htmx.ajax('GET', `/ui/documents/${id}/table-row`,"
        " {target: `#document-${id}`, swap: 'outerHTML'})",
        document_id,
    )
    page.wait_for_function("old => !document.body.contains(old)", arg=before)
    page.click("#confirm-ok")
    page.locator(f"#document-{document_id}").wait_for(state="detached")
    assert server.get(f"/api/documents/{document_id}").status_code == 404


# --- 4. citation numbers --------------------------------------------------------------------


def test_citations_keep_the_prompts_numbers_in_order_of_appearance(
    page: Any, server: SignedInServer
) -> None:
    filler = "Other matters of the office are written here at some length.\n\n" * 40
    for name, fact in (("holidays", "25 days"), ("sick", "tell HR"), ("bridge", "2 days")):
        text = f"# {name}\n\n{filler}Staff holidays: {fact} a year, the holidays policy."
        server.upload(f"{name}.md", text.encode())
    server.model.enqueue(["Sick days [2], holidays [1]."])
    answer = answered(page, "What is the staff holidays policy?", "Sick days")
    cites = answer.locator("a.cite")
    assert cites.all_inner_texts() == ["[2]", "[1]"]  # as the prompt numbered them
    assert answer.locator(".sources-button").inner_text() == "2 sources"
    answer.locator(".sources-button").click()
    sources = page.locator("#sources-pane .source")
    sources.first.wait_for()
    assert sources.locator(".badge").all_inner_texts() == ["[2]", "[1]"]  # cited first, first
    for n in range(2):  # [k] in the text is source [k] of the list
        title = sources.nth(n).locator(".source-head a").inner_text()
        assert str(cites.nth(n).get_attribute("title")).startswith(title)
    cites.first.click()  # the passage in the inspector, then in full
    with page.context.expect_page() as opened:
        page.click("#passage-open-full")
    viewer = opened.value
    viewer.wait_for_load_state()
    assert viewer.locator("#citation-position").inner_text() == "Citation 1 of 2"
    assert page.locator("#sources-pane .source.selected .badge").inner_text() == "[2]"
    viewer.close()

    page.goto("/")
    server.model.enqueue(["Bridge days [3]."])
    answer = answered(page, "What is the staff holidays policy again?", "Bridge days")
    assert answer.locator("a.cite").all_inner_texts() == ["[3]"]  # never renumbered
    assert answer.locator(".sources-button").inner_text() == "1 source"


# --- 5. Send while an answer streams ---------------------------------------------------------


def test_send_is_disabled_while_an_answer_streams(page: Any, server: SignedInServer) -> None:
    send = page.locator("#ask-form button[type=submit]")
    server.model.token_delay_s = 0.1
    server.model.enqueue([f" word{n}" for n in range(30)])
    page.goto("/")
    ask(page, "How do I upload files?")
    page.locator("article.msg.streaming .msg-body", has_text="word1").wait_for(timeout=10_000)
    assert send.is_disabled()
    page.fill("#question", "A second question, too soon")
    page.locator("#question").press("Enter")  # Enter sends nothing either
    page.wait_for_timeout(300)
    assert page.locator("article.msg.user").count() == 1
    assert page.input_value("#question") == "A second question, too soon"

    page.evaluate("htmx.trigger('#ask-form', 'submit')")  # past the button: the server refuses
    page.locator("#toast.visible", has_text="still being written").wait_for()
    assert page.locator("article.msg.user").count() == 1
    page.console_errors.clear()  # the refused request, logged by the browser and htmx

    page.locator("article.msg.assistant:not(.streaming)").last.wait_for(timeout=15_000)
    assert send.is_enabled()
    assert "word29" in page.locator("article.msg.assistant").last.inner_text()
    server.model.token_delay_s = 0.0
    ask(page, "How do I upload files, in good time?")
    page.locator("article.msg.assistant:not(.streaming)").nth(1).wait_for(timeout=10_000)
    assert page.locator("article.msg.user").count() == 2

    server.model.token_delay_s = 0.2  # Stop ends the stream: Send is back
    server.model.enqueue([f" stop{n}" for n in range(40)])
    ask(page, "How do I upload files, and then stop?")
    page.locator("article.msg.streaming .msg-body", has_text="stop1").wait_for(timeout=10_000)
    assert send.is_disabled()
    page.locator("article.msg.streaming .stop-button").click()
    page.locator("article.msg.assistant .stopped-mark").wait_for(timeout=10_000)
    assert send.is_enabled()
    server.model.token_delay_s = 0.0


# --- 6. the status bar ----------------------------------------------------------------------


class Gate:
    """Holds a method of ``inner`` until the test opens the gate."""

    def __init__(self, inner: Any, method: str) -> None:
        self.inner, self.method, self.gate = inner, method, threading.Event()
        self.entered = threading.Event()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name != self.method:
            return attribute

        def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            assert self.gate.wait(30)
            return attribute(*args, **kwargs)

        return held


def test_status_bar_counts_what_the_user_may_read_and_what_runs(
    browser: Any, server: SignedInServer
) -> None:
    services = server.app.state.services
    private = collection(server, "private")
    for n in range(3):
        text = f"# Private {n}\n\n" + "A private passage of some length.\n\n" * 60
        httpx.post(
            f"{server.url}/api/documents?collection=private",
            files=[("file", (f"private-{n}.md", text.encode()))],
            headers=server.headers,
        )
    user = services.auth.users.create("counter", TEST_PASSWORD, role="staff")
    mine = collection(server, "mine")
    services.auth.members.add(mine, user.id, can_write=True)
    created = httpx.post(
        f"{server.url}/api/documents?collection=mine",
        files=[("file", ("mine.md", b"# Mine\n\nMy one document, one passage."))],
        headers=server.headers,
    )
    document_id = created.json()["documents"][0]["id"]
    server.upload("mine.md", b"# Mine\n\nMy one document, one passage.")  # in default: not hers
    assert private and server.get(f"/api/documents/{document_id}").status_code == 200
    chunks = sum(d.chunk_count for d in services.store.list_documents(mine))
    with person(browser, server, "counter") as (page, _):
        page.goto("/")
        index = page.locator("#status-index")
        page.wait_for_function(
            "() => document.querySelector('#status-index').innerText.startsWith('Index: 1 doc')"
        )
        assert index.inner_text() == f"Index: 1 document, {chunks} passage{'s' * (chunks != 1)}"

        worker = services.retrieval.worker
        embedder = Gate(worker.embedder, "embed_batch")
        worker.embedder = embedder
        try:
            httpx.post(
                f"{server.url}/api/documents?collection=mine",
                files=[("file", ("held.md", b"# Held\n\nHeld in the embedder a while."))],
                headers=server.headers,
            )
            assert embedder.entered.wait(10)
            page.locator("#status-queue", has_text="1 in ingestion queue").wait_for(timeout=8000)
        finally:
            embedder.gate.set()
            worker.embedder = embedder.inner
        page.locator("#status-queue", has_text="0 in ingestion queue").wait_for(timeout=15_000)

        chat = services.require_chat()
        retriever = Gate(chat.retriever, "search")
        chat.retriever = retriever
        try:
            ask(page, "My one document?")
            assert retriever.entered.wait(10)
            page.locator("#status-requests", has_text="1 generating").wait_for(timeout=8000)
        finally:
            retriever.gate.set()
            chat.retriever = retriever.inner
        page.locator("article.msg.assistant:not(.streaming)").wait_for(timeout=10_000)
        page.locator("#status-requests", has_text="0 generating").wait_for(timeout=8000)


# --- 7. no CSP violation on a conversation page ----------------------------------------------


def test_no_console_error_through_ask_and_edit_and_resend(
    browser: Any, server: SignedInServer
) -> None:
    with person(browser, server, "tester") as (page, errors):
        page.goto("/")
        answered(page, "How do I upload files?")
        page.reload()
        answered(page, "And how do I upload many files?")
        page.locator("article.msg.assistant:not(.streaming)").nth(1).wait_for(timeout=10_000)
        assert page.locator("article.msg.streaming").count() == 0
        question = page.locator("article.msg.user").first
        question.locator(".edit-button").click()
        question.locator(".edit-form textarea").fill("How do I upload a folder?")
        question.locator(".edit-form button[type=submit]").click()
        page.click("#confirm-ok")  # the app's own dialog: the confirmation
        page.locator("article.msg.user", has_text="How do I upload a folder?").wait_for()
        page.locator("article.msg.assistant:not(.streaming)").first.wait_for(timeout=10_000)
        assert page.locator("article.msg.user").count() == 1
        page.wait_for_timeout(500)
        page.reload()
        page.wait_for_timeout(500)
        assert errors == [], errors
