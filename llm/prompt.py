"""Grounded prompts laid out for KV-cache reuse: stable system text, history, then this turn.

Everything before this turn's sources is identical from one turn to the next, so a
backend that keeps its KV cache (llama.cpp does) only prefills the new part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

from llm.inert import Neutralizer

TokenCount = Callable[[str], int]


@dataclass(frozen=True)
class Source:
    number: int
    title: str
    page: int
    text: str


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str


@dataclass(frozen=True)
class Prompt:
    text: str
    stop: tuple[str, ...]
    sources: tuple[Source, ...]
    history_turns: int


INSTRUCTIONS = (
    "Ragdesk answers staff questions using only the numbered sources given with each "
    "question, and cites the source of every fact as [n]. When the sources do not contain "
    "the answer, it says that the documents do not cover it."
)
# One worked example: base models follow a demonstrated format far better than a rule.
EXAMPLE_SOURCES = (
    Source(1, "Office guide", 4, "The office opens at 8:00 and closes at 18:00 on weekdays."),
    Source(2, "Parking", 1, "Visitors park in the north car park."),
)
EXAMPLE = Turn("When does the office open?", "The office opens at 8:00 on weekdays [1].")


class PromptFormat(Protocol):
    def render(self, history: Sequence[Turn], sources: Sequence[Source], question: str) -> str: ...

    @property
    def stop(self) -> tuple[str, ...]: ...


def format_sources(sources: Sequence[Source], inert: Neutralizer) -> str:
    """Numbered sources, one per line; untrusted text is flattened and neutralised."""
    return "\n".join(
        f"[{s.number}] {_one_line(s.title, inert)} (page {s.page}): {_one_line(s.text, inert)}"
        for s in sources
    )


def _one_line(text: str, inert: Neutralizer) -> str:
    return " ".join(inert(text).split())


class CompletionFormat:
    """Plain-text layout for base models that have no chat template."""

    stop = ("\nQuestion:", "\nSources:", "\n[", "\nEarlier in this conversation:")

    def __init__(self, inert: Neutralizer | None = None):
        self.inert = inert or Neutralizer()

    def render(self, history: Sequence[Turn], sources: Sequence[Source], question: str) -> str:
        parts = [
            INSTRUCTIONS,
            "",
            self._turn(EXAMPLE_SOURCES, EXAMPLE.question),
            EXAMPLE.answer,
            "",
        ]
        if history:
            parts.append("Earlier in this conversation:")
            for turn in history:
                parts += [
                    f"Question: {_one_line(turn.question, self.inert)}",
                    f"Answer: {_one_line(turn.answer, self.inert)}",
                ]
            parts.append("")
        parts.append(self._turn(sources, question))
        return "\n".join(parts)

    def _turn(self, sources: Sequence[Source], question: str) -> str:
        listed = format_sources(sources, self.inert) if sources else "(no relevant sources found)"
        return f"Sources:\n{listed}\nQuestion: {_one_line(question, self.inert)}\nAnswer:"


class ChatTemplateFormat:
    """The model's own chat template (from its GGUF metadata), rendered with Jinja2."""

    def __init__(
        self, template: str, *, bos_token: str, eos_token: str, inert: Neutralizer | None = None
    ):
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self._formatter = Jinja2ChatFormatter(template, eos_token=eos_token, bos_token=bos_token)
        self._eos = eos_token
        self.inert = inert or Neutralizer()

    @property
    def stop(self) -> tuple[str, ...]:
        return (self._eos,) if self._eos else ()

    def render(self, history: Sequence[Turn], sources: Sequence[Source], question: str) -> str:
        messages: list[dict[str, str]] = [{"role": "system", "content": INSTRUCTIONS}]
        for turn in history:
            messages.append({"role": "user", "content": self.inert(turn.question)})
            messages.append({"role": "assistant", "content": self.inert(turn.answer)})
        listed = format_sources(sources, self.inert) if sources else "(no relevant sources found)"
        turn_text = f"Sources:\n{listed}\n\nQuestion: {self.inert(question)}"
        messages.append({"role": "user", "content": turn_text})
        return str(self._formatter(messages=cast(Any, messages)).prompt)


def build_prompt(
    prompt_format: PromptFormat,
    *,
    question: str,
    sources: Sequence[Source],
    history: Sequence[Turn],
    token_budget: int,
    count_tokens: TokenCount,
) -> Prompt:
    """Fit the prompt into ``token_budget``: drop the oldest turns, then the weakest sources,
    then shorten the last source. Sources arrive best first. A question that cannot fit
    even alone raises :class:`PromptTooLong`."""
    history, sources = list(history), list(sources)
    while True:
        text = prompt_format.render(history, sources, question)
        if count_tokens(text) <= token_budget:
            return Prompt(text, prompt_format.stop, tuple(sources), len(history))
        if history:
            history.pop(0)
        elif len(sources) > 1:
            sources.pop()
        elif sources and len(sources[0].text) > 200:
            sources[0] = replace(sources[0], text=sources[0].text[: len(sources[0].text) // 2])
        else:
            raise PromptTooLong(count_tokens(text), token_budget)


class PromptTooLong(Exception):
    def __init__(self, tokens: int, budget: int):
        super().__init__(f"the prompt needs {tokens} tokens but only {budget} fit in the context")
        self.tokens = tokens
        self.budget = budget
