"""A second look at a cited answer: do the passages it cites state the answer at all?

The support check (:mod:`llm.support`) compares words. It passes "The annual performance
bonus is £1,200 per financial year [4]" when [4] says "the annual training budget is
£1,200 per financial year": most words, and the number, are there. A question the
documents do not cover, answered with a neighbouring fact, looks exactly like a right
answer to it. Asked on its own, with only the cited passages and the question, the same
small model tells the two apart far better than any rule over words that was tried
(docs/BENCHMARKS.md, "A second look at cited answers").

The check is one token, constrained by a grammar to yes or no, greedy. What was
measured on recorded answers (``bench.replay --check``) and chose this form:

- The answer itself is left out of the prompt: shown its own answer, the model agrees
  with it (a near-miss answer scored as high as a right one).
- The instruction is strict ("explicitly state ... a similar fact about something else
  ... reply no"): asked plainly, the model says yes to near misses often enough that
  their answers would still be shown.

Only models with a chat template (instruction-tuned) are asked: a base model does not
follow the checker's instruction, so its answers are left to the support check.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypeGuard

from llm.backend import Backend
from llm.params import CompletionRequest, EngineError, SamplingParams, TextDelta
from llm.prompt import ChatTemplateFormat, PromptFormat, Source, one_line, source_line

log = logging.getLogger(__name__)

CHECKER = (
    "You are a strict checker. Reply yes only when the passages explicitly state the "
    "answer to the question. When they give a similar fact about something else, or do "
    "not say, reply no."
)
ASK = "Do the passages explicitly state the answer to this question? Reply yes or no."
GRAMMAR = 'root ::= "yes" | "Yes" | "no" | "No"'


def passages_state_answer(
    backend: Backend, question: str, passages: Sequence[Source], *, deadline: float | None = None
) -> bool | None:
    """Ask ``backend``'s model whether ``passages`` state the answer to ``question``: False
    for a clear no; None when it was not asked (no chat template, no passage) or could not
    answer (refused, failed, past ``deadline``), which leaves the answer as it was. Blocks
    until the one token is generated: call it from a thread in async code."""
    try:
        request = check_request(backend.prompt_format, question, passages, deadline=deadline)
        if request is None:
            return None
        completion = backend.submit(request)
    except EngineError as exc:  # overloaded, a template that refused, no grammars here
        log.warning("answer check not run: %s", exc)
        return None
    reply = []
    for event in completion:
        if isinstance(event, TextDelta):
            reply.append(event.text)
        elif event.reason not in ("stop", "length"):
            log.warning("answer check ended with %s: %s", event.reason, event.error)
            return None
    return not says_no("".join(reply))


def asks(prompt_format: PromptFormat) -> TypeGuard[ChatTemplateFormat]:
    """Whether a model with this prompt format is asked (it has a chat template)."""
    return isinstance(prompt_format, ChatTemplateFormat)


def check_request(
    prompt_format: PromptFormat,
    question: str,
    passages: Sequence[Source],
    *,
    deadline: float | None = None,
) -> CompletionRequest | None:
    """The request asking whether ``passages`` state the answer to ``question``; None when
    the model has no chat template or there is no passage to ask about."""
    if not asks(prompt_format) or not passages:
        return None
    inert = prompt_format.inert
    listed = "\n\n".join(source_line(s, inert) for s in passages)
    user = f"Passages:\n{listed}\n\nQuestion: {one_line(question, inert)}\n\n{ASK}"
    text = prompt_format.render_messages(
        [{"role": "system", "content": CHECKER}, {"role": "user", "content": user}]
    )
    params = SamplingParams(max_tokens=2, temperature=0.0, stop=prompt_format.stop)
    return CompletionRequest(text, params, grammar=GRAMMAR, deadline=deadline, own_grammar=True)


def says_no(reply: str) -> bool:
    """The verdict: only a clear "no" counts against the answer (an empty or unreadable
    reply leaves it to the support check)."""
    return reply.strip().lower().startswith("no")
