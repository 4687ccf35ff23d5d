"""👍/👎 on answers (issue #14): stored one per user per answer and changeable, through the
UI's endpoint and the native API (scoped like the chat API), listed for admins with a
rating filter, and exported as golden-set lines that ``load_golden`` accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from app.chat.feedback import AnswerFeedback
from retrieval.evaluation import load_golden
from tests.conftest import add_key, add_user, fake_model, login
from tests.test_ui_routes import ask, indexed_document

HX = {"HX-Request": "true"}


def answer_ids(client: TestClient[Any], conversation: int) -> list[int]:
    messages = client.get(f"/api/conversations/{conversation}").json()["messages"]
    return [m["id"] for m in messages if m["role"] == "assistant"]


def answered(client: TestClient[Any], question: str, *tokens: str) -> tuple[int, int]:
    """(conversation, answer id) of a question answered with ``tokens``."""
    fake_model(client).enqueue(list(tokens))
    conversation = ask(client, question)
    return conversation, answer_ids(client, conversation)[-1]


def test_a_click_stores_the_rating_and_opens_the_comment_popover(
    client: TestClient[Any],
) -> None:
    indexed_document(client)
    conversation, answer = answered(client, "When does the canteen open?", "At noon [1].")
    page = client.get(f"/c/{conversation}").text
    assert f'id="feedback-up-{answer}"' in page and f'id="feedback-down-{answer}"' in page
    assert f'id="feedback-form-{answer}"' not in page  # no popover before a choice

    clicked = client.post(f"/ui/messages/{answer}/feedback", data={"rating": "up"}, headers=HX)
    assert clicked.status_code == 200, clicked.text
    up = re.search(rf'<button[^>]*id="feedback-up-{answer}"[^>]*>', clicked.text)
    assert up is not None and 'aria-pressed="true"' in up.group(0)
    form = re.search(rf'<form[^>]*id="feedback-form-{answer}"[^>]*>', clicked.text)
    assert form is not None and " hidden" not in form.group(0)  # the comment popover opens

    sent = client.post(
        f"/ui/messages/{answer}/feedback",
        data={"rating": "up", "comment": "Clear and <b>cited</b>"},
        headers=HX,
    )
    assert sent.status_code == 200
    assert "Thanks for the feedback" in sent.text
    assert "Clear and &lt;b&gt;cited&lt;/b&gt;" in sent.text  # escaped, kept in the popover
    form = re.search(rf'<form[^>]*id="feedback-form-{answer}"[^>]*>', sent.text)
    assert form is not None and " hidden" in form.group(0)  # closed after Send

    user = client.app.state.services.auth.users.by_name("tester")
    store = AnswerFeedback(client.app.state.services.db)
    changed = client.post(f"/ui/messages/{answer}/feedback", data={"rating": "down"}, headers=HX)
    assert changed.status_code == 200
    given = store.of(answer, user.id)
    assert given is not None and given.rating == "down"
    assert given.comment == "Clear and <b>cited</b>"  # a click alone keeps the comment
    rows = client.app.state.services.db.read().execute("SELECT COUNT(*) FROM answer_feedback")
    assert rows.fetchone()[0] == 1  # one per user per answer

    again = client.get(f"/c/{conversation}").text  # the choice is shown on reload
    down = re.search(rf'<button[^>]*id="feedback-down-{answer}"[^>]*>', again)
    assert down is not None and 'aria-pressed="true"' in down.group(0)


def test_bad_feedback_is_refused(client: TestClient[Any]) -> None:
    indexed_document(client)
    _, answer = answered(client, "When does the canteen open?", "At noon [1].")
    question = answer - 1
    assert client.post(f"/ui/messages/{answer}/feedback", data={"rating": "meh"}).status_code == 422
    assert (
        client.post(f"/ui/messages/{question}/feedback", data={"rating": "up"}).status_code == 404
    )
    assert client.post("/ui/messages/999999/feedback", data={"rating": "up"}).status_code == 404
    long = {"rating": "up", "comment": "x" * 2001}
    assert client.post(f"/ui/messages/{answer}/feedback", data=long).status_code == 422


def test_the_api_gives_and_reads_feedback_with_the_chat_apis_scoping(
    client: TestClient[Any],
) -> None:
    indexed_document(client)
    _, answer = answered(client, "When does the canteen open?", "At noon [1].")
    key = {"Authorization": f"Bearer {add_key(client)}"}
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)

    url = f"/api/answers/{answer}/feedback"
    assert client.get(url, headers=key).status_code == 404  # none yet
    given = client.post(url, json={"rating": "down", "comment": "Wrong time"}, headers=key)
    assert given.status_code == 200, given.text
    body = given.json()
    assert (body["answer_id"], body["rating"], body["comment"]) == (answer, "down", "Wrong time")
    changed = client.post(url, json={"rating": "up"}, headers=key).json()
    assert (changed["rating"], changed["comment"]) == ("up", "Wrong time")  # comment kept
    assert client.get(url, headers=key).json()["rating"] == "up"

    assert client.post(url, json={"rating": "great"}, headers=key).status_code == 422
    assert client.post(url, json={"rating": "up", "x": 1}, headers=key).status_code == 422
    assert client.post(url, json={"rating": "up"}).status_code == 401  # no credentials
    question = f"/api/answers/{answer - 1}/feedback"  # a question is not an answer
    assert client.post(question, json={"rating": "up"}, headers=key).status_code == 404

    add_user(client, "ann")  # another user's answer does not exist for her
    ann = {"Authorization": f"Bearer {add_key(client, 'ann')}"}
    assert client.post(url, json={"rating": "up"}, headers=ann).status_code == 404
    assert client.get(url, headers=ann).status_code == 404
    # A read-only key may not see stored conversations (as /api/conversations): 404.
    restricted = {"Authorization": f"Bearer {add_key(client, read_only=True)}"}
    assert client.post(url, json={"rating": "up"}, headers=restricted).status_code == 404


def test_admins_list_feedback_filtered_by_rating_and_export_golden_lines(
    client: TestClient[Any], tmp_path: Path
) -> None:
    indexed_document(client)
    _, good = answered(client, "When does the canteen open?", "It opens at noon daily [1].")
    _, bad = answered(client, "Is the canteen open at night?", "Yes, all night [1].")
    _, declined = answered(client, "Who won the 1930 World Cup?", "The documents do not say.")
    ui = "/ui/messages/{}/feedback"
    client.post(ui.format(good), data={"rating": "up", "comment": "Spot on"})
    client.post(ui.format(bad), data={"rating": "down", "comment": "It closes at 3 pm"})
    client.post(ui.format(declined), data={"rating": "up"})

    assert 'href="/admin/feedback"' in client.get("/admin").text  # linked from the admin page
    listing = client.get("/admin/feedback")
    assert listing.status_code == 200
    text = listing.text
    for shown in ("When does the canteen open?", "It opens at noon daily", "Spot on"):
        assert shown in text
    assert "It closes at 3 pm" in text and "Canteen" in text  # comment, and the source
    downs = client.get("/admin/feedback?rating=down").text
    assert "It closes at 3 pm" in downs and "Spot on" not in downs
    assert client.get("/admin/feedback?rating=sideways").status_code == 422

    export = client.get("/admin/feedback/export")
    assert export.status_code == 200
    assert "attachment" in export.headers["content-disposition"]
    lines = {json.loads(line)["question"]: json.loads(line) for line in export.text.splitlines()}
    up = lines["When does the canteen open?"]
    assert up["answer"] == "It opens at noon daily."  # the answer as reference, no marker
    assert up["document"] == "Canteen" and up["rating"] == "up" and up["comment"] == "Spot on"
    down = lines["Is the canteen open at night?"]
    assert "answer" not in down and "document" not in down
    assert down["comment"] == "It closes at 3 pm" and down["rejected_answer"] == "Yes, all night."
    assert "answer" not in lines["Who won the 1930 World Cup?"]  # a good decline: off-topic

    golden = tmp_path / "feedback.jsonl"
    golden.write_text(export.text)
    loaded = {q.question: q for q in load_golden(golden)}  # what eval --answers reads
    assert loaded["When does the canteen open?"].references == ("It opens at noon daily.",)
    assert loaded["Is the canteen open at night?"].offtopic
    only_down = client.get("/admin/feedback/export?rating=down").text.splitlines()
    assert [json.loads(line)["question"] for line in only_down] == ["Is the canteen open at night?"]


def test_only_admins_see_the_feedback_list(client: TestClient[Any]) -> None:
    add_user(client, "sam")
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    login(client, "sam")
    assert client.get("/admin/feedback").status_code == 403
    assert client.get("/admin/feedback/export").status_code == 403


def test_feedback_goes_with_its_conversation(client: TestClient[Any]) -> None:
    indexed_document(client)
    conversation, answer = answered(client, "When does the canteen open?", "At noon [1].")
    client.post(f"/ui/messages/{answer}/feedback", data={"rating": "up"})
    assert client.delete(f"/ui/conversations/{conversation}", headers=HX).status_code == 200
    rows = client.app.state.services.db.read().execute("SELECT COUNT(*) FROM answer_feedback")
    assert rows.fetchone()[0] == 0


def test_a_pressed_thumb_pressed_again_takes_the_rating_back(client: TestClient[Any]) -> None:
    """#26 item 8: a pressed thumb could not be un-pressed."""
    indexed_document(client)
    _, answer = answered(client, "When does the canteen open?", "At noon [1].")
    pressed = client.post(f"/ui/messages/{answer}/feedback", data={"rating": "up"}, headers=HX)
    up = re.search(rf'<button[^>]*id="feedback-up-{answer}"[^>]*>', pressed.text)
    assert up is not None and 'aria-pressed="true"' in up.group(0)
    assert '"rating": "none"' in up.group(0)  # pressing it again takes the rating back
    down = re.search(rf'<button[^>]*id="feedback-down-{answer}"[^>]*>', pressed.text)
    assert down is not None and '"rating": "down"' in down.group(0)

    undone = client.post(f"/ui/messages/{answer}/feedback", data={"rating": "none"}, headers=HX)
    assert undone.status_code == 200
    assert 'aria-pressed="true"' not in undone.text and "feedback-form" not in undone.text
    user = client.app.state.services.auth.users.by_name("tester")
    assert AnswerFeedback(client.app.state.services.db).of(answer, user.id) is None

    key = {"Authorization": f"Bearer {add_key(client)}"}
    url = f"/api/answers/{answer}/feedback"
    assert client.delete(url, headers=key).status_code == 404  # nothing to take back
    client.post(url, json={"rating": "down"}, headers=key)
    assert client.delete(url, headers=key).status_code == 204
    assert client.get(url, headers=key).status_code == 404
