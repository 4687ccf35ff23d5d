"""Names and titles made safe to show: no character that changes how text around it reads.

Bidirectional controls (U+202E turns ``invoice‮txt.exe`` into what reads as
``invoiceexe.txt``), zero-width characters and line/paragraph separators are kept in what
is stored, but every place that shows a name or title shows them as U+FFFD, so a reader
sees that something was there. Only a download's ``filename*`` carries the original.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
# Arabic letter mark; zero-width space/joiners and LRM/RLM; embeddings and overrides;
# word joiner and invisible operators; isolates; line and paragraph separators; BOM.
_INVISIBLE = re.compile(
    "[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\u2028\u2029\ufeff]"
)


def shown(text: str) -> str:
    """``text`` with every direction-changing or invisible character made visible."""
    return _INVISIBLE.sub(REPLACEMENT, text)


# C0 and C1 controls (BEL, ESC, backspace ...), which no display should act on.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_BREAK = re.compile("[\t\n]")


def shown_text(text: str) -> str:
    """:func:`shown`, and every control character but tab and newline made visible too:
    for text people typed (a comment), whose lines are kept."""
    return _CONTROL.sub(REPLACEMENT, shown(text))


def shown_line(text: str) -> str:
    """:func:`shown_text` where a tab or newline is shown too: for one-line names (a path,
    a key) that must not look like two."""
    return _LINE_BREAK.sub(REPLACEMENT, shown_text(text))


def excerpt(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters; else cut at the last word
    break within the limit (mid-word only for a single longer word), with "…"."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    cut = head.rstrip()
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" \n,;:-") + "…"
