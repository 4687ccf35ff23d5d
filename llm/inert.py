"""Untrusted text made unable to spell the model's control tokens.

llama.cpp parses special tokens in prompt text, so a document containing
``<end_of_turn>`` (Gemma) or ``<|im_start|>`` (ChatML) could end the model's turn or
open a new one. Each such string gets a word joiner (U+2060) after its first character:
it reads the same, but no longer tokenizes to the control token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

WORD_JOINER = "\u2060"

# Shapes of control tokens across vocabularies, for when the model's own list is unknown:
# <|im_start|>, <end_of_turn>, </s>, [INST], [TOOL_CALLS], <｜end▁of▁sentence｜>.
_GENERIC = re.compile(
    r"<(?:/?\|?[A-Za-z_][\w|.-]{0,40})>|\[/?[A-Z][A-Z_]{2,30}\]|<｜[^<>｜]{1,40}｜>|<\|[^<>|]{1,40}\|>"
)


class Neutralizer:
    """Breaks every occurrence of the given control-token strings and of common shapes."""

    def __init__(self, control_tokens: Iterable[str] = ()):
        # Grouped by first character, then by length, so a scan costs one set lookup per
        # length at each candidate position, however large the vocabulary.
        self._lookup: dict[str, list[tuple[int, frozenset[str]]]] = {}
        by_first: dict[str, dict[int, set[str]]] = {}
        for token in control_tokens:
            if len(token) >= 2 and not token.isspace():
                by_first.setdefault(token[0], {}).setdefault(len(token), set()).add(token)
        for first, by_length in by_first.items():
            self._lookup[first] = [
                (length, frozenset(tokens))
                for length, tokens in sorted(by_length.items(), reverse=True)
            ]
        starts = "".join(re.escape(c) for c in self._lookup)
        self._starts = re.compile(f"[{starts}]") if starts else None

    def __call__(self, text: str) -> str:
        text = _GENERIC.sub(lambda m: _break(m.group(0)), text)
        if self._starts is None:
            return text
        pieces: list[str] = []
        last = 0
        for match in self._starts.finditer(text):
            position = match.start()
            if position < last:
                continue
            for length, tokens in self._lookup[text[position]]:
                if text[position : position + length] in tokens:
                    pieces += [text[last:position], _break(text[position : position + length])]
                    last = position + length
                    break
        pieces.append(text[last:])
        return "".join(pieces)


def _break(token: str) -> str:
    return token[0] + WORD_JOINER + token[1:]
