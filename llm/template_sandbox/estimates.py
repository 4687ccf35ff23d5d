"""Upper bounds on the size of a result, worked out before the work: for filters and
string methods whose result can be far larger than their inputs."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from llm.template_sandbox.limits import MAX_TEXT, weight


def _number(text: str | None, star: int) -> int:
    if not text:
        return 0
    if text == "*":
        return star
    return int(text) if len(text) <= 9 else MAX_TEXT + 1


_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.DOTALL)


def printf_weight(fmt: str, args: object) -> int:
    """An upper bound on the length of ``fmt % args``."""
    star = 0
    if isinstance(args, tuple):
        star = sum(abs(a) for a in args if isinstance(a, int) and a.bit_length() < 32)
    values = weight(args)
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


def spec_width(spec: str) -> int:
    return sum(_number(digits, 0) for digits in re.findall(r"\d+", spec))


def _lines(s: object) -> int:
    return s.count("\n") + 1 if isinstance(s, str) else weight(s)


def _occurrences(s: str, old: str, count: int | None) -> int:
    found = s.count(old) if old else len(s) + 1
    return found if count is None or count < 0 else min(found, count)


def _estimate_replace(s: object, old: object, new: object, count: object = None) -> int:
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
        limit = count if isinstance(count, int) else None
        return len(s) + _occurrences(s, old, limit) * len(new)
    return weight(s) * (1 + weight(new))


def _estimate_join(items: object, sep: object) -> int:
    if isinstance(items, str):
        return len(items) * (1 + weight(sep))
    count = len(items) if isinstance(items, list | tuple) else 1
    return weight(items) + count * weight(sep)


def _estimate_width(s: object, width: object = 0, *_: object) -> int:
    return weight(s) + (width if isinstance(width, int) else weight(width))


def _estimate_indent(s: object, width: object = 4, *_: object, **__: object) -> int:
    each = width if isinstance(width, int) else weight(width)
    return weight(s) + _lines(s) * max(each, 0)


def _estimate_wordwrap(s: object, *args: object, **kwargs: object) -> int:
    wrapstring = kwargs.get("wrapstring", args[2] if len(args) > 2 else None)
    return weight(s) * (1 + (weight(wrapstring) if wrapstring else 1))


def _estimate_format(value: object, *args: object, **kwargs: object) -> int:
    return printf_weight(str(value) if isinstance(value, str) else "%s", kwargs or args)


def _estimate_sum(items: object, *args: object, **kwargs: object) -> int:
    start = kwargs.get("start", args[1] if len(args) > 1 else 0)
    values = items if isinstance(items, list) else []
    if all(isinstance(v, int | float) for v in values) and isinstance(start, int | float):
        return 0
    return weight(values) * max(len(values), 1) + weight(start)


def _estimate_slice(value: object, slices: object = 1, *_: object, **__: object) -> int:
    return slices if isinstance(slices, int) else 0


def _estimate_expandtabs(s: str | bytes, tabsize: int = 8) -> int:
    tabs = s.count("\t") if isinstance(s, str) else s.count(b"\t")
    return len(s) + tabs * max(tabsize, 0)


def _estimate_translate(s: str | bytes, table: object, *_: object) -> int:
    widest = max((weight(v) for v in table.values()), default=1) if isinstance(table, dict) else 1
    return len(s) * widest


def _estimate_serialised(value: object, *_: object, **__: object) -> int:
    return weight(value)


FILTER_ESTIMATES: dict[str, Callable[..., int]] = {
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
MATERIALISE = frozenset({"join", "sum"})

METHOD_ESTIMATES: dict[str, Callable[..., int]] = {
    "ljust": _estimate_width,
    "rjust": _estimate_width,
    "center": _estimate_width,
    "zfill": _estimate_width,
    "expandtabs": _estimate_expandtabs,
    "replace": _estimate_replace,
    "join": lambda sep, items: _estimate_join(items, sep),
    "translate": _estimate_translate,
}
