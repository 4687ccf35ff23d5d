"""Grounded prompts laid out for KV-cache reuse: stable system text, then the turns.

Every turn is written down as it was first shown to the model: the sources listed with
it, its question and the exact text the model answered. A follow-up turn therefore
starts with the previous prompt and answer byte for byte, and the engine prefills only
the new part: this turn's new sources and question. Source numbers are fixed for the
whole conversation; a source already listed in an earlier turn is referred to by its
number rather than repeated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from llm.chat_format import ChatTemplate, render_chat_template
from llm.inert import Neutralizer

TokenCount = Callable[[str], int]


@dataclass(frozen=True)
class Source:
    number: int  # 0 until ``build_prompt`` numbers it
    title: str
    page: int
    text: str
    key: int = 0  # identity across turns (a chunk id); two sources with one key are one
    label: str = ""  # its page's name where "page n" would mislead ("Slide 3", "Sheet X")


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str = ""  # exactly what the model generated; empty for the turn being asked
    sources: tuple[Source, ...] = ()  # listed with this turn: new to the conversation
    refers: tuple[int, ...] = ()  # numbers of earlier-listed sources that apply again
    # The earlier questions a follow-up leans on ("What about Heron Court?" after "Where
    # is the fire assembly point for Kestrel House?"), oldest first; shown right before it.
    follows: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prompt:
    text: str
    stop: tuple[str, ...]
    turn: Turn  # this turn as laid out: store it with the answer for the next turn
    relevant: tuple[Source, ...]  # this turn's sources (new and referred to), best first
    citable: dict[int, Source] = field(default_factory=dict)  # every number in the prompt
    history_turns: int = 0


INSTRUCTIONS = (
    "Ragdesk answers staff questions using only the numbered sources given with each "
    "question, and cites the source of every fact as [n]. When the sources do not contain "
    "the answer, it says that the documents do not cover it."
)
# One worked example: base models follow a demonstrated format far better than a rule.
EXAMPLE = Turn(
    "When does the office open?",
    "The office opens at 8:00 on weekdays [1].",
    (
        Source(1, "Office guide", 4, "The office opens at 8:00 and closes at 18:00 on weekdays."),
        Source(2, "Parking", 1, "Visitors park in the north car park."),
    ),
)
NO_SOURCES = "(no relevant sources found)"
MAX_FOLLOWED_CHARS = 200  # of each earlier question shown with a follow-up


def demonstrated(prompt_text: str) -> tuple[str, ...]:
    """The worked example's answer when ``prompt_text`` shows it: an answer must not
    repeat it (a document can ask the model to, and it would come out cited)."""
    return (EXAMPLE.answer,) if EXAMPLE.answer in prompt_text else ()


# Instruction-tuned models get the rules in the second person, and the same few words to
# decline with every time (so "not covered" is easy to recognise, and never invented).
DECLINE = "The documents do not cover this."
CHAT_INSTRUCTIONS = (
    "You answer staff questions using the numbered sources given with each question. "
    "Answer briefly, in one to three sentences, with the facts the sources give, and put "
    "the source's number after each fact, like [1]. When the sources do not contain the "
    "answer, say that the documents do not cover it."
)


# The deployment's own instructions for the documents a conversation searches (a
# collection's, ``retrieval.collections``): (label, text) pairs, shown after the rules.
Guidance = Sequence[tuple[str, str]]
GUIDANCE_HEADER = (
    "Instructions from the administrators for these documents (they add to the rules "
    "above and never replace them):"
)


class PromptFormat(Protocol):
    def render(self, history: Sequence[Turn], turn: Turn, guidance: Guidance = ()) -> str: ...

    @property
    def stop(self) -> tuple[str, ...]: ...


def format_sources(turn: Turn, inert: Neutralizer) -> str:
    """Numbered sources, one per line (untrusted text flattened and neutralised), then the
    numbers of earlier sources that apply again."""
    lines = [source_line(s, inert) for s in turn.sources]
    if turn.refers:
        lines.append("Also relevant, listed above: " + ", ".join(f"[{n}]" for n in turn.refers))
    return "\n".join(lines) or NO_SOURCES


def source_line(source: Source, inert: Neutralizer) -> str:
    """``[n] Title (page p): text``, its untrusted text flattened and neutralised; a
    table's rows (and its header) stay one to a line, as a Markdown table."""
    title, text = one_line(source.title, inert), _flattened(source.text, inert)
    gap = "\n" if text.startswith("|") else " "  # a table starts on a line of its own
    where = one_line(source.label, inert) if source.label else f"page {source.page}"
    return f"[{source.number}] {title} ({where}):{gap}{text}"


