"""Retrieval evaluation: golden sets, metrics, stored runs, and ``ragdesk eval``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from app.migrations import open_database
from retrieval.bulk import BulkIngest
from retrieval.eval_runs import run_history, save_run
from retrieval.evaluation import (
    GoldenQuestion,
    GoldenSetError,
    evaluate,
    load_golden,
    ranking_metrics,
)
from retrieval.search import Retriever, SearchConfig
from tests.conftest import fake_settings
from tests.pg_kit import store_under_test
from tests.retrieval_kit import Kit, make_kit

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "data" / "samples"
GOLDEN = ROOT / "bench" / "data" / "samples-golden.jsonl"


def test_a_question_without_document_passage_or_answer_is_off_topic(tmp_path: Path) -> None:
    path = tmp_path / "golden.jsonl"
    path.write_text(
        '{"question": "What is the capital of Mars?"}\n'
        '{"question": "When?", "answer": "1972", "answers": ["in 1972"]}\n'
    )
    offtopic, factual = load_golden(path)
    assert offtopic.offtopic and offtopic.answers == ()
    assert not factual.offtopic and factual.answers == ("1972", "in 1972")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "line 1: not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"document": "a.md"}', "'question' is missing"),
        ('{"question": "why?", "answers": ["x"]}', "'answers' and 'reference' go with an 'answer'"),
        ('{"question": "why?", "answer": "x", "answers": "y"}', "'answers' must be a list"),
        ('{"question": "why?", "answer": 42}', "'answer' must be a non-empty string"),
        ('{"question": "  ", "answer": "x"}', "'question' must be a non-empty string"),
    ],
)
def test_bad_golden_sets_are_refused_with_the_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "golden.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(GoldenSetError, match=problem):
        load_golden(path)


def test_empty_or_missing_golden_set(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(GoldenSetError, match="no questions"):
        load_golden(tmp_path / "empty.jsonl")
    with pytest.raises(GoldenSetError, match="cannot read"):
        load_golden(tmp_path / "absent.jsonl")


def test_ranking_metrics() -> None:
    scores = ranking_metrics([1, 3, None, 2], [1, 3])
    assert scores == {
        "recall@1": 0.25,
        "recall@3": 0.75,
        "mrr": pytest.approx((1 + 1 / 3 + 0.5) / 4),
    }


def ingested(tmp_path: Path) -> tuple[Kit, Retriever]:
    kit = make_kit(tmp_path / "data")
    index, _ = kit.open_index()
    BulkIngest(kit.library, kit.worker(index), kit.collection_id).run([SAMPLES])
    return kit, Retriever(kit.embedder, index, kit.store, SearchConfig(max_per_document=0))


def test_evaluate_ranks_by_document_and_passage(tmp_path: Path) -> None:
    kit, retriever = ingested(tmp_path)
    questions = [
        GoldenQuestion("citation number highlighted", document="ragdesk-user-guide.md"),
        GoldenQuestion("citation number highlighted", document="nonexistent.md"),
        GoldenQuestion("where documents stored", passage="Everything stays on", answer="SQLite"),
        GoldenQuestion("where documents stored", answer="no such words anywhere"),
    ]
    report = evaluate(retriever, kit.store, questions, k=5)
    ranks = [r.rank for r in report.results]
    assert ranks[0] is not None and ranks[1] is None and ranks[2] is not None
    assert report.recall == pytest.approx(sum(r is not None for r in ranks) / 4)
    assert [r.answer_found for r in report.results] == [None, None, True, False]
    assert report.answer_containment == 0.5
    assert 0 < report.latency_p50_ms <= report.latency_p95_ms

    run = save_run(kit.db, report, golden=GOLDEN, collection=None, mode="hybrid", model_id="m")
    [stored] = run_history(kit.db)
    assert (stored.id, stored.questions, stored.recall) == (run, 4, report.recall)


def test_eval_command_stores_runs_and_lists_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGDESK_EMBEDDER_BACKEND", "fake")
    data = tmp_path / "data"

    def ragdesk(*argv: str) -> int:
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--data-dir", str(data)])
        return int(exit_.value.code or 0)

    # FAISS's files in the data directory: PostgreSQL keeps the vectors (and their index)
    # itself, and its database is there before anything is ingested.
    faiss = store_under_test() == "sqlite"
    if faiss:
        assert ragdesk("eval", str(GOLDEN)) == 2  # nothing ingested yet
        assert "no Ragdesk database" in capsys.readouterr().err
    assert ragdesk("ingest", str(SAMPLES)) == 0
    capsys.readouterr()
    index_files: dict[str, int] = {}
    if faiss:
        index_files = {p.name: p.stat().st_mtime_ns for p in (data / "index").iterdir()}
        (data / "index" / "manifest.json").unlink()  # as if stale: eval catches up
        index_files.pop("manifest.json")
    assert ragdesk("eval", str(GOLDEN), "--k", "3") == 0
    if faiss:  # ... in memory only: a running server owns the index files, eval writes none
        assert {p.name: p.stat().st_mtime_ns for p in (data / "index").iterdir()} == index_files
    report = json.loads(capsys.readouterr().out)
    assert report["questions"] == 14 and 0 <= report["recall@3"] <= 1
    assert ragdesk("eval", str(GOLDEN), "--collection", "missing") == 2
    assert "no collection 'missing'" in capsys.readouterr().err
    assert ragdesk("eval", "--history") == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 3 and table[2].startswith("| 1 |")


@pytest.mark.real
def test_bundled_golden_set_with_the_real_embedder(tmp_path: Path) -> None:
    from retrieval.embedder import SentenceTransformerEmbedder, bundled_embedder_dir
    from retrieval.ingest import IngestConfig, IngestWorker

    kit = make_kit(tmp_path / "data")
    kit.embedder = SentenceTransformerEmbedder(bundled_embedder_dir())  # type: ignore[assignment]
    index, _ = kit.open_index()
    worker = IngestWorker(  # production chunking (the kit's is tiny)
        kit.store, kit.library.files, kit.embedder, index, kit.index_dir, IngestConfig()
    )
    BulkIngest(kit.library, worker, kit.collection_id).run([SAMPLES])
    retriever = Retriever(kit.embedder, index, kit.store, SearchConfig())  # production defaults
    report = evaluate(retriever, kit.store, load_golden(GOLDEN), k=3, min_score=0.25)
    assert report.recall >= 0.85, report.results
    assert report.mrr >= 0.6
    assert report.answer_containment is not None and report.answer_containment >= 0.85


def test_eval_answers_asks_through_chat_stores_the_run_and_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the CLI, with the fake embedder and the fake generator (which quotes the
    first source): every answer is grounded, the run is stored with its model, the data
    directory gains no conversation."""
    monkeypatch.setenv("RAGDESK_EMBEDDER_BACKEND", "fake")
    monkeypatch.setenv("RAGDESK_GENERATOR_BACKEND", "fake")
    data = tmp_path / "data"
    golden = tmp_path / "golden.jsonl"
    golden.write_text(GOLDEN.read_text() + '{"question": "Who painted the Mona Lisa?"}\n')

    def ragdesk(*argv: str) -> int:
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--data-dir", str(data)])
        return int(exit_.value.code or 0)

    assert ragdesk("ingest", str(SAMPLES)) == 0
    capsys.readouterr()
    assert ragdesk("eval", "--answers", str(golden), "--model", "nope") == 2
    assert "no model 'nope'" in capsys.readouterr().err
    assert ragdesk("eval", "--answers", str(golden)) == 0
    out = capsys.readouterr().out
    report = json.loads(out[out.index("{") :])
    assert (report["questions"], report["factual"], report["offtopic"]) == (15, 14, 1)
    assert report["model"] == "fake" and report["empty"] == 0
    assert 0 <= report["correctness"] <= 1 and report["ttft_p50_s"] is not None
    assert ragdesk("eval", "--answers", "--history") == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 3 and "| fake | 15 |" in table[2]
    db = open_database(fake_settings(data))
    try:
        assert db.read().execute("SELECT count(*) FROM conversations").fetchone()[0] == 0
    finally:
        db.close()
