"""The sandboxed environment: llama-cpp-python's chat-template environment with every
bound checked in its hooks (calls, operators, filters, loops, output)."""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

import jinja2
import jinja2.ext
from jinja2.runtime import Context, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import pass_context
from markupsafe import EscapeFormatter, Markup

from llm.template_sandbox.compiler import BoundedCodeGenerator, GenerationTag
from llm.template_sandbox.estimates import (
    FILTER_ESTIMATES,
    MATERIALISE,
    METHOD_ESTIMATES,
    printf_weight,
    spec_width,
)
from llm.template_sandbox.limits import (
    MAX_CALL_DEPTH,
    MAX_INT_BITS,
    MAX_ITERATIONS,
    MAX_RANGE,
    admit,
    check_length,
    check_text,
    check_weight,
    current_budget,
    over_limit,
    weight,
)

_T = TypeVar("_T")


class _BoundedFormatter(SandboxedFormatter):
    """``str.format`` in the sandbox, adding up the fields' sizes as it goes."""

    _total = 0

    def vformat(self, format_string: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        self._total = len(format_string)
        return super().vformat(format_string, args, kwargs)

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion is not None:
            check_weight(value)
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> Any:
        self._total += weight(value) + spec_width(format_spec)
        check_text(self._total)
        return admit(super().format_field(value, format_spec))


class _BoundedEscapeFormatter(_BoundedFormatter, EscapeFormatter):
    pass


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """Transformers' (and llama-cpp-python's) ``tojson``: plain ``json.dumps``."""
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _range(*args: int) -> range:
    numbers = range(*args)
    try:
        length = len(numbers)
    except OverflowError:
        length = MAX_RANGE + 1
    if length > MAX_RANGE:
        raise over_limit("a range()", MAX_RANGE, "items")
    return numbers


_PassKind = Literal["context", "eval_context", "environment"] | None


def _pass_kind(func: Callable[..., Any]) -> _PassKind:
    kind = getattr(getattr(func, "jinja_pass_arg", None), "name", None)
    return kind if kind in ("context", "eval_context", "environment") else None


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Llama-cpp-python's chat-template environment, with every bound checked."""

    code_generator_class = BoundedCodeGenerator
    intercepted_binops = frozenset({"+", "*", "%", "**"})

    def __init__(self) -> None:
        super().__init__(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[GenerationTag, jinja2.ext.loopcontrols],
            finalize=self._finalize,
        )
        self.filters["tojson"] = _tojson
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}
        self.globals["range"] = _range
        lipsum = cast(Callable[..., Any], self.globals["lipsum"])

        def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:
            if n * max > MAX_RANGE:
                raise over_limit("lipsum()", MAX_RANGE, "words")
            return lipsum(n, html, min, max)

        self.globals["lipsum"] = bounded_lipsum

    # -- sandbox hooks -----------------------------------------------------------------------

    def call(
        __self,
        __context: Context,
        __obj: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        budget = current_budget()
        budget.tick()
        if (
            isinstance(__obj, types.BuiltinMethodType)
            and isinstance(__obj.__self__, str | bytes)
            and __obj.__name__ in METHOD_ESTIMATES
        ):
            if __obj.__name__ == "join" and args and not isinstance(args[0], list | tuple | str):
                args = (list(args[0]), *args[1:])
            try:
                estimate = METHOD_ESTIMATES[__obj.__name__](__obj.__self__, *args, **kwargs)
            except TypeError:
                estimate = 0  # wrong arguments: the call itself will say so
            check_text(estimate)
        budget.depth += 1
        try:
            if budget.depth > MAX_CALL_DEPTH:
                raise over_limit("macro calls nested", MAX_CALL_DEPTH, "deep")
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            budget.depth -= 1
        return result if isinstance(__obj, Macro) else admit(result)  # macros: in concat

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        current_budget().tick()
        if operator == "*":
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise over_limit("an integer", MAX_INT_BITS, "bits")
            else:
                seq, times = (right, left) if isinstance(left, int) else (left, right)
                if isinstance(seq, str | bytes | list | tuple) and isinstance(times, int):
                    check_length(seq, len(seq) * times)
        elif operator == "**":
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and abs(left) > 1
                and (right > MAX_INT_BITS or left.bit_length() * right > MAX_INT_BITS)
            ):
                raise over_limit("an integer", MAX_INT_BITS, "bits")
        elif operator == "+":
            if isinstance(left, str | bytes | list | tuple) and type(left) is type(right):
                check_length(left, len(left) + len(right))
        elif operator == "%" and isinstance(left, str):
            check_text(printf_weight(left, right))
        return admit(self.binop_table[operator](left, right))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        f_self: str = value.__self__
        formatter: _BoundedFormatter
        if isinstance(f_self, Markup):
            formatter = _BoundedEscapeFormatter(self, escape=f_self.escape)
        else:
            formatter = _BoundedFormatter(self)
        is_format_map = value.__name__ == "format_map"

        def bounded_format(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs or len(args) != 1:
                    return wrapped(*args, **kwargs)  # the sandbox's own TypeError
                return type(f_self)(formatter.vformat(f_self, (), args[0]))
            return type(f_self)(formatter.vformat(f_self, args, kwargs))

        return bounded_format

    # -- compiled-code hooks ------------------------------------------------------------------

    def concat(self, parts: Iterable[str]) -> str:
        """Joins the buffered output of macros, ``caller()`` and ``{% set %}`` blocks."""
        pieces = list(parts)
        check_text(sum(len(p) if isinstance(p, str) else weight(p) for p in pieces))
        return admit("".join(pieces))

    def bounded_join(self, join: Callable[[Iterable[Any]], str], parts: tuple[Any, ...]) -> str:
        """``a ~ b ~ c``: the parts weighed before they are converted and joined."""
        check_weight(parts)
        return admit(join(parts))

    def bounded_iter(self, iterable: Iterable[_T]) -> Iterator[_T]:
        """Every ``{% for %}`` loop's iterable (a recursive loop's first level)."""
        budget = current_budget()
        for item in iterable:
            budget.iterations += 1
            if budget.iterations > MAX_ITERATIONS:
                raise over_limit("loops", MAX_ITERATIONS, "iterations in all")
            budget.tick()
            yield item

    @staticmethod
    def _finalize(value: Any) -> Any:
        """Every ``{{ value }}`` on its way to ``str``: a list holding one long string many
        times is refused before it is converted."""
        if not isinstance(value, str):
            check_weight(value)
        return value

    def _bounded_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` with its result checked and, where it could amplify its input, its
        result's size estimated first. Marked ``pass_context`` so that it is never folded
        into a constant at compile time."""
        kind = _pass_kind(func)
        estimate = FILTER_ESTIMATES.get(name)
        materialise = name in MATERIALISE

        def bounded(context: Context, value: Any = None, *args: Any, **kwargs: Any) -> Any:
            current_budget().tick()
            if materialise and not isinstance(value, list | tuple | str):
                value = list(value) if isinstance(value, Iterable) else value
            if estimate is not None:
                try:
                    size = estimate(value, *args, **kwargs)
                except TypeError:
                    size = 0  # wrong arguments: the filter itself will say so
                check_text(size)
            if kind == "context":
                result = func(context, value, *args, **kwargs)
            elif kind == "eval_context":
                result = func(context.eval_ctx, value, *args, **kwargs)
            elif kind == "environment":
                result = func(context.environment, value, *args, **kwargs)
            else:
                result = func(value, *args, **kwargs)
            return admit(result)

        bounded.__name__ = getattr(func, "__name__", name)
        bounded.__doc__ = func.__doc__
        return pass_context(bounded)


_environment: BoundedEnvironment | None = None


def bounded_environment() -> BoundedEnvironment:
    global _environment
    if _environment is None:
        _environment = BoundedEnvironment()
    return _environment
