"""The one way an answer is grounded, whichever door the question came in by (the web chat,
``/api/chat``, grounded ``/v1``): retrieved passages become numbered sources in the prompt,
and the model's text is attributed and cited against exactly those numbers.

A passage becomes a ``Citation`` in one place (:func:`citation_of`), and a citation's
viewer link is built in one place (``Citation.url``), so the three doors cannot drift
apart (the swapped ``document_id``/``chunk_id`` of grounded ``/v1`` came from a copy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from app.chat.conversations import Citation
from llm.backend import Backend
from llm.citations import attribute, cited_numbers
from llm.prompt import Prompt, Source, Turn, build_prompt
from retrieval.types import Hit

NOTHING_FOUND = (
    "I could not find anything about that in the documents, so I cannot answer it from them."
)
MAX_QUESTION_CHARS = 4000
SNIPPET_CHARS = 300


def citation_of(hit: Hit, number: int = 0) -> Citation:
    """A retrieved passage as the citation ``[number]`` that points at it."""
    return Citation(
        number=number,
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        title=hit.title,
        page=hit.page,
        start=hit.start,
        end=hit.end,
        snippet=hit.text[:SNIPPET_CHARS],
    )


@dataclass(frozen=True)
class Grounding:
    """This turn's prompt, and what every source it can cite points at (by chunk id)."""

    prompt: Prompt
    shown: Mapping[int, Citation]

    @classmethod
    def build(
        cls,
        backend: Backend,
        *,
        question: str,
        hits: Sequence[Hit],
        history: Sequence[Turn] = (),
        earlier: Mapping[int, Citation] | None = None,
        answer_tokens: int,
    ) -> Grounding:
        """The prompt for ``question`` over ``hits`` after ``history``, fitted to the
        backend's context less ``answer_tokens``; ``earlier`` are the citations of the
        sources earlier turns listed. Raises ``PromptTooLong`` and ``ChatTemplateFailed``."""
        sources = [Source(0, hit.title, hit.page, hit.text, key=hit.chunk_id) for hit in hits]
        prompt = build_prompt(
            backend.prompt_format,
            question=question,
            sources=sources,
            history=list(history),
            token_budget=backend.context_tokens - answer_tokens,
            count_tokens=backend.count_tokens,
        )
        shown = {**(earlier or {}), **{hit.chunk_id: citation_of(hit) for hit in hits}}
        return cls(prompt, shown)

    def listed(self) -> list[Citation]:
        """This turn's sources, numbered as the prompt numbers them."""
        return [self._numbered(source) for source in self.prompt.turn.sources]

    def cite(self, text: str) -> tuple[str, tuple[Citation, ...]]:
        """The answer with its bare sentences attributed, and the sources it cites, in the
        order it first cites them."""
        answer = attribute(text.strip(), self.prompt.relevant)
        numbers = cited_numbers(answer, self.prompt.citable)
        return answer, tuple(self._numbered(self.prompt.citable[n], n) for n in numbers)

    def _numbered(self, source: Source, number: int | None = None) -> Citation:
        number = source.number if number is None else number
        return replace(self.shown[source.key], number=number)
