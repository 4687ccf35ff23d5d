"""Grounded ``/v1`` follow-ups read as chat's do. A follow-up about the last answer ("How
high is it?", "And the lowest?") reads the passages of the documents it cited; chat finds
those citations in the stored conversation, ``/v1`` in what it remembered of its own
answers (``app.chat.cited_answers``), found again by the text the client sends back. The
search itself is chat's (``ChatService.search_after``): scoped to what the caller may
read, only narrowed by what was cited.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from app.auth.access import current_user_id
from app.chat.cited_answers import CitedAnswers, CitedSource
from app.schemas import CitationOut
from app.state import Services
from llm.prompt import Turn
from retrieval.followup import asks_about_the_last_answer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FollowUpMemory:
    """What the caller's grounded ``/v1`` answers cited (nothing without a caller)."""

    answers: CitedAnswers
    user_id: int | None

    @classmethod
    def of(cls, services: Services) -> FollowUpMemory:
        """The memory of this request's caller (read now: call it in the request)."""
        days = services.settings.search.v1_citations_days
        return cls(CitedAnswers(services.db, days), current_user_id())

    def cited_before(self, question: str, history: Sequence[Turn]) -> frozenset[int]:
        """The documents the last answer in ``history`` cited, when ``question`` asks about
        it (``asks_about_the_last_answer``) and that answer is one of the caller's, sent
        back as it was given; else none (the request is then searched for as if nothing
        were remembered)."""
        last = next((turn for turn in reversed(history) if turn.answer.strip()), None)
        if self.user_id is None or last is None or not asks_about_the_last_answer(question):
            return frozenset()
        try:
            cited = self.answers.cited(self.user_id, last.question, last.answer)
        except Exception:  # a follow-up still gets an answer, searched for as before
            log.exception("could not look up what the last /v1 answer cited")
            return frozenset()
        return frozenset(source.document_id for source in cited)

    def remember(self, question: str, answer: str, citations: Sequence[CitationOut]) -> None:
        """Keep what ``answer`` cites, for the caller's next question; never fatal."""
        if self.user_id is None:
            return
        cited = [CitedSource(c.number, c.chunk_id, c.document_id) for c in citations]
        try:
            self.answers.remember(self.user_id, question, answer, cited)
        except Exception:  # the answer is given: a follow-up merely searches as before
            log.exception("could not remember what a /v1 answer cited")
