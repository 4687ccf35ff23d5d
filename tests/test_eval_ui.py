"""``/admin/eval``: stored evaluation runs and running one from the browser (admins only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from app.chat.quality import report, score_answer
from app.documents.answer_eval import save_answer_run
from app.web.eval_ui import BUNDLED_GOLDEN
from retrieval.eval_runs import run_history, save_run
from retrieval.evaluation import EvalReport, GoldenQuestion
from tests.conftest import add_user, login, upload, wait_indexed

GUIDE = Path(__file__).resolve().parent.parent / "data" / "samples" / "ragdesk-user-guide.md"
BUNDLED = {"golden": "bundled", "collection": "", "k": "3"}


def test_the_page_lists_stored_runs_newest_first(client: TestClient[Any]) -> None:
    assert "No runs yet." in client.get("/admin/eval").text
    assert 'href="/admin/eval"' in client.get("/admin").text
    db = client.app.state.services.db
    for k, recall in ((3, 0.25), (7, 0.75)):
        report = EvalReport(k, 4, recall, 0.5, None, 1.25, 9.5, ())
        save_run(db, report, golden=BUNDLED_GOLDEN, collection="hr", mode="hybrid", model_id="m")
    page = client.get("/admin/eval").text
    assert page.index("0.750") < page.index("0.250")  # newest first
    assert page.count("samples-golden.jsonl</td>") == 2 and "<td>hr</td>" in page
    assert "<td>1.2</td><td>9.5</td>" in page and "<td>–</td>" in page


def test_the_page_lists_answer_runs_with_their_model(client: TestClient[Any]) -> None:
    assert "No answer runs yet." in client.get("/admin/eval").text
    factual = GoldenQuestion("When?", document="a.md", answer="1994")
    offtopic = GoldenQuestion("Capital of Mars?")
    timing = {"unsupported_sentences": 0, "looped": False, "ttft_s": 1.5, "total_s": 2.5}
    result = report(
        [
            score_answer(factual, "In 1994 [1].", ["in 1994"], **timing),
            score_answer(offtopic, "The documents do not cover this.", [], **timing),
        ]
    )
    db = client.app.state.services.db
    run = save_answer_run(db, result, golden=BUNDLED_GOLDEN, model="qwen-test", settings={})
    row = client.get("/admin/eval").text.split(f'id="answer-run-{run}"')[1].split("</tr>")[0]
    assert "<td>qwen-test</td>" in row and "<td>2</td>" in row  # model, questions
    assert row.count("<td>1.000</td>") == 3  # correct, citation precision, declined off-topic
    assert "<td>1.50</td><td>2.50</td>" in row


def test_running_the_bundled_set_stores_a_run_and_shows_it(client: TestClient[Any]) -> None:
    [document] = upload(client, (GUIDE.name, GUIDE.read_bytes())).json()["documents"]
    wait_indexed(client, document["id"])
    first = client.post("/admin/eval", files={"file": ("", b"")}, data=BUNDLED)
    assert first.status_code == 200, first.text
    second = client.post("/admin/eval", data={**BUNDLED, "k": "5"})
    [old, new] = run_history(client.app.state.services.db)
    assert (old.k, new.k, new.questions, new.collection) == (3, 5, 14, None)
    assert 0 < new.recall <= 1
    page = second.text
    assert f"Run {new.id} stored" in page and "samples-golden.jsonl" in page
    assert page.index(f'id="run-{new.id}"') < page.index(f'id="run-{old.id}"')  # newest first
    assert client.get("/admin/eval").text.count("samples-golden.jsonl</td>") == 2


def test_bad_input_is_a_clear_4xx(client: TestClient[Any]) -> None:
    bad = b'{"question": "q?", "answer": "a"}\n{not json\n'
    sent = {"golden": "upload", "k": "5"}
    response = client.post("/admin/eval", files={"file": ("mine.jsonl", bad)}, data=sent)
    assert response.status_code == 422 and "line 2: not JSON" in response.text
    empty = client.post("/admin/eval", files={"file": ("e.jsonl", b"\n")}, data=sent)
    assert empty.status_code == 422 and "e.jsonl holds no questions" in empty.text
    assert "/e.jsonl" not in empty.text  # not the server's own path
    huge = client.post("/admin/eval", files={"file": ("h.jsonl", b" " * (2 << 20))}, data=sent)
    assert huge.status_code == 413
    assert client.post("/admin/eval", data=sent).status_code == 422  # no file chosen
    for k in ("0", "51", "x", ""):
        assert client.post("/admin/eval", data={**BUNDLED, "k": k}).status_code == 422, k
    assert client.post("/admin/eval", data={**BUNDLED, "collection": "99"}).status_code == 404
    assert run_history(client.app.state.services.db) == []


def test_an_uploaded_set_is_evaluated_and_kept(client: TestClient[Any]) -> None:
    good = b'{"question": "How do I delete a document?", "answer": "sidebar"}\n'
    sent = {"golden": "upload", "collection": "1", "k": "4"}
    response = client.post("/admin/eval", files={"file": ("../my set.jsonl", good)}, data=sent)
    assert response.status_code == 200 and "my_set.jsonl" in response.text
    [run] = run_history(client.app.state.services.db)
    assert (run.questions, run.k, run.collection) == (1, 4, "default")
    assert Path(run.golden).read_bytes() == good


def test_staff_get_403_and_visitors_are_sent_to_sign_in(client: TestClient[Any]) -> None:
    add_user(client, "ann")
    client.cookies.clear()
    login(client, "ann")
    assert client.get("/admin/eval").status_code == 403
    assert client.post("/admin/eval", data=BUNDLED).status_code == 403
    client.cookies.clear()
    del client.headers["X-CSRF-Token"]
    visitor = client.get("/admin/eval", follow_redirects=False)
    assert visitor.status_code == 303
    assert visitor.headers["location"] == "/login?next=%2Fadmin%2Feval"
