"""Grounding made visible: each sentence no cited passage supports is marked in the web UI
("no source", with why) and listed in ``/api/chat``, the conversation API and grounded
``/v1``; an answer that cites nothing says so under it."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from app.chat.answering import NO_ANSWER, NOTHING_FOUND, WITHHELD
from app.chat.markdown import TAGS, render_markdown
from app.chat.records import Citation, Message
from app.chat.rendering import UNGROUNDED_NOTE, render_answer, ungrounded
from llm.support import Unsupported, unsupported_sentences
from tests.conftest import fake_model, sse_events, upload, wait_indexed
from tests.test_markdown import HOSTILE, tags
from tests.test_openai import chunks
from tests.test_openai_grounded import api, ask  # noqa: F401 - the grounded /v1 fixture

CITATION = Citation(1, 7, 3, "Canteen guide", 1, 0, 30, "The canteen opens at noon daily.")
SUPPORTED = "The canteen opens at noon daily [1]."
INVENTED = "Parking is free for all visitors on weekends."
SENTINELS = "\ue000\ue001\ue002"


def answer(content: str, *unsupported: Unsupported, cited: bool = True) -> Message:
    return Message(
        1, 1, "assistant", content, (CITATION,) if cited else (), 0.0, unsupported=unsupported
    )


def flag(content: str, sentence: str, reason: Any = "no source") -> Unsupported:
    start = content.index(sentence)
    return Unsupported(start, start + len(sentence), sentence, reason)


def unmarked(html: str) -> str:
    """The HTML without our marks: what the answer renders as when nothing is flagged."""
    html = re.sub(r'<span class="no-source"[^>]*>[^<]*</span>', "", html)
    return re.sub(r'<span class="unsupported"[^>]*>|</span>', "", html)


def marked_text(html: str) -> str:
    """The text inside the unsupported spans, joined."""
    inside = re.findall(r'<span class="unsupported"[^>]*>(.*?)</span>', html)
    return re.sub(r"<[^>]+>", "", "".join(inside))


# --- the HTML ---------------------------------------------------------------------------------
def test_only_the_unsupported_sentence_is_marked_with_a_badge_and_why() -> None:
    content = f"{SUPPORTED} {INVENTED}"
    html = str(render_answer(answer(content, flag(content, INVENTED))))
    assert marked_text(html) == INVENTED
    assert html.count('class="unsupported"') == 1 and html.count('class="no-source"') == 1
    spans = [attrs for tag, attrs in tags(html) if tag == "span"]
    title = "No cited passage supports this sentence — check it (it cites no source)."
    assert [s["title"] for s in spans] == [title, title]
    assert re.search(r'class="no-source"[^>]*>no source</span>', html)
    # The supported sentence keeps its citation link and is not marked.
    assert '<a class="cite"' in html and html.index("</a>") < html.index('class="unsupported"')
    assert unmarked(html) == str(render_answer(answer(content)))


def test_a_sentence_its_citation_does_not_back_says_so() -> None:
    content = f"{SUPPORTED} The canteen serves free lobster on Fridays [1]."
    sentence = "The canteen serves free lobster on Fridays [1]."
    html = str(render_answer(answer(content, flag(content, sentence, "not in the cited source"))))
    assert marked_text(html) == "The canteen serves free lobster on Fridays [1]."
    assert "the passage it cites does not say this" in html
    assert re.search(r'class="no-source"[^>]*>not in source</span>', html)


MARKDOWN = [
    "- **Open** the settings menu now.\n- Choose *Upload* from the list.",
    "1. First step is this one.\n2. Second step goes here.",
    "## A heading with several words ##\n\n**All of it is bold here.**",
    "| Format | Pages |\n| --- | --- |\n| PDF files work well | yes they do |",
    "> Quote with many words here. Another one inside the quote.",
    "```\nprint('hello world there now')\n```\n\nAfter the code block comes text.",
    "Run `ragdesk serve --port 8000` to start it. Then open the browser window.",
    "A [link to the docs](http://x.example) is here. Then *(some words)* follow here.",
    "Escaped \\*stars\\* stay literal in this sentence \\*",
]


@pytest.mark.parametrize("text", MARKDOWN)
def test_marking_changes_no_markdown_structure(text: str) -> None:
    """Every sentence flagged: removing the marks gives exactly the unmarked rendering."""
    flagged = [(u.start, u.end, u.reason) for u in unsupported_sentences(text, {})]
    assert flagged
    html = str(render_markdown(text, flagged=flagged))
    assert 'class="unsupported"' in html
    assert unmarked(html) == str(render_markdown(text))
    assert not set(SENTINELS) & set(html)


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_markup_in_an_unsupported_sentence_stays_text(text: str) -> None:
    content = f"{SUPPORTED} Answer: {text} and more words here."
    sentence = content[len(SUPPORTED) + 1 :]
    html = str(render_answer(answer(content, flag(content, sentence))))
    for tag, attrs in tags(html):
        assert tag in TAGS, (tag, html)
        assert not any(name.startswith("on") or name == "style" for name in attrs), html
        href = (attrs.get("href") or "").strip().lower()
        assert not href.startswith(("javascript:", "vbscript:", "data:")), html
        assert "src" not in attrs, html
        if tag == "span":
            assert attrs["class"] in ("unsupported", "no-source"), html
    assert 'class="unsupported"' in html


def test_hostile_markup_is_escaped_inside_the_mark() -> None:
    content = f"{SUPPORTED} Hello <script>alert(1)</script> world <b>is</b> here."
    html = str(render_answer(answer(content, flag(content, content[len(SUPPORTED) + 1 :]))))
    assert "<script" not in html and "<b>" not in html
    assert (
        marked_text(html)
        == "Hello &lt;script&gt;alert(1)&lt;/script&gt; world &lt;b&gt;is&lt;/b&gt; here."
    )


def test_the_model_cannot_forge_a_mark_with_sentinels() -> None:
    forged = f"\ue000{INVENTED}\ue001 and \ue002more words\ue001 here [1]."
    html = str(render_answer(answer(forged)))
    assert "unsupported" not in html and "no-source" not in html
    assert not set(SENTINELS) & set(html)
    assert "Parking is free" in html and "more words" in html
    # With a real flag as well, only the flagged sentence is marked and no sentinel shows.
    content = f"{SUPPORTED} \ue001{INVENTED}\ue000"
    html = str(render_answer(answer(content, flag(content, f"\ue001{INVENTED}\ue000"))))
    assert marked_text(html) == INVENTED and not set(SENTINELS) & set(html)
    assert html.count('class="no-source"') == 1


def test_offsets_that_do_not_fit_the_text_are_ignored() -> None:
    wrong = Unsupported(0, 10, "not this!!", "no source")
    out_of_range = Unsupported(500, 600, "x" * 100, "no source")
    html = str(render_answer(answer(SUPPORTED, wrong, out_of_range)))
    assert "unsupported" not in html


def test_an_answer_citing_nothing_is_noted_but_a_decline_is_not() -> None:
    assert ungrounded(answer(INVENTED, cited=False))
    assert not ungrounded(answer(SUPPORTED))
    assert not ungrounded(answer(NOTHING_FOUND, cited=False))
    declined = "The documents do not cover parking at all."
    assert not ungrounded(answer(declined, cited=False))
    assert not ungrounded(answer(NO_ANSWER, cited=False))
    assert not ungrounded(answer("Partial answer …(stopped)", cited=False))
    question = Message(1, 1, "user", INVENTED, (), 0.0)
    assert not ungrounded(question)


# --- the app ----------------------------------------------------------------------------------
CANTEEN = b"# Canteen\n\nThe canteen opens at noon daily. Lunch is served until two."


def canteen(client: TestClient[Any]) -> None:
    document = upload(client, ("canteen.md", CANTEEN)).json()["documents"][0]
    assert wait_indexed(client, document["id"])["status"] == "indexed"


def chat_done(client: TestClient[Any], question: str) -> dict[str, Any]:
    response = client.post("/api/chat", json={"message": question})
    assert response.status_code == 200, response.text
    name, data = sse_events(response.text)[-1]
    assert name == "done", data
    done: dict[str, Any] = json.loads(data)
    return done


def test_api_chat_lists_unsupported_sentences_and_whether_grounded(
    client: TestClient[Any],
) -> None:
    canteen(client)
    fake_model(client).enqueue(["The canteen opens", " at noon daily [1].", f" {INVENTED}"])
    done = chat_done(client, "When does the canteen open?")
    assert done["grounded"] is True and [c["number"] for c in done["citations"]] == [1]
    [unsupported] = done["unsupported"]
    assert unsupported["reason"] == "no source" and unsupported["text"] == INVENTED
    assert done["answer"][unsupported["start"] : unsupported["end"]] == INVENTED

    # An answer nothing supports is withheld (the default; fake_settings turns it off) ...
    chat = client.app.state.services.require_chat()
    chat.config = replace(chat.config, withhold_unsupported=True)
    fake_model(client).enqueue([INVENTED])
    withheld = chat_done(client, "Is the canteen open at noon on weekends?")
    assert withheld["answer"] == WITHHELD
    assert withheld["grounded"] is False and withheld["unsupported"] == []
    # ... and, where the operator shows it anyway, marked throughout.
    chat.config = replace(chat.config, withhold_unsupported=False)
    fake_model(client).enqueue([INVENTED])
    bare = chat_done(client, "Is the canteen open at noon on weekends?")
    assert bare["answer"] == INVENTED
    assert bare["grounded"] is False and bare["citations"] == []
    assert [u["text"] for u in bare["unsupported"]] == [INVENTED]

    # The stored answers carry the same, questions carry no verdict.
    messages = client.get(f"/api/conversations/{done['conversation_id']}").json()["messages"]
    question, stored = messages
    assert question["grounded"] is None and question["unsupported"] == []
    assert stored["grounded"] is True and stored["unsupported"] == done["unsupported"]

    # The web page marks the sentence and notes the answer that cites nothing.
    page = client.get(f"/c/{done['conversation_id']}").text
    assert marked_text(page) == INVENTED and UNGROUNDED_NOTE not in page
    page = client.get(f"/c/{bare['conversation_id']}").text
    assert f'<p class="grounding-note" role="note">{UNGROUNDED_NOTE}</p>' in page
    assert marked_text(page) == INVENTED


def test_the_streamed_web_answer_ends_marked(client: TestClient[Any]) -> None:
    canteen(client)
    fake_model(client).enqueue(["The canteen opens at noon daily [1].", f" {INVENTED}"])
    turn = client.post("/ui/ask", data={"message": "When does the canteen open?"})
    question_id = re.search(r"/ui/answers/(\d+)/stream", turn.text).group(1)  # type: ignore[union-attr]
    events = sse_events(client.get(f"/ui/answers/{question_id}/stream").text)
    name, html = events[-1]
    assert name == "done"
    assert marked_text(html) == INVENTED and UNGROUNDED_NOTE not in html


def test_grounded_v1_lists_unsupported_sentences(api: TestClient[Any]) -> None:  # noqa: F811
    fake_model(api).enqueue([" The allowance is 40 euros", " per day [1].", f" {INVENTED}"])
    message = ask(api, "What is the meal allowance abroad?").json()["choices"][0]["message"]
    assert message["grounded"] is True and [c["number"] for c in message["citations"]] == [1]
    [unsupported] = message["unsupported"]
    assert unsupported == {
        "start": message["content"].index(INVENTED),
        "end": len(message["content"]),
        "text": INVENTED,
        "reason": "no source",
    }

    fake_model(api).enqueue([f" {INVENTED}"])
    bare = ask(api, "What is the meal allowance abroad?").json()["choices"][0]["message"]
    assert bare["grounded"] is False and bare["citations"] == []
    assert [u["text"] for u in bare["unsupported"]] == [INVENTED]


def test_a_grounded_v1_stream_ends_with_offsets_into_the_streamed_text(
    api: TestClient[Any],  # noqa: F811
) -> None:
    # The first sentence has no marker: the answer gets "[1]" added (attribution), the
    # stream does not, so the offsets are given in the text as streamed.
    fake_model(api).enqueue([" The meal allowance abroad", " is 40 euros per day.", f" {INVENTED}"])
    received = chunks(ask(api, "What is the meal allowance abroad?", stream=True))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in received if c["choices"])
    last = received[-1]
    assert last["grounded"] is True and [c["number"] for c in last["citations"]] == [1]
    [unsupported] = last["unsupported"]
    assert unsupported["text"] == INVENTED
    assert text[unsupported["start"] : unsupported["end"]] == INVENTED

    fake_model(api).enqueue([" The meal allowance abroad", " is 40 euros per day.", f" {INVENTED}"])
    message = ask(api, "What is the meal allowance abroad?").json()["choices"][0]["message"]
    assert "[1]" in message["content"] and message["content"] != text
    [whole] = message["unsupported"]
    assert message["content"][whole["start"] : whole["end"]] == INVENTED
