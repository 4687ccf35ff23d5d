"""The entry point: a chat template compiled once and rendered within the bounds."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from llm.template_sandbox.environment import bounded_environment
from llm.template_sandbox.limits import (
    BUDGET,
    MAX_OUTPUT,
    MAX_TEMPLATE_CHARS,
    RENDER_SECONDS,
    Budget,
    TemplateRejected,
    over_limit,
)


def _strftime_now(fmt: str) -> str:
    if len(fmt) > 1000:
        raise over_limit("a strftime_now() format", 1000, "characters")
    return datetime.now().strftime(fmt)


def _raise_exception(message: str) -> None:
    raise ValueError(message)


class BoundedChatTemplate:
    """A chat template compiled once, rendered (thread-safely) as llama-cpp-python's
    ``Jinja2ChatFormatter`` renders it, within the bounds of :mod:`llm.template_sandbox`."""

    def __init__(self, source: str, *, bos_token: str, eos_token: str) -> None:
        """Raises :class:`TemplateRejected` for a template too long or not valid Jinja2."""
        if len(source) > MAX_TEMPLATE_CHARS:
            raise TemplateRejected(
                f"the chat template is {len(source)} characters long; "
                f"at most {MAX_TEMPLATE_CHARS} are accepted"
            )
        token = BUDGET.set(Budget(RENDER_SECONDS))
        try:
            self._template = bounded_environment().from_string(source)
        except Exception as exc:  # TemplateSyntaxError; RecursionError on deep nesting
            raise TemplateRejected(f"the chat template does not compile: {exc}") from exc
        finally:
            BUDGET.reset(token)
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        seconds: float = RENDER_SECONDS,
    ) -> str:
        """The prompt. Raises :class:`TemplateLimitExceeded` past a bound, ``RecursionError``
        or ``MemoryError`` if Python runs out first, and whatever the template raises
        (``raise_exception`` raises ``ValueError``)."""
        token = BUDGET.set(budget := Budget(seconds))
        stream = cast(
            Generator[str, None, None],
            self._template.generate(
                messages=messages,
                eos_token=self.eos_token,
                bos_token=self.bos_token,
                raise_exception=_raise_exception,
                add_generation_prompt=add_generation_prompt,
                functions=None,
                function_call=None,
                tools=None,
                tool_choice=None,
                strftime_now=_strftime_now,
            ),
        )
        try:
            with contextlib.closing(stream):
                out: list[str] = []
                size = 0
                for piece in stream:
                    size += len(piece)
                    if size > MAX_OUTPUT:
                        raise over_limit("the prompt", MAX_OUTPUT, "characters")
                    budget.tick()
                    out.append(piece)
                return "".join(out)
        finally:
            BUDGET.reset(token)
