"""Jinja2 chat templates from GGUF metadata, rendered within fixed bounds of time and memory.

A GGUF file's ``tokenizer.chat_template`` is code from whoever made the file. Jinja2's
sandbox stops it reaching Python internals but not exhausting the server: nested loops
that never finish, ``'a' * 300000000``, a macro that calls itself. The environment here
renders templates exactly as llama-cpp-python's ``Jinja2ChatFormatter`` (and Transformers)
do, with these bounds checked as the template runs:

* ``range()`` yields at most :data:`MAX_RANGE` items, and all loops of one render together
  run at most :data:`MAX_ITERATIONS` times;
* no string built by the template (by ``+``, ``*``, ``%``, ``~``, ``str.format``, a filter
  or a string method) is longer than :data:`MAX_TEXT` characters, and no list longer than
  :data:`MAX_ITEMS`; sizes are estimated *before* the work where the work could amplify its
  inputs (``'x' * n``, ``'{0}{0}'.format(s)``, ``center(n)``, ``join`` of a list that holds
  one huge string many times), so nothing large is allocated just to be refused;
* everything one render builds comes to at most :data:`MAX_BUILT_BYTES`;
* the output is streamed and stops past :data:`MAX_OUTPUT` characters;
* calls (macros, ``caller()``, recursive loops) nest at most :data:`MAX_CALL_DEPTH` deep;
* a render takes at most :data:`RENDER_SECONDS`, checked at every loop iteration, call,
  operator, filter and piece of output (a single step is bounded by the size limits).

Constant folding of filters at compile time is switched off (a filter call in a template
is work the template asks for, bounded like the rest), so compiling is linear in the
template's length, which is at most :data:`MAX_TEMPLATE_CHARS`.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
import types
from collections.abc import (
    Callable,
    Generator,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    Sequence,
    ValuesView,
)
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.parser import Parser
from jinja2.runtime import Context, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import Namespace, pass_context
from markupsafe import EscapeFormatter, Markup

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
    """A template went past one of this module's bounds while rendering."""


class TemplateRejected(Exception):
    """A template that is not compiled at all: too long, or not valid Jinja2."""


class _Budget:
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


_BUDGET: ContextVar[_Budget | None] = ContextVar("template_budget", default=None)


def _budget() -> _Budget:
    # Outside a render (a hook called while compiling, say) the size limits still hold.
    return _BUDGET.get() or _Budget(RENDER_SECONDS)


def _over(what: str, limit: int, unit: str) -> TemplateLimitExceeded:
    return TemplateLimitExceeded(f"{what} over the limit of {limit} {unit}")


def _check_text(estimate: int) -> None:
    if estimate > MAX_TEXT:
        raise _over("a string", MAX_TEXT, "characters")


def _check_length(like: str | bytes | list[Any] | tuple[Any, ...], length: int) -> None:
    if isinstance(like, str | bytes):
        _check_text(length)
    elif length > MAX_ITEMS:
        raise _over("a collection", MAX_ITEMS, "items")


def _admit(value: _T) -> _T:
    """``value``, once built, counted against the limits of the render."""
    if isinstance(value, str | bytes | bytearray):
        if len(value) > MAX_TEXT:
            raise _over("a string", MAX_TEXT, "characters")
    elif isinstance(value, list | tuple | dict | set | frozenset):
        if len(value) > MAX_ITEMS:
            raise _over("a collection", MAX_ITEMS, "items")
    else:
        return value
    budget = _budget()
    budget.charge(sys.getsizeof(value))
    budget.tick()
    return value


def _weight(value: object, limit: int = MAX_TEXT) -> int:
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


def _check_weight(value: object) -> None:
    _check_text(_weight(value))


def _number(text: str | None, star: int) -> int:
    if not text:
        return 0
    if text == "*":
        return star
    return int(text) if len(text) <= 9 else MAX_TEXT + 1


_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.DOTALL)


def _printf_weight(fmt: str, args: object) -> int:
    """An upper bound on the length of ``fmt % args``."""
    star = 0
    if isinstance(args, tuple):
        star = sum(abs(a) for a in args if isinstance(a, int) and a.bit_length() < 32)
    values = _weight(args)
    total = len(fmt) + (0 if isinstance(args, Mapping) else values)
    for match in _PRINTF.finditer(fmt):
        if match.group(3) == "%":
            continue
        total += _number(match.group(1), star) + _number(match.group(2), star)
        if isinstance(args, Mapping):
            total += values  # named conversions may each repeat any value
        if total > MAX_TEXT:
            break
    return total


