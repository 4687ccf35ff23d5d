"""Issue #14's missing pieces in real headless Chromium against an in-process server: an
answer's Copy button, 👍/👎 with the comment popover, ‹ 1/2 › answer versions, the app's
own confirmation and rename dialogs, and the rough edges (focus after sign-in, the user
name kept after a failed sign-in, suggested first questions, re-uploading a file)."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_PASSWORD, TEST_USER
from tests.desktop_kit import SignedInServer, answered, server  # noqa: F401
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import watched_page

pytestmark = [pytest.mark.browser]

SHOTS = Path("/tmp/ragdesk-feedback")


@pytest.fixture
def page(browser: Any, server: SignedInServer) -> Iterator[Any]:
    """A signed-in page that may use the clipboard, failing on console errors."""
    with watched_page(browser, server, clipboard=True) as (page, errors):
        yield page
        assert errors == [], errors


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), caret="initial")  # hiding the caret
    # writes style="" on the focused field, which an htmx swap then copies (a CSP error)


# --- 1. Copy ----------------------------------------------------------------------------------


def test_copy_copies_the_answer_with_its_markers_and_says_so(
    page: Any, server: SignedInServer
) -> None:
    server.model.enqueue(["Open **Upload** and drop the files [1]."])
    page.goto("/")
    answer = answered(page, "How do I upload a file to copy?", "drop the files")
    copy = answer.locator(".copy-answer")
    copy.focus()  # keyboard: Tab reaches it, Enter presses it
    page.keyboard.press("Enter")
    page.wait_for_function("b => b.textContent === 'Copied'", arg=copy.element_handle())
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == "Open **Upload** and drop the files [1]."
    page.wait_for_function("b => b.textContent === 'Copy'", arg=copy.element_handle())


# --- 2. 👍/👎 and the comment popover ----------------------------------------------------------


def test_thumbs_then_an_optional_comment_in_a_popover(page: Any, server: SignedInServer) -> None:
    server.model.enqueue(["Drop the files on the dialog [1]."])
    page.goto("/")
    answer = answered(page, "How do I upload for feedback?", "Drop the files")
    answer_id = int(answer.get_attribute("data-message"))
    answer.locator("[aria-label='Bad answer']").click()
    popover = answer.locator(".feedback-form")
    popover.wait_for(state="visible")
    page.wait_for_function("() => document.activeElement.name === 'comment'")  # ready to type
    assert answer.locator("[aria-label='Bad answer']").get_attribute("aria-pressed") == "true"
    page.keyboard.type("It should mention the size limit")
    shot(page, "feedback-popover")
    popover.locator("button[type=submit]").click()
    answer.locator(".feedback-thanks").wait_for()
    answer.locator(".feedback-form").wait_for(state="hidden")
    mine = server.get(f"/api/answers/{answer_id}/feedback").json()
    assert (mine["rating"], mine["comment"]) == ("down", "It should mention the size limit")

    answer.locator("[aria-label='Good answer']").click()  # changed; Escape skips the comment
    answer.locator(".feedback-form").wait_for(state="visible")
    page.wait_for_function("() => document.activeElement.name === 'comment'")
    page.keyboard.press("Escape")
    answer.locator(".feedback-form").wait_for(state="hidden")
    assert answer.locator("[aria-label='Good answer']").get_attribute("aria-pressed") == "true"
    mine = server.get(f"/api/answers/{answer_id}/feedback").json()
    assert (mine["rating"], mine["comment"]) == ("up", "It should mention the size limit")

    conversation_url = page.url
    page.goto("/admin/feedback")
    rows = page.locator(".feedback-entry")
    first = rows.filter(has_text="How do I upload for feedback?")
    assert "It should mention the size limit" in first.inner_text()
    shot(page, "feedback-admin")

    page.goto(conversation_url)
    answer = page.locator(f"article.msg.assistant[data-message='{answer_id}']")
    answer.locator("[aria-label='Good answer']").click()  # pressed again: taken back
    page.wait_for_function("() => !document.querySelector('.feedback-choice[aria-pressed=true]')")
    assert server.get(f"/api/answers/{answer_id}/feedback").status_code == 404

    # One popover at a time: another answer's thumb closes the first one's.
    server.model.enqueue(["A second answer [1]."])
    answered(page, "And how large may the files be?", "second answer")
    second = page.locator("article.msg.assistant:not(.streaming)").last
    answer.locator("[aria-label='Bad answer']").click()
    answer.locator(".feedback-form").wait_for(state="visible")
    second.locator("[aria-label='Good answer']").click()
    second.locator(".feedback-form").wait_for(state="visible")
    answer.locator(".feedback-form").wait_for(state="hidden")
    assert page.locator(".feedback-form:visible").count() == 1


# --- 3. answer versions ---------------------------------------------------------------------


def test_regenerate_keeps_versions_to_switch_between(page: Any, server: SignedInServer) -> None:
    server.model.enqueue(["The first version [1]."])
    page.goto("/")
    answered(page, "How do I upload, in two versions?", "first version")
    server.model.enqueue(["The second version [1]."])
    page.locator("article.msg.assistant .regenerate-button").last.click()
    page.wait_for_function(
        "() => document.querySelector('#messages').innerText.includes('second version')"
    )
    answer = page.locator("article.msg.assistant").last
    assert answer.locator(".version-count").inner_text() == "2/2"
    assert answer.locator("[aria-label='Next version']").is_disabled()
    answer.locator("[aria-label='Previous version']").click()
    page.wait_for_function(
        "() => document.querySelector('#messages').innerText.includes('first version')"
    )
    answer = page.locator("article.msg.assistant").last
    assert answer.locator(".version-count").inner_text() == "1/2"
    assert "second version" not in page.locator("#messages").inner_text()
    shot(page, "versions")
    page.reload()  # the version chosen last stays
    assert "first version" in page.locator("#messages").inner_text()
    answer = page.locator("article.msg.assistant").last
    answer.locator("[aria-label='Next version']").focus()
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('#messages').innerText.includes('second version')"
    )


# --- 4. the app's own dialogs --------------------------------------------------------------


def test_delete_and_resend_ask_in_the_apps_own_dialog(page: Any, server: SignedInServer) -> None:
    native: list[str] = []

    def refuse(dialog: Any) -> None:  # a browser confirm() would land here
        native.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    server.model.enqueue(["Drop them [1]."])
    page.goto("/")
    answered(page, "How do I upload before deleting?", "Drop them")
    page.click("#delete-conversation")
    dialog = page.locator("#confirm-dialog")
    dialog.wait_for(state="visible")
    assert "How do I upload before deleting?" in dialog.inner_text()  # names it
    shot(page, "confirm-delete-conversation")
    page.click("#confirm-cancel")
    assert not dialog.is_visible()
    assert page.locator("article.msg.assistant").count() == 1  # nothing deleted

    document_id = server.upload("to-delete.md", b"# Delete me\n\nA file to delete.")
    page.goto(f"/collections/{server.app.state.services.collection_id}")
    page.click(f"#document-{document_id} button[aria-label^='Delete']")
    dialog.wait_for(state="visible")
    assert "to-delete.md" in page.locator("#confirm-text").inner_text()
    assert page.locator("#confirm-ok").inner_text() == "Delete"
    shot(page, "confirm-delete-document")
    page.click("#confirm-ok")
    page.wait_for_selector(f"#document-{document_id}", state="detached")
    assert native == []  # no browser confirm() anywhere


def test_the_rename_dialog_is_wide_with_its_title_selected(
    page: Any, server: SignedInServer
) -> None:
    server.model.enqueue(["Drop them [1]."])
    page.goto("/")
    answered(page, "How do I upload before renaming?", "Drop them")
    page.click("#rename-button")
    field = page.locator("#rename-input")
    field.wait_for(state="visible")
    assert field.evaluate("e => e.getBoundingClientRect().width") >= 400
    selected = page.evaluate(
        "() => { const e = document.activeElement;"
        " return [e.id, e.selectionStart, e.selectionEnd, e.value.length]; }"
    )
    assert selected[0] == "rename-input" and selected[1] == 0 and selected[2] == selected[3]
    shot(page, "rename")
    page.keyboard.type("Renamed at once")  # typing replaces the selected title
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('#conversation-title').textContent === 'Renamed at once'"
    )


# --- 5. rough edges --------------------------------------------------------------------------


def test_sign_in_focus_and_a_failed_sign_in_keeps_the_name(
    browser: Any, server: SignedInServer
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=server.url)
    page = context.new_page()
    try:
        page.goto("/login")
        page.fill("#login-name", TEST_USER)
        page.fill("#login-password", "not the password")
        page.click("#login-submit")
        page.wait_for_selector(".login .error")
        assert page.input_value("#login-name") == TEST_USER  # kept
        assert page.input_value("#login-password") == ""
        assert page.evaluate("document.activeElement.id") == "login-password"
        page.fill("#login-password", TEST_PASSWORD)
        page.click("#login-submit")
        page.wait_for_selector("#ask-form")
        page.wait_for_function("() => document.activeElement.id === 'question'")
        page.keyboard.type("typed straight away")
        assert page.input_value("#question") == "typed straight away"
        page.goto("/")  # not on every page: the single-key shortcuts need no text box focused
        assert page.evaluate("document.activeElement.id") != "question"
    finally:
        context.close()


def test_an_empty_chat_suggests_questions_from_document_titles(
    page: Any, server: SignedInServer
) -> None:
    page.goto("/")
    suggestions = page.locator(".suggestions .suggestion")
    suggestions.first.wait_for()
    texts = suggestions.all_inner_texts()
    assert "What does “Upload” say?" in texts  # from the uploaded "# Upload" document
    shot(page, "suggestions")
    server.model.enqueue(["It says to drop the files [1]."])
    page.locator(".suggestion", has_text="Upload").click()
    page.locator("article.msg.user", has_text="What does “Upload” say?").wait_for()
    page.locator("article.msg.assistant:not(.streaming)").wait_for(timeout=10_000)
    assert not suggestions.first.is_visible()  # the chat is no longer empty


def test_re_uploading_identical_content_says_so_on_its_row(
    page: Any, server: SignedInServer, tmp_path: Path
) -> None:
    file = tmp_path / "same.md"
    file.write_bytes(b"# Same\n\nThe same content, uploaded twice.")
    page.goto("/")
    page.keyboard.press("u")
    for _ in range(2):
        page.set_input_files("#upload-input", str(file))
        with page.expect_response(lambda r: r.url.endswith("/ui/documents")):
            page.click("#upload-form button[type=submit]")
    rows = page.locator("#upload-rows .upload-row", has_text="same.md")
    page.wait_for_function(
        "() => document.querySelectorAll('#upload-rows .duplicate-note').length === 1"
    )
    assert rows.count() == 1  # one row, not a second one
    assert "Already uploaded" in rows.first.inner_text()
    shot(page, "duplicate-upload")


def test_a_new_api_key_has_a_copy_button(page: Any, server: SignedInServer) -> None:
    """One-time secrets (a new key here, a new user's password on the admin page, which
    shares the handler) are copied with a button, not by selecting text."""
    page.goto("/account")
    page.fill("#new-key-form input[name=name]", "scripts")
    page.click("#new-key-form button[type=submit]")
    key = page.locator("#new-key-value").inner_text().strip()
    assert key.startswith("rdk_")
    copy = page.locator("[data-copy-from=new-key-value]")
    copy.click()
    page.wait_for_function("b => b.textContent === 'Copied'", arg=copy.element_handle())
    assert page.evaluate("navigator.clipboard.readText()") == key
