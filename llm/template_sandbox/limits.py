"""The bounds, what one render has used of them, and the checks that charge it."""

from __future__ import annotations

import sys
import time
from collections.abc import ItemsView, KeysView, ValuesView
from contextvars import ContextVar
from typing import Any, TypeVar

from jinja2.exceptions import SecurityError
from jinja2.utils import Namespace

MAX_TEMPLATE_CHARS = 64 * 1024  # the longest real templates are about 17 000 characters
MAX_RANGE = 100_000  # as Jinja2's own sandbox
MAX_ITERATIONS = 1_000_000  # all loop iterations of one render together
MAX_TEXT = 2_000_000  # characters in any one string a template builds (>> a 131072-token context)
MAX_ITEMS = 100_000  # items in any one list, tuple or dict a template builds
MAX_OUTPUT = 2_000_000  # characters of rendered prompt
MAX_BUILT_BYTES = 128 * 1024 * 1024  # everything one render builds, added up
MAX_CALL_DEPTH = 50  # nested macro / caller / recursive-loop calls
MAX_INT_BITS = 1 << 16  # integers a template computes with * and **
RENDER_SECONDS = 1.0
_MAX_WEIGHED = MAX_ITEMS  # parts of a value weighed: one with more counts as too large

_T = TypeVar("_T")


class TemplateLimitExceeded(SecurityError):
    """A template went past one of the bounds here while rendering."""


class TemplateRejected(Exception):
    """A template that is not compiled at all: too long, or not valid Jinja2."""


class Budget:
    """What one render has used so far."""

    __slots__ = ("built", "deadline", "depth", "iterations", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.iterations = 0
        self.built = 0
        self.depth = 0

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimitExceeded(f"rendering took longer than {self.seconds:g} s")

    def charge(self, nbytes: int) -> None:
        self.built += nbytes
        if self.built > MAX_BUILT_BYTES:
            raise TemplateLimitExceeded(
                f"the template built more than {MAX_BUILT_BYTES // (1024 * 1024)} MiB of data"
            )


BUDGET: ContextVar[Budget | None] = ContextVar("template_budget", default=None)


def current_budget() -> Budget:
    # Outside a render (a hook called while compiling, say) the size limits still hold.
    return BUDGET.get() or Budget(RENDER_SECONDS)


def over_limit(what: str, limit: int, unit: str) -> TemplateLimitExceeded:
    return TemplateLimitExceeded(f"{what} over the limit of {limit} {unit}")


def check_text(estimate: int) -> None:
    if estimate > MAX_TEXT:
        raise over_limit("a string", MAX_TEXT, "characters")


def check_length(like: str | bytes | list[Any] | tuple[Any, ...], length: int) -> None:
    if isinstance(like, str | bytes):
        check_text(length)
    elif length > MAX_ITEMS:
        raise over_limit("a collection", MAX_ITEMS, "items")


def admit(value: _T) -> _T:
    """``value``, once built, counted against the limits of the render."""
    if isinstance(value, str | bytes | bytearray):
        if len(value) > MAX_TEXT:
            raise over_limit("a string", MAX_TEXT, "characters")
    elif isinstance(value, list | tuple | dict | set | frozenset):
        if len(value) > MAX_ITEMS:
            raise over_limit("a collection", MAX_ITEMS, "items")
    else:
        return value
    budget = current_budget()
    budget.charge(sys.getsizeof(value))
    budget.tick()
    return value


def weight(value: object, limit: int = MAX_TEXT) -> int:
    """About how many characters ``str(value)`` (or JSON) would take, counting a string
    each time it is referred to; stops counting once past ``limit``."""
    total = 0
    stack: list[object] = [value]
    seen = 0
    while stack:
        item = stack.pop()
        seen += 1
        if isinstance(item, str | bytes | bytearray):
            total += len(item) + 2
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2
        elif isinstance(item, float):
            total += 24
        elif isinstance(item, list | tuple | set | frozenset | KeysView | ValuesView):
            total += 2 + 2 * len(item)
            if total <= limit:
                stack.extend(item)
        elif isinstance(item, dict | ItemsView):
            pairs: Any = item.items() if isinstance(item, dict) else item
            total += 2 + 4 * len(pairs)
            if total <= limit:
                for key, val in pairs:
                    stack += (key, val)
        elif isinstance(item, Namespace):
            stack.append(dict(item._Namespace__attrs))
        else:
            total += 64  # a repr such as <generator object ...>
        if total > limit or seen > _MAX_WEIGHED:
            return limit + 1
    return total


def check_weight(value: object) -> None:
    check_text(weight(value))
