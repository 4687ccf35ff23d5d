"""JSON schema -> GBNF grammar, so structured output is enforced by the sampler in C.

Every grammar is bounded by what it expands to, not by its length: ``"minItems": 100000000``
is 20 characters of schema and would become a gigabyte of grammar text in the converter,
and ``x{100000000}`` in GBNF is copied out that many times by llama.cpp's parser. Both are
measured before any expansion and refused as the request's own fault.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llm.params import InvalidRequest

MAX_SCHEMA_CHARS = 64_000
MAX_GRAMMAR_CHARS = 64_000  # GBNF as a client writes it
MAX_EXPANDED_CHARS = 2_000_000  # what a schema may become as GBNF
MAX_EXPANDED_SYMBOLS = 200_000  # what llama.cpp's parser may make of a grammar's repetitions
MAX_REPETITION = 4096  # copies of one thing: each is a nested rule (llama.cpp recurses on them)

_SCHEMA_BOUNDS = ("minItems", "maxItems", "minLength", "maxLength")
_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")
_HUGE = 10**12
_RULE_OVERHEAD = 64  # separators, quotes and suffixes around each repeated rule name


def grammar_for_schema(schema: dict[str, Any] | None) -> str:
    """A grammar for values matching ``schema``; None or ``{}`` means any JSON object."""
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf  # heavy: on use

    if not schema:
        return str(JSON_GBNF)
    text = json.dumps(schema)
    if len(text) > MAX_SCHEMA_CHARS:
        raise InvalidRequest(f"the JSON schema is longer than {MAX_SCHEMA_CHARS} characters")
    expanded = schema_expansion(schema)
    if _largest_bound(schema) > MAX_REPETITION:
        raise InvalidRequest(
            f"the JSON schema repeats something more than {MAX_REPETITION} times "
            "(minItems, maxItems, minLength, maxLength or a pattern quantifier); it would "
            "expand into a grammar too large to run"
        )
    if expanded > MAX_EXPANDED_CHARS:
        raise InvalidRequest(
            "the JSON schema's repetitions (minItems, maxItems, minLength, maxLength and "
            f"pattern quantifiers) would expand to about {expanded:,} characters of grammar; "
            f"at most {MAX_EXPANDED_CHARS:,}"
        )
    try:
        grammar = str(json_schema_to_gbnf(text))
    except Exception as exc:  # the converter raises bare Exceptions and KeyErrors
        raise InvalidRequest(f"unsupported JSON schema: {exc}") from exc
    if len(grammar) > MAX_EXPANDED_CHARS:  # the estimate above is meant to make this unreachable
        raise InvalidRequest(
            f"the JSON schema expands to more than {MAX_EXPANDED_CHARS:,} characters"
        )
    return grammar


def checked_grammar(grammar: str) -> str:
    """A client's GBNF, refused when its repetitions would expand past the bound."""
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise InvalidRequest(f"the grammar is longer than {MAX_GRAMMAR_CHARS} characters")
    expanded = gbnf_expansion(grammar)
    if expanded > MAX_EXPANDED_SYMBOLS:
        raise InvalidRequest(
            f"the grammar's repetitions would expand to about {expanded:,} symbols; "
            f"at most {MAX_EXPANDED_SYMBOLS:,}"
        )
    return grammar


def schema_expansion(schema: object) -> int:
    """An upper estimate of the GBNF characters the converter writes for ``schema``'s
    repetitions: each bound copies a rule name (at most the path of property names that
    leads to it) or a pattern's literal that many times."""
    total = 0
    stack: list[tuple[object, int]] = [(schema, 0)]  # a loop, not recursion: any depth
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            stack.extend((item, path) for item in node)
        elif isinstance(node, dict):
            width = path + max((len(str(v)) for k, v in node.items() if k == "$ref"), default=0)
            for key, value in node.items():
                if isinstance(value, dict | list):  # also a property named "minItems"
                    stack.append((value, path + len(str(key)) + 1))
                elif key in _SCHEMA_BOUNDS:
                    total += _count(value) * (width + _RULE_OVERHEAD)
                elif key == "pattern" and isinstance(value, str):
                    total += _pattern_count(value) * (width + len(value) + _RULE_OVERHEAD)
    return total


def gbnf_expansion(grammar: str) -> int:
    """An upper estimate of the symbols llama.cpp's parser makes of ``grammar``: its own
    length plus, for each ``{m,n}``, the repeated element copied max(m, n) times (a string
    literal is one symbol a character; a group, class or rule reference is one)."""
    total = len(grammar)
    element = 1  # the size of the element a quantifier would repeat
    i, end = 0, len(grammar)
    while i < end:
        char = grammar[i]
        if char == "#":
            newline = grammar.find("\n", i)
            i = end if newline < 0 else newline + 1
            continue
        if char in '"[':
            close = _closing(grammar, i, '"' if char == '"' else "]")
            element = max(1, close - i - 1) if char == '"' else 1
            i = close + 1
            continue
        if char == "{":
            match = _QUANTIFIER.match(grammar, i)
            if match is None:
                return total + MAX_EXPANDED_SYMBOLS + 1  # llama.cpp would refuse it anyway
            times = _times(match.group(1), match.group(2))
            if times > MAX_REPETITION:
                return total + MAX_EXPANDED_SYMBOLS + 1
            # Each copy is a rule of its own around the element, and a quantifier right
            # after another repeats what the first one expanded to ("x"{400}{400}).
            element = times * (element + 3)
            total += element
            i = match.end()
            continue
        if not char.isspace() and char not in "*+?|":
            element = 1
        i += 1
    return total


def _closing(text: str, start: int, quote: str) -> int:
    """The index of the unescaped ``quote`` that closes what opens at ``start``."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i
        i += 1
    return len(text)


def _count(value: object) -> int:
    """A repetition bound as the converter would use it; anything else it rejects itself."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0  # NaN is not equal to itself
    return int(max(0, min(value, _HUGE)))


def _largest_bound(schema: object) -> int:
    """The largest single repetition ``schema`` asks for (each becomes nested rules)."""
    largest = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, dict | list):
                    stack.append(value)
                elif key in _SCHEMA_BOUNDS:
                    largest = max(largest, _count(value))
                elif key == "pattern" and isinstance(value, str):
                    quantifiers = _QUANTIFIER.findall(value)
                    largest = max([largest, *(_times(lo, hi) for lo, hi in quantifiers)])
    return largest


def _pattern_count(pattern: str) -> int:
    return sum(_times(low, high) for low, high in _QUANTIFIER.findall(pattern))


def _times(low: str, high: str | None) -> int:
    """How many copies ``{low,high}`` makes: ``high``, or ``low`` and a loop when open."""
    least = _number(low)
    return max(least, _number(high) if high else least + 1)


def _number(digits: str) -> int:
    return _HUGE if len(digits) > 12 else int(digits or 0)