def _spec_width(spec: str) -> int:
    return sum(_number(digits, 0) for digits in re.findall(r"\d+", spec))


# Work whose result can be far larger than its inputs, estimated before it is done.
def _lines(s: object) -> int:
    return s.count("\n") + 1 if isinstance(s, str) else _weight(s)


def _occurrences(s: str, old: str, count: int | None) -> int:
    found = s.count(old) if old else len(s) + 1
    return found if count is None or count < 0 else min(found, count)


def _estimate_replace(s: object, old: object, new: object, count: object = None) -> int:
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
        limit = count if isinstance(count, int) else None
        return len(s) + _occurrences(s, old, limit) * len(new)
    return _weight(s) * (1 + _weight(new))


def _estimate_join(items: object, sep: object) -> int:
    if isinstance(items, str):
        return len(items) * (1 + _weight(sep))
    count = len(items) if isinstance(items, list | tuple) else 1
    return _weight(items) + count * _weight(sep)


def _estimate_width(s: object, width: object = 0, *_: object) -> int:
    return _weight(s) + (width if isinstance(width, int) else _weight(width))


def _estimate_indent(s: object, width: object = 4, *_: object, **__: object) -> int:
    each = width if isinstance(width, int) else _weight(width)
    return _weight(s) + _lines(s) * max(each, 0)


def _estimate_wordwrap(s: object, *args: object, **kwargs: object) -> int:
    wrapstring = kwargs.get("wrapstring", args[2] if len(args) > 2 else None)
    return _weight(s) * (1 + (_weight(wrapstring) if wrapstring else 1))


def _estimate_format(value: object, *args: object, **kwargs: object) -> int:
    return _printf_weight(str(value) if isinstance(value, str) else "%s", kwargs or args)


def _estimate_sum(items: object, *args: object, **kwargs: object) -> int:
    start = kwargs.get("start", args[1] if len(args) > 1 else 0)
    values = items if isinstance(items, list) else []
    if all(isinstance(v, int | float) for v in values) and isinstance(start, int | float):
        return 0
    return _weight(values) * max(len(values), 1) + _weight(start)


def _estimate_slice(value: object, slices: object = 1, *_: object, **__: object) -> int:
    return slices if isinstance(slices, int) else 0


def _estimate_expandtabs(s: str | bytes, tabsize: int = 8) -> int:
    tabs = s.count("\t") if isinstance(s, str) else s.count(b"\t")
    return len(s) + tabs * max(tabsize, 0)


def _estimate_translate(s: str | bytes, table: object, *_: object) -> int:
    widest = max((_weight(v) for v in table.values()), default=1) if isinstance(table, dict) else 1
    return len(s) * widest


def _estimate_serialised(value: object, *_: object, **__: object) -> int:
    return _weight(value)


_FILTER_ESTIMATES: dict[str, Callable[..., int]] = {
    "center": _estimate_width,
    "indent": _estimate_indent,
    "format": _estimate_format,
    "replace": _estimate_replace,
    "wordwrap": _estimate_wordwrap,
    "join": lambda items, d="", *_, **__: _estimate_join(items, d),
    "sum": _estimate_sum,
    "slice": _estimate_slice,
    **dict.fromkeys(
        ("tojson", "string", "pprint", "escape", "e", "forceescape", "urlencode", "xmlattr"),
        _estimate_serialised,
    ),
}
# Filters that take an iterable and must see all of it to estimate: given it as a list.
_MATERIALISE = frozenset({"join", "sum"})

_METHOD_ESTIMATES: dict[str, Callable[..., int]] = {
    "ljust": _estimate_width,
    "rjust": _estimate_width,
    "center": _estimate_width,
    "zfill": _estimate_width,
    "expandtabs": _estimate_expandtabs,
    "replace": _estimate_replace,
    "join": lambda sep, items: _estimate_join(items, sep),
    "translate": _estimate_translate,
}