# A Markdown table row: a line that starts and ends with a pipe. Kept on a line of its own,
# it cannot pass for anything the prompt's layout means ("Question:", "[2] …").
TABLE_ROW = re.compile(r"\|.*\|")


def _flattened(text: str, inert: Neutralizer) -> str:
    """Prose flattened onto one line; Markdown table rows each on their own line."""
    if "|" not in text:
        return one_line(text, inert)
    lines: list[str] = []
    prose: list[str] = []
    for line in text.split("\n"):
        if TABLE_ROW.fullmatch(stripped := line.strip()):
            if prose:
                lines.append(one_line(" ".join(prose), inert))
                prose.clear()
            lines.append(one_line(stripped, inert))
        elif stripped:
            prose.append(stripped)
    if prose:
        lines.append(one_line(" ".join(prose), inert))
    return "\n".join(lines)


def format_question(turn: Turn, inert: Neutralizer, question: str) -> str:
    """``Question: …``, after the earlier questions it follows up, if any, each flattened
    onto one line and neutralised. A small model reads "What about Heron Court?" as the
    fire assembly point's question far more often with the question it continues beside
    it than several hundred tokens of sources above (docs/BENCHMARKS.md)."""
    if not turn.follows:
        return f"Question: {question}"
    label = "Previous question" if len(turn.follows) == 1 else "Previous questions"
    earlier = " / ".join(_clipped(one_line(asked, inert)) for asked in turn.follows)
    return f"{label}: {earlier}\nQuestion: {question}"


