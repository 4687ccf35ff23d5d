"""Golden conversations: follow-up questions, and how well retrieval finds their answers.

A conversation set is JSONL, one conversation a line::

    {"id": "hb01", "turns": [
        {"question": "How long is the probation period?", "document": "handbook.md",
         "answer": "six months"},
        {"question": "Who reviews it?", "standalone": "Who reviews the probation period?",
         "document": "handbook.md", "answer": "line manager"}]}

Each turn is a golden question (the fields of ``retrieval.evaluation``); a later turn
names in ``standalone`` the same question asked with its subject, which is what the
follow-up is measured against: asked in the conversation, it should do as well as that.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval.evaluation import GoldenQuestion, GoldenSetError, _question, read_rows
from retrieval.followup import conversation_query
from retrieval.search import Retriever
from retrieval.types import Hit


@dataclass(frozen=True)
class GoldenConversation:
    id: str
    turns: tuple[GoldenQuestion, ...]
    standalone: tuple[str | None, ...]  # per turn: the question with its subject named

    def follow_ups(self) -> list[tuple[int, GoldenQuestion, str]]:
        """(turn index, the turn, its standalone form) for every turn that has one."""
        return [
            (i, turn, alone)
            for i, (turn, alone) in enumerate(zip(self.turns, self.standalone, strict=True))
            if alone is not None
        ]


def is_conversation_set(path: Path) -> bool:
    """Whether ``path`` holds conversations (its first line has ``turns``)."""
    try:
        with path.open(encoding="utf-8") as lines:
            first = next((line for line in lines if line.strip()), "")
        return isinstance(row := json.loads(first), dict) and "turns" in row
    except (OSError, UnicodeDecodeError, ValueError):
        return False


def load_conversations(path: Path) -> list[GoldenConversation]:
    return read_rows(path, _conversation, "conversations")


def _conversation(number: int, row: dict[str, Any]) -> GoldenConversation:
    turns = row.get("turns")
    if not isinstance(turns, list) or len(turns) < 2 or not all(isinstance(t, dict) for t in turns):
        raise GoldenSetError(f"line {number}: 'turns' must list two or more questions")
    standalone = tuple(t.get("standalone") for t in turns)
    if standalone[0] is not None or not all(isinstance(s, str | None) for s in standalone):
        raise GoldenSetError(f"line {number}: 'standalone' is a string, on later turns only")
    questions = tuple(
        _question(number, {k: v for k, v in t.items() if k != "standalone"}) for t in turns
    )
    return GoldenConversation(str(row.get("id", number)), questions, standalone)


@dataclass(frozen=True)
class FollowUpRecall:
    """Recall@k of the follow-up turns, searched for three ways."""

    follow_ups: int
    as_asked: float  # the follow-up's own words (what retrieval did before)
    in_conversation: float  # the conversation's query (``retrieval.followup``)
    standalone: float  # the question with its subject named

    def as_dict(self) -> dict[str, float | int]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in self.__dict__.items()}


def follow_up_recall(
    retriever: Retriever,
    conversations: Sequence[GoldenConversation],
    k: int = 5,
    filenames: dict[int, str] | None = None,
) -> FollowUpRecall:
    """How often the top ``k`` passages hold the follow-up's answer, in its document."""
    found = {"as_asked": 0, "in_conversation": 0, "standalone": 0}
    count = 0
    for conversation in conversations:
        asked = [turn.question for turn in conversation.turns]
        for index, turn, alone in conversation.follow_ups():
            count += 1
            queries = {
                "as_asked": turn.question,
                "in_conversation": conversation_query(asked[: index + 1]),
                "standalone": alone,
            }
            for way, query in queries.items():
                hits = retriever.search(query, k).hits
                found[way] += _holds_answer(turn, hits, filenames or {})
    share = {way: hit / count if count else 0.0 for way, hit in found.items()}
    return FollowUpRecall(count, **share)


def _holds_answer(turn: GoldenQuestion, hits: Sequence[Hit], filenames: dict[int, str]) -> bool:
    return any(
        turn.is_relevant(hit, filenames.get(hit.document_id, "")) and turn.contains_answer([hit])
        for hit in hits
    )
