"""``ragdesk eval --answers GOLDEN``: ask every golden question through the chat pipeline
(the same :class:`ChatService` the web chat, ``/api/chat`` and grounded ``/v1`` use) and
score the answers (:mod:`app.chat.quality`); runs are stored with their model and settings.

The questions are asked in throwaway conversations in a scratch database, so an evaluation
never adds conversations to the data directory it reads; the index is opened read-only,
so it can run beside a live server.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TextIO

from app.chat.conversations import Conversations
from app.chat.quality import AnswerReport, AnswerScore, report, score_answer
from app.chat.records import Citation, Message, TurnContext
from app.chat.service import ChatService, DoneEvent, TokenEvent
from app.migrations import open_database
from llm.params import Usage
from retrieval.db import Database
from retrieval.evaluation import GoldenQuestion
from retrieval.followup_eval import GoldenConversation
from retrieval.sql import insert_row


async def ask_all(
    chat: ChatService,
    questions: Sequence[GoldenQuestion],
    *,
    progress: bool = False,
    transcript: TextIO | None = None,
) -> AnswerReport:
    """Ask each question in a conversation of its own and score the stored answer. Time to
    first token counts from the question to the first streamed token (retrieval, prompt
    and prefill included): what a person waits for. ``transcript`` gets a JSON line per
    question with what the model generated and the sources it was shown, so the checks
    after generation can be replayed on the same generations (``bench.replay``)."""
    scores: list[AnswerScore] = []
    for number, item in enumerate(questions, start=1):
        score, _ = await _ask(chat, item, None, transcript)
        scores.append(score)
        if progress:
            _print_score(f"{number}/{len(questions)}", item, score)
    return report(scores)


@dataclass(frozen=True)
class FollowUpReport:
    """The follow-up turns of golden conversations asked in their conversation, and the
    same questions asked standalone (subject named, in a conversation of their own)."""

    in_conversation: AnswerReport
    standalone: AnswerReport


async def ask_conversations(
    chat: ChatService, conversations: Sequence[GoldenConversation], *, progress: bool = False
) -> FollowUpReport:
    """Ask each conversation's turns in one conversation, then each follow-up alone."""
    followed: list[AnswerScore] = []
    alone: list[AnswerScore] = []
    for number, conversation in enumerate(conversations, start=1):
        conversation_id: int | None = None
        for turn, standalone in zip(conversation.turns, conversation.standalone, strict=True):
            score, conversation_id = await _ask(chat, turn, conversation_id)
            if standalone is not None:
                followed.append(score)
                if progress:
                    _print_score(f"{number}/{len(conversations)} follow-up", turn, score)
        for _, turn, standalone in conversation.follow_ups():
            named = replace(turn, question=standalone)
            score, _ = await _ask(chat, named, None)
            alone.append(score)
            if progress:
                _print_score(f"{number}/{len(conversations)} standalone", named, score)
    return FollowUpReport(report(followed), report(alone))


async def _ask(
    chat: ChatService,
    item: GoldenQuestion,
    conversation_id: int | None,
    transcript: TextIO | None = None,
) -> tuple[AnswerScore, int]:
    """Ask ``item`` (in a new conversation unless one is given) and score the answer.
    Time to first token counts from the question to the first streamed token."""
    _, asked = chat.ask(item.question, conversation_id)
    started = time.perf_counter()
    first: float | None = None
    done: DoneEvent | None = None
    async for event in chat.answer(asked):
        if isinstance(event, TokenEvent) and first is None and event.text.strip():
            first = time.perf_counter() - started
        elif isinstance(event, DoneEvent):
            done = event
    total = time.perf_counter() - started
    assert done is not None, "an answer always ends with its stored message"
    if transcript is not None:
        transcript.write(transcript_line(item, done, first, total) + "\n")
    return _score(item, done, first, total), asked.conversation_id


def _print_score(place: str, item: GoldenQuestion, score: AnswerScore) -> None:
    mark = "offtopic" if item.offtopic else ("ok" if score.correct else "miss")
    total = score.total_s
    print(f"  [{place}] {mark:8} {total:5.1f}s  {item.question}")
    if mark != "ok":
        print("      " + " ".join(score.answer.split())[:300])


def transcript_line(item: GoldenQuestion, done: DoneEvent, ttft: float | None, total: float) -> str:
    """One answer as ``bench.replay`` reads it back: the stored answer, and (when a model
    ran) the text it generated with the sources it was shown."""
    context = done.message.context
    return json.dumps(
        {
            "question": item.question,
            "answer": done.message.content,
            "context": json.loads(context.to_json()) if context else None,
            "looped": done.looped,
            "ttft_s": ttft,
            "total_s": total,
            "usage": asdict(done.usage) if done.usage else None,
        }
    )


def _score(item: GoldenQuestion, done: DoneEvent, ttft: float | None, total: float) -> AnswerScore:
    message: Message = done.message
    return score_shown(
        item,
        message.content,
        message.citations,
        message.context,
        unsupported=len(message.unsupported),
        looped=done.looped,
        ttft_s=ttft,
        total_s=total,
        usage=done.usage,
    )


def score_shown(
    item: GoldenQuestion,
    answer: str,
    citations: Sequence[Citation],
    context: TurnContext | None,
    *,
    unsupported: int,
    looped: bool,
    ttft_s: float | None,
    total_s: float,
    usage: Usage | None,
) -> AnswerScore:
    """Score an answer as shown, its citations resolved to the passages the model was
    shown (``context``): a live answer here, a replayed one in ``bench.replay``."""
    shown = {s.citation.chunk_id: s.text for s in (context.sources if context else ())}
    cited_texts = [shown.get(c.chunk_id, c.snippet) for c in citations]
    return score_answer(
        item,
        answer,
        cited_texts,
        unsupported_sentences=unsupported,
        looped=looped,
        ttft_s=ttft_s,
        total_s=total_s,
        usage=usage,
    )


class ScratchConversations:
    """Conversations in a temporary database, removed when closed."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="ragdesk-eval-")
        self.db = open_database(Path(self._dir.name) / "scratch.db")
        self.conversations = Conversations(self.db)

    def close(self) -> None:
        self.db.close()
        self._dir.cleanup()


@dataclass(frozen=True)
class AnswerRun:
    id: int
    created_at: float
    golden: str
    model: str
    settings: str
    questions: int
    correctness: float | None
    citation_precision: float | None
    unsupported: float | None
    abstention: float | None
    false_abstention: float | None
    uncited: float | None
    empty: int
    looped: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    total_p50_s: float
    total_p95_s: float


def save_answer_run(
    db: Database, result: AnswerReport, *, golden: Path, model: str, settings: dict[str, object]
) -> int:
    row = {
        "created_at": time.time(),
        "golden": str(golden),
        "golden_sha256": hashlib.sha256(golden.read_bytes()).hexdigest(),
        "model": model,
        "settings": json.dumps(settings, sort_keys=True),
        **{k: v for k, v in result.as_dict().items() if k in AnswerRun.__dataclass_fields__},
        "details": json.dumps([asdict(s) for s in result.scores]),
    }
    with db.write() as conn:
        return insert_row(conn, "answer_eval_runs", row)


def answer_history(db: Database, limit: int = 20) -> list[AnswerRun]:
    """The latest ``limit`` answer runs, oldest first."""
    fields = ", ".join(AnswerRun.__dataclass_fields__)
    rows = db.read().query(
        f"SELECT {fields} FROM answer_eval_runs ORDER BY id DESC LIMIT ?",  # noqa: S608 - own names
        [limit],
    )
    return [AnswerRun(**row) for row in reversed(list(rows))]
