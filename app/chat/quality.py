"""How good one grounded answer is against a golden question, and a set of them together.

- **correct**: a reference answer (any of its forms) is contained in the answer, both
  normalised (case, punctuation, articles, spacing, citation markers);
- **citation precision**: of the passages the answer cites, the share that contain the
  golden answer (or its reference);
- **unsupported**: the answer has a sentence no source supports (``llm.support``);
- **abstained**: the answer declines ("not in the documents") instead of answering, the
  right thing for an off-topic question and a miss for a factual one;
- **empty** and **looped** (cut by the repetition guard) are counted on their own.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from app.chat.answering import NO_ANSWER, says_something
from llm.citations import MARKER
from llm.params import Usage
from llm.support import declines
from retrieval.evaluation import GoldenQuestion, percentile

EMPTY_ANSWERS = frozenset({"", NO_ANSWER, "(no answer)", "(stopped)"})
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCTUATION = re.compile(r"[^\w\s]")


def normalise(text: str) -> str:
    """Lower case, no accents, citation markers, punctuation or articles, single spaces."""
    text = MARKER.sub(" ", text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    text = _PUNCTUATION.sub(" ", text.replace("'", ""))
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains(text: str, references: Sequence[str]) -> bool:
    """Whether ``text`` contains any reference, normalised, on word boundaries."""
    haystack = f" {normalise(text)} "
    return any(f" {normalise(ref)} " in haystack for ref in references if normalise(ref))


@dataclass(frozen=True)
class AnswerScore:
    question: str
    offtopic: bool
    answer: str
    correct: bool | None  # None for off-topic questions
    cited: int  # passages the answer cites
    cited_with_answer: int  # ... of which contain a reference answer
    unsupported_sentences: int
    abstained: bool
    empty: bool
    looped: bool
    ttft_s: float | None  # None: no token came
    total_s: float
    prompt_tokens: int | None = None  # the prompt the model read; None: no model ran
    prefilled_tokens: int | None = None  # ... of which not already in the KV cache


def score_answer(
    item: GoldenQuestion,
    answer: str,
    cited_texts: Sequence[str],
    *,
    unsupported_sentences: int,
    looped: bool,
    ttft_s: float | None,
    total_s: float,
    usage: Usage | None = None,
) -> AnswerScore:
    empty = answer.strip() in EMPTY_ANSWERS or not says_something(answer)
    references = item.references
    located = item.answers + item.reference  # a cited passage may hold either
    return AnswerScore(
        question=item.question,
        offtopic=item.offtopic,
        answer=answer,
        # None: off-topic, or a line that names the passage but gives no answer to check
        correct=None if not references else (not empty and contains(answer, references)),
        cited=len(cited_texts),
        cited_with_answer=sum(contains(t, located) for t in cited_texts) if located else 0,
        unsupported_sentences=unsupported_sentences,
        abstained=not empty and declines(answer),
        empty=empty,
        looped=looped,
        ttft_s=ttft_s,
        total_s=total_s,
        prompt_tokens=usage.prompt_tokens if usage else None,
        prefilled_tokens=usage.prompt_tokens - usage.cached_tokens if usage else None,
    )


@dataclass(frozen=True)
class AnswerReport:
    questions: int
    factual: int
    offtopic: int
    correctness: float | None  # share of factual questions (with a reference) answered right
    citation_precision: float | None  # over the passages factual answers cite
    unsupported: float  # share of answers with an unsupported sentence
    abstention: float | None  # share of off-topic questions declined
    false_abstention: float | None  # share of factual questions declined
    uncited: float  # share of non-empty factual answers citing nothing
    empty: int
    looped: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    total_p50_s: float
    total_p95_s: float
    # what time to first token is made of, independent of the machine's speed
    prompt_tokens_p50: float | None
    prefilled_tokens_p50: float | None
    scores: tuple[AnswerScore, ...]

    def as_dict(self) -> dict[str, float | int | None]:
        fields = {k: v for k, v in self.__dict__.items() if k != "scores"}
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in fields.items()}


def report(scores: Sequence[AnswerScore]) -> AnswerReport:
    factual = [s for s in scores if not s.offtopic]
    offtopic = [s for s in scores if s.offtopic]
    checked = [s for s in factual if s.correct is not None]  # lines with a reference
    cited = sum(s.cited for s in checked)
    answered = [s for s in factual if not s.empty]
    ttfts = [s.ttft_s for s in scores if s.ttft_s is not None]
    totals = [s.total_s for s in scores]
    prompts = [s.prompt_tokens for s in scores if s.prompt_tokens is not None]
    prefilled = [s.prefilled_tokens for s in scores if s.prefilled_tokens is not None]
    return AnswerReport(
        questions=len(scores),
        factual=len(factual),
        offtopic=len(offtopic),
        correctness=_share([bool(s.correct) for s in checked]),
        citation_precision=sum(s.cited_with_answer for s in checked) / cited if cited else None,
        unsupported=_share([s.unsupported_sentences > 0 for s in scores]) or 0.0,
        abstention=_share([s.abstained for s in offtopic]),
        false_abstention=_share([s.abstained for s in factual]),
        uncited=_share([s.cited == 0 for s in answered]) or 0.0,
        empty=sum(s.empty for s in scores),
        looped=sum(s.looped for s in scores),
        ttft_p50_s=statistics.median(ttfts) if ttfts else None,
        ttft_p95_s=percentile(ttfts, 0.95) if ttfts else None,
        total_p50_s=statistics.median(totals) if totals else 0.0,
        total_p95_s=percentile(totals, 0.95) if totals else 0.0,
        prompt_tokens_p50=statistics.median(prompts) if prompts else None,
        prefilled_tokens_p50=statistics.median(prefilled) if prefilled else None,
        scores=tuple(scores),
    )


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None