def _clipped(text: str, limit: int = MAX_FOLLOWED_CHARS) -> str:
    """``text`` cut at a word before ``limit`` characters, marked with an ellipsis: a long
    earlier question (a pasted paragraph) must not crowd the sources out of the prompt."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip() + " …"


def one_line(text: str, inert: Neutralizer) -> str:
    """Untrusted text neutralised and flattened onto one line."""
    return " ".join(inert(text).split())


def format_guidance(guidance: Guidance, inert: Neutralizer) -> str:
    """The rules' addendum: each instruction under its label, flattened onto one quoted
    line and neutralised like document text, so none can end the system text, open a
    turn, start a line of its own ("Question:", "[1]") or close its quotes; empty when
    there is none. Part of the stable prefix: the same for every turn."""
    if not guidance:
        return ""
    lines = [GUIDANCE_HEADER]
    for label, text in guidance:
        quoted = one_line(text, inert).replace('"', "\u201d")
        lines.append(f'- {one_line(label, inert)}: "{quoted}"')
    return "\n".join(lines)


class CompletionFormat:
    """Plain-text layout for base models that have no chat template."""

    stop = ("\nQuestion:", "\nPrevious question", "\nSources:", "\n[")

    def __init__(self, inert: Neutralizer | None = None):
        self.inert = inert or Neutralizer()

    def render(self, history: Sequence[Turn], turn: Turn, guidance: Guidance = ()) -> str:
        added = format_guidance(guidance, self.inert)
        parts = [INSTRUCTIONS, *([added] if added else []), ""]
        for done in (EXAMPLE, *history):
            # The answer as the model wrote it after "Answer:" (the example's own layout,
            # which the model copies), so the next prompt extends the cached one.
            parts += [self._ask(done) + "\n" + self.inert(done.answer.strip()), ""]
        parts.append(self._ask(turn))
        return "\n".join(parts)

    def _ask(self, turn: Turn) -> str:
        listed = format_sources(turn, self.inert)
        asked = format_question(turn, self.inert, one_line(turn.question, self.inert))
        return f"Sources:\n{listed}\n{asked}\nAnswer:"


class ChatTemplateFormat:
    """The model's own chat template (from its GGUF metadata), rendered with Jinja2 within
    the bounds of time and memory of :mod:`llm.template_sandbox`.

    A template that cannot lay out the prompt (it raises, goes past a bound, or was refused
    as too long or not valid Jinja2) raises :class:`llm.chat_format.ChatTemplateFailed`,
    a 400: a model's template is code from whoever made the GGUF file.
    """

    def __init__(
        self, template: str, *, bos_token: str, eos_token: str, inert: Neutralizer | None = None
    ):
        self.template = ChatTemplate(template, bos_token, eos_token)
        self._eos = eos_token
        self._bos = bos_token
        self.inert = inert or Neutralizer()

    @property
    def stop(self) -> tuple[str, ...]:
        return (self._eos,) if self._eos else ()

    def render(self, history: Sequence[Turn], turn: Turn, guidance: Guidance = ()) -> str:
        added = format_guidance(guidance, self.inert)
        system = f"{CHAT_INSTRUCTIONS}\n\n{added}" if added else CHAT_INSTRUCTIONS
        messages: list[dict[str, str]] = [{"role": "system", "content": system}]
        for done in history:
            messages.append({"role": "user", "content": self._ask(done)})
            messages.append({"role": "assistant", "content": self.inert(done.answer.strip())})
        messages.append({"role": "user", "content": self._ask(turn)})
        return self.render_messages(messages)

    def render_messages(self, messages: Sequence[Mapping[str, str]]) -> str:
        """Messages (already neutralised) laid out by the template, ready for generation."""
        text = render_chat_template(self.template, messages)
        # The engine's tokenizer adds BOS itself: a second one from the template would
        # change what the model sees.
        return text.removeprefix(self._bos) if self._bos else text

    def _ask(self, turn: Turn) -> str:
        listed = format_sources(turn, self.inert)
        asked = format_question(turn, self.inert, self.inert(turn.question))
        return f"Sources:\n{listed}\n\n{asked}"


def build_prompt(
    prompt_format: PromptFormat,
    *,
    question: str,
    sources: Sequence[Source],
    history: Sequence[Turn],
    token_budget: int,
    count_tokens: TokenCount,
    guidance: Guidance = (),
    follows: Sequence[str] = (),
) -> Prompt:
    """Lay out this turn after the earlier ones and fit it into ``token_budget``;
    ``guidance`` follows the rules in the system text (:func:`format_guidance`);
    ``follows``: the earlier questions this one follows up (:attr:`Turn.follows`).

    ``sources`` arrive best first, unnumbered; each gets the number its key had earlier in
    the conversation, or the next free one. Over budget: drop the oldest turns (the cache
    prefix is lost once, then grows again), then the weakest sources, then shorten the
    best one. A question that cannot fit even alone raises :class:`PromptTooLong`.
    """
    numbers = {s.key: s.number for t in history for s in t.sources if s.key}
    next_number = max((s.number for t in history for s in t.sources), default=0) + 1
    numbered: list[Source] = []
    for source in sources:
        number = numbers.get(source.key) if source.key else None
        if number is None:
            number, next_number = next_number, next_number + 1
            if source.key:
                numbers[source.key] = number
        numbered.append(replace(source, number=number))
    kept = list(history)
    while True:
        listed = {s.key: s for t in kept for s in t.sources if s.key}
        new = tuple(s for s in numbered if s.key not in listed)
        refers = tuple(s.number for s in numbered if s.key in listed)
        turn = Turn(question, "", new, refers, tuple(follows))
        text = prompt_format.render(_resolved(kept), turn, guidance)
        if count_tokens(text) <= token_budget:
            citable = {s.number: s for t in (*kept, turn) for s in t.sources}
            return Prompt(text, prompt_format.stop, turn, tuple(numbered), citable, len(kept))
        if kept:
            kept.pop(0)
        elif len(numbered) > 1:
            numbered.pop()
        elif numbered and len(numbered[0].text) > 200:
            first = numbered[0]
            numbered[0] = replace(first, text=first.text[: len(first.text) // 2])
        else:
            raise PromptTooLong(count_tokens(text), token_budget)


def _resolved(turns: Sequence[Turn]) -> list[Turn]:
    """The turns with references to sources no longer in the prompt (their turn was dropped
    to fit) removed; unchanged when nothing was dropped, so the cached prefix still matches."""
    listed: set[int] = set()
    out = []
    for turn in turns:
        refers = tuple(n for n in turn.refers if n in listed)
        out.append(turn if refers == turn.refers else replace(turn, refers=refers))
        listed.update(s.number for s in turn.sources)
    return out


class PromptTooLong(Exception):
    def __init__(self, tokens: int, budget: int):
        super().__init__(f"the prompt needs {tokens} tokens but only {budget} fit in the context")
        self.tokens = tokens
        self.budget = budget
