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

from app.chat.records import Citation, ShownSource, TurnContext
from llm.answer_check import asks, passages_state_answer
from llm.backend import Backend
from llm.citations import MARKER, SENTENCE, attribute, cited_numbers, content_words
from llm.prompt import DECLINE, Guidance, Prompt, Source, Turn, build_prompt
from llm.support import MIN_WORDS, Unsupported, declines, recite, unsupported_sentences
from retrieval.display import excerpt
from retrieval.types import Hit

NOTHING_FOUND = (
    "I could not find anything about that in the documents, so I cannot answer it from them."
)
# When the model produced nothing usable (only markup, only a repetition): said plainly
# rather than shown as an empty bubble.
NO_ANSWER = "The model did not produce an answer to this question. Try asking it another way."
# When the model only pointed at a source ("[2]"): the sentence of it nearest the question,
# quoted and labelled as such rather than passed off as the model's answer.
POINTED = "The model answered only with a citation. The passage it cites says: “{quote}” [{number}]"
# An answer no source supports anywhere is withheld: it is almost always invented (a
# question the documents do not cover, answered from the model's own memory).
WITHHELD = f"{DECLINE} (The model wrote an answer that no passage supports, so it is not shown.)"
# An answer whose cited passages, asked on their own, do not state the answer to the
# question (a neighbouring fact: a training budget given as the bonus asked about).
NOT_STATED = (
    f"{DECLINE} (The passages the model cited do not state the answer, so its answer is not shown.)"
)
MAX_QUESTION_CHARS = 4000
SNIPPET_CHARS = 300
Checked = tuple[str, tuple[Citation, ...], tuple[Unsupported, ...]]  # an answer as shown,
# what it cites, and its sentences no cited passage supports


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
        snippet=excerpt(hit.text, SNIPPET_CHARS),
        boxes=hit.boxes,
        label=hit.label,
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
        guidance: Guidance = (),
        follows: Sequence[str] = (),
    ) -> Grounding:
        """The prompt for ``question`` over ``hits`` after ``history``, fitted to the
        backend's context less ``answer_tokens``; ``earlier`` are the citations of the
        sources earlier turns listed; ``guidance``: the searched collections' instructions
        (in the system text, neutralised like the sources); ``follows``: the earlier
        questions a follow-up leans on (``retrieval.followup.followed``). Raises
        ``PromptTooLong`` and ``ChatTemplateFailed``."""
        sources = [
            Source(0, hit.title, hit.page, hit.reading, key=hit.chunk_id, label=hit.label)
            for hit in hits
        ]
        prompt = build_prompt(
            backend.prompt_format,
            question=question,
            sources=sources,
            history=list(history),
            token_budget=backend.context_tokens - answer_tokens,
            count_tokens=backend.count_tokens,
            guidance=guidance,
            follows=follows,
        )
        shown = {**(earlier or {}), **{hit.chunk_id: citation_of(hit) for hit in hits}}
        return cls(prompt, shown)

    @classmethod
    def of_turn(cls, question: str, context: TurnContext) -> Grounding:
        """The grounding of a stored first turn (what its model was shown), to check its
        generated text again: ``bench.replay`` runs today's checks on past generations."""
        shown = {s.citation.chunk_id: s.citation for s in context.sources}
        sources = tuple(source_of(s) for s in context.sources)
        citable = {s.number: s for s in sources}
        return cls(Prompt("", (), Turn(question, "", sources), sources, citable), shown)

    def reading(self) -> list[Citation]:
        """Every source the model is given for this turn (new and listed earlier), best
        first, with the numbers the prompt gives them."""
        return [self._numbered(source) for source in self.prompt.relevant]

    def listed(self) -> list[Citation]:
        """This turn's sources, numbered as the prompt numbers them."""
        return [self._numbered(source) for source in self.prompt.turn.sources]

    def cite(self, text: str, *, repoint: bool = True) -> tuple[str, tuple[Citation, ...]]:
        """The answer with its bare sentences attributed and (``repoint``) its miscited
        ones pointed at the source that supports them, and the sources it cites, in the
        order it first cites them."""
        answer = attribute(text.strip(), self.prompt.relevant)
        if repoint:
            order = [s.number for s in self.prompt.relevant]
            answer = recite(answer, self.prompt.citable, order)
        numbers = cited_numbers(answer, self.prompt.citable)
        return answer, tuple(self._numbered(self.prompt.citable[n], n) for n in numbers)

    def cited_as_written(self, text: str) -> tuple[Citation, ...]:
        """The sources ``text`` cites with the numbers it wrote (a stopped answer: what
        the reader saw stream is kept as it was, neither attributed nor re-pointed)."""
        numbers = cited_numbers(text, self.prompt.citable)
        return tuple(self._numbered(self.prompt.citable[n], n) for n in numbers)

    def unsupported(self, answer: str) -> tuple[Unsupported, ...]:
        """The sentences of a cited answer (from :meth:`cite`) that no source supports."""
        return tuple(unsupported_sentences(answer, self.prompt.citable))

    def checked(self, text: str, *, withhold: bool = True) -> Checked:
        """The generated text as the reader gets it: cited (:meth:`cite`), its unsupported
        sentences found; :data:`NO_ANSWER` when it says nothing (no words, only markers),
        and, when ``withhold`` and no sentence of it is supported, :data:`WITHHELD`."""
        answer, citations = self.cite(text)
        if not says_something(answer):  # nothing, or only markers and punctuation ("[1]")
            pointed = self._pointed_at(citations)
            return (pointed, citations[:1], ()) if pointed else (NO_ANSWER, (), ())
        unsupported = self.unsupported(answer)
        if withhold and unsupported and _nothing_else(answer, unsupported):
            return WITHHELD, (), ()
        return answer, citations, unsupported

    def to_check(self, backend: Backend, checked: Checked) -> tuple[Citation, ...]:
        """What :meth:`second_look` would ask ``backend``'s model about: the citations of a
        :meth:`checked` answer; none for a decline, an uncited answer or a model without
        a chat template."""
        answer, citations, _ = checked
        if not citations or declines(answer) or not asks(backend.prompt_format):
            return ()
        return citations

    def second_look(
        self, backend: Backend, checked: Checked, *, deadline: float | None = None
    ) -> Checked:
        """A :meth:`checked` answer after asking the model whether the passages it cites
        state the answer to the question (:mod:`llm.answer_check`): :data:`NOT_STATED` when
        they do not, else unchanged (also when nothing is asked: :meth:`to_check`).
        Blocks while the model reads the passages: call it from a thread in async code."""
        citable = self.prompt.citable
        passages = [citable[c.number] for c in self.to_check(backend, checked)]
        if not passages:
            return checked
        question = self.prompt.turn.question
        if passages_state_answer(backend, question, passages, deadline=deadline) is False:
            return NOT_STATED, (), ()
        return checked

    def _pointed_at(self, citations: Sequence[Citation]) -> str | None:
        """For an answer of markers only: the sentence of the first passage it cites that
        shares the most words with the question, quoted; None when none shares any."""
        if not citations:
            return None
        number = citations[0].number
        asked = content_words(self.prompt.turn.question)
        sentences = [m.group().strip() for m in SENTENCE.finditer(self.prompt.citable[number].text)]
        best = max(sentences, key=lambda s: len(content_words(s) & asked), default="")
        if not content_words(best) & asked:
            return None
        return POINTED.format(quote=MARKER.sub("", best).strip(), number=number)

    def _numbered(self, source: Source, number: int | None = None) -> Citation:
        number = source.number if number is None else number
        return replace(self.shown[source.key], number=number)


def source_of(shown: ShownSource) -> Source:
    """A stored source as the model was shown it (same number, text and label: a later
    turn's prompt repeats it byte for byte)."""
    c = shown.citation
    return Source(c.number, c.title, c.page, shown.text, key=c.chunk_id, label=c.label)


def _nothing_else(answer: str, unsupported: tuple[Unsupported, ...]) -> bool:
    """Whether ``answer`` says nothing beyond its unsupported sentences (and no decline)."""
    rest, cursor = [], 0
    for span in unsupported:
        rest.append(answer[cursor : span.start])
        cursor = span.end
    rest.append(answer[cursor:])
    left = MARKER.sub(" ", " ".join(rest))
    return len(content_words(left)) < MIN_WORDS and not declines(answer)


def says_something(answer: str) -> bool:
    """Whether an answer has any words once its citation markers are left out."""
    return any(c.isalnum() for c in MARKER.sub("", answer))
