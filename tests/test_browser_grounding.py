"""Grounding made visible in real headless Chromium: an unsupported sentence is underlined
with a "no source" badge and a tooltip, an answer citing nothing has a note under it, in
the light and the dark theme, with no CSP violation (no inline style)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.chat.rendering import UNGROUNDED_NOTE
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import InProcessServer, ask, page, server  # noqa: F401

pytestmark = [pytest.mark.browser]

INVENTED = "Uploads are limited to five files per minute for every visitor."


def test_unsupported_sentences_and_ungrounded_answers_are_marked(
    page: Any,  # noqa: F811
    server: InProcessServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    server.model.enqueue(["Open Upload documents and drop the files [1].", f" {INVENTED}"])
    page.goto("/")
    ask(page, "How do I upload files?")
    answer = page.locator("article.msg.assistant:not(.streaming)").last
    answer.wait_for(timeout=10_000)
    marked = answer.locator(".msg-body .unsupported")
    assert marked.count() == 1 and marked.inner_text() == INVENTED
    style = marked.evaluate(
        "e => { const s = getComputedStyle(e);"
        " return [s.textDecorationLine, s.textDecorationStyle]; }"
    )
    assert style == ["underline", "dotted"]
    badge = answer.locator(".msg-body .no-source")
    assert badge.inner_text() == "no source" and badge.is_visible()
    assert "No cited passage supports this sentence" in (badge.get_attribute("title") or "")
    assert answer.locator("a.cite").count() == 1  # the supported sentence keeps its link
    assert answer.locator(".grounding-note").count() == 0

    # Shown (fake_settings does not withhold it), an answer nothing supports is marked
    # throughout and noted as ungrounded.
    server.model.enqueue([f" {INVENTED}"])
    ask(page, "How many files can I upload at once?")
    page.locator("article.msg.assistant:not(.streaming)").nth(1).wait_for(timeout=10_000)
    bare = page.locator("article.msg.assistant:not(.streaming)").last
    note = bare.locator(".grounding-note")
    note.wait_for(timeout=5_000)
    assert note.inner_text().endswith(UNGROUNDED_NOTE)

    page.reload()  # the stored answers render the same way
    assert page.locator("article.msg.assistant .unsupported").count() == 2
    assert page.locator("article.msg.assistant .grounding-note").count() == 1
    shots = Path(os.environ.get("GROUNDING_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "grounding.png"))
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(shots / "grounding-dark.png"))
    page.emulate_media(color_scheme="light")