class _BoundedFormatter(SandboxedFormatter):
    """``str.format`` in the sandbox, adding up the fields' sizes as it goes."""

    _total = 0

    def vformat(self, format_string: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        self._total = len(format_string)
        return super().vformat(format_string, args, kwargs)

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion is not None:
            _check_weight(value)
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> Any:
        self._total += _weight(value) + _spec_width(format_spec)
        _check_text(self._total)
        return _admit(super().format_field(value, format_spec))


class _BoundedEscapeFormatter(_BoundedFormatter, EscapeFormatter):
    pass


class _BoundedCodeGenerator(CodeGenerator):
    """Routes every loop's iterable and every ``~`` through the environment's checks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loop_iterables: set[int] = set()

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        self._loop_iterables.add(id(node.iter))
        super().visit_For(node, frame)

    def visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        if id(node) not in self._loop_iterables:
            return super().visit(node, *args, **kwargs)
        self.write("environment.bounded_iter(")
        super().visit(node, *args, **kwargs)
        self.write(")")
        return None

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        # As CodeGenerator.visit_Concat, with the parts weighed before they are joined.
        if frame.eval_ctx.volatile:
            func_name = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            func_name = "markup_join"
        else:
            func_name = "str_join"
        self.write(f"environment.bounded_join({func_name}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _GenerationTag(jinja2.ext.Extension):
    """Pass-through for Hugging Face's ``{% generation %}`` tag, as llama-cpp-python has."""

    tags = {"generation"}  # noqa: RUF012 - the Extension API's own class attribute

    def parse(self, parser: Parser) -> list[nodes.Node]:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


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
        raise _over("a range()", MAX_RANGE, "items")
    return numbers


def _strftime_now(fmt: str) -> str:
    if len(fmt) > 1000:
        raise _over("a strftime_now() format", 1000, "characters")
    return datetime.now().strftime(fmt)


def _raise_exception(message: str) -> None:
    raise ValueError(message)


_PassKind = Literal["context", "eval_context", "environment"] | None


def _pass_kind(func: Callable[..., Any]) -> _PassKind:
    kind = getattr(getattr(func, "jinja_pass_arg", None), "name", None)
    return kind if kind in ("context", "eval_context", "environment") else None


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Llama-cpp-python's chat-template environment, with every bound checked."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"+", "*", "%", "**"})

    def __init__(self) -> None:
        super().__init__(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationTag, jinja2.ext.loopcontrols],
            finalize=self._finalize,
        )
        self.filters["tojson"] = _tojson
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}
        self.globals["range"] = _range
        lipsum = cast(Callable[..., Any], self.globals["lipsum"])

        def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:
            if n * max > MAX_RANGE:
                raise _over("lipsum()", MAX_RANGE, "words")
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
        budget = _budget()
        budget.tick()
        if (
            isinstance(__obj, types.BuiltinMethodType)
            and isinstance(__obj.__self__, str | bytes)
            and __obj.__name__ in _METHOD_ESTIMATES
        ):
            if __obj.__name__ == "join" and args and not isinstance(args[0], list | tuple | str):
                args = (list(args[0]), *args[1:])
            try:
                estimate = _METHOD_ESTIMATES[__obj.__name__](__obj.__self__, *args, **kwargs)
            except TypeError:
                estimate = 0  # wrong arguments: the call itself will say so
            _check_text(estimate)
        budget.depth += 1
        try:
            if budget.depth > MAX_CALL_DEPTH:
                raise _over("macro calls nested", MAX_CALL_DEPTH, "deep")
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            budget.depth -= 1
        return result if isinstance(__obj, Macro) else _admit(result)  # macros: in concat

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        _budget().tick()
        if operator == "*":
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise _over("an integer", MAX_INT_BITS, "bits")
            else:
                seq, times = (right, left) if isinstance(left, int) else (left, right)
                if isinstance(seq, str | bytes | list | tuple) and isinstance(times, int):
                    _check_length(seq, len(seq) * times)
        elif operator == "**":
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and abs(left) > 1
                and (right > MAX_INT_BITS or left.bit_length() * right > MAX_INT_BITS)
            ):
                raise _over("an integer", MAX_INT_BITS, "bits")
        elif operator == "+":
            if isinstance(left, str | bytes | list | tuple) and type(left) is type(right):
                _check_length(left, len(left) + len(right))
        elif operator == "%" and isinstance(left, str):
            _check_text(_printf_weight(left, right))
        return _admit(self.binop_table[operator](left, right))

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
        _check_text(sum(len(p) if isinstance(p, str) else _weight(p) for p in pieces))
        return _admit("".join(pieces))

    def bounded_join(self, join: Callable[[Iterable[Any]], str], parts: tuple[Any, ...]) -> str:
        """``a ~ b ~ c``: the parts weighed before they are converted and joined."""
        _check_weight(parts)
        return _admit(join(parts))

    def bounded_iter(self, iterable: Iterable[_T]) -> Iterator[_T]:
        """Every ``{% for %}`` loop's iterable (a recursive loop's first level)."""
        budget = _budget()
        for item in iterable:
            budget.iterations += 1
            if budget.iterations > MAX_ITERATIONS:
                raise _over("loops", MAX_ITERATIONS, "iterations in all")
            budget.tick()
            yield item

    @staticmethod
    def _finalize(value: Any) -> Any:
        """Every ``{{ value }}`` on its way to ``str``: a list holding one long string many
        times is refused before it is converted."""
        if not isinstance(value, str):
            _check_weight(value)
        return value

    def _bounded_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` with its result checked and, where it could amplify its input, its
        result's size estimated first. Marked ``pass_context`` so that it is never folded
        into a constant at compile time."""
        kind = _pass_kind(func)
        estimate = _FILTER_ESTIMATES.get(name)
        materialise = name in _MATERIALISE

        def bounded(context: Context, value: Any = None, *args: Any, **kwargs: Any) -> Any:
            _budget().tick()
            if materialise and not isinstance(value, list | tuple | str):
                value = list(value) if isinstance(value, Iterable) else value
            if estimate is not None:
                try:
                    size = estimate(value, *args, **kwargs)
                except TypeError:
                    size = 0  # wrong arguments: the filter itself will say so
                _check_text(size)
            if kind == "context":
                result = func(context, value, *args, **kwargs)
            elif kind == "eval_context":
                result = func(context.eval_ctx, value, *args, **kwargs)
            elif kind == "environment":
                result = func(context.environment, value, *args, **kwargs)
            else:
                result = func(value, *args, **kwargs)
            return _admit(result)

        bounded.__name__ = getattr(func, "__name__", name)
        bounded.__doc__ = func.__doc__
        return pass_context(bounded)


_environment: BoundedEnvironment | None = None


def bounded_environment() -> BoundedEnvironment:
    global _environment
    if _environment is None:
        _environment = BoundedEnvironment()
    return _environment


class BoundedChatTemplate:
    """A chat template compiled once, rendered (thread-safely) as llama-cpp-python's
    ``Jinja2ChatFormatter`` renders it, within this module's bounds."""

    def __init__(self, source: str, *, bos_token: str, eos_token: str) -> None:
        """Raises :class:`TemplateRejected` for a template too long or not valid Jinja2."""
        if len(source) > MAX_TEMPLATE_CHARS:
            raise TemplateRejected(
                f"the chat template is {len(source)} characters long; "
                f"at most {MAX_TEMPLATE_CHARS} are accepted"
            )
        token = _BUDGET.set(_Budget(RENDER_SECONDS))
        try:
            self._template = bounded_environment().from_string(source)
        except Exception as exc:  # TemplateSyntaxError; RecursionError on deep nesting
            raise TemplateRejected(f"the chat template does not compile: {exc}") from exc
        finally:
            _BUDGET.reset(token)
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
        token = _BUDGET.set(budget := _Budget(seconds))
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
                        raise _over("the prompt", MAX_OUTPUT, "characters")
                    budget.tick()
                    out.append(piece)
                return "".join(out)
        finally:
            _BUDGET.reset(token)


__all__ = [
    "MAX_BUILT_BYTES",
    "MAX_CALL_DEPTH",
    "MAX_ITEMS",
    "MAX_ITERATIONS",
    "MAX_OUTPUT",
    "MAX_RANGE",
    "MAX_TEMPLATE_CHARS",
    "MAX_TEXT",
    "RENDER_SECONDS",
    "BoundedChatTemplate",
    "BoundedEnvironment",
    "TemplateLimitExceeded",
    "TemplateRejected",
]
