"""Names that look like something else: invisible code points, names that show nothing,
and names that look like another name.

Three checks for names people pick from a list (collections), where what is shown is all
a reader has to tell two apart:

- **Default-ignorable code points** (Unicode's ``Default_Ignorable_Code_Point``): renderers
  show nothing for them, so "Alpha-Team" + U+3164 HANGUL FILLER reads as "Alpha-Team".
  Python's ``unicodedata`` has no such property, hence the ranges below.
- **Blank names**: only spaces and characters drawn as empty space without being spaces
  (U+2800 BRAILLE PATTERN BLANK, the Hangul fillers).
- **Confusables**: two names with the same UTS #39 *skeleton* (NFD, default-ignorables
  removed, each character replaced by its prototype from Unicode's confusables.txt, NFD
  again) look alike: Cyrillic "а" and Latin "a", "rn" and "m", "I" and "l".
"""

from __future__ import annotations

import bisect
import unicodedata
from functools import cache

from retrieval.confusables_data import MAPPINGS

# Default_Ignorable_Code_Point, first and last code point of each range, from Unicode
# 15.0.0's DerivedCoreProperties.txt (unchanged in 15.1 and 16.0): Other_DI + Cf +
# Variation_Selector, less White_Space, the interlinear annotation marks, prepended
# concatenation marks and Egyptian format controls. Reserved code points in the ranges
# are included, as Unicode asks, so a future assignment there stays invisible here too.
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # SOFT HYPHEN
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # ARABIC LETTER MARK
    (0x115F, 0x1160),  # HANGUL CHOSEONG FILLER, HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ, AA
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS, VOWEL SEPARATOR
    (0x200B, 0x200F),  # ZERO WIDTH SPACE .. RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # WORD JOINER, invisible operators, bidi isolates, deprecated formats
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTOR-1 .. 16
    (0xFEFF, 0xFEFF),  # ZERO WIDTH NO-BREAK SPACE
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # reserved
    (0x1BCA0, 0x1BCA3),  # SHORTHAND FORMAT controls
    (0x1D173, 0x1D17A),  # MUSICAL SYMBOL BEGIN BEAM .. END PHRASE
    (0xE0000, 0xE0FFF),  # tags, VARIATION SELECTOR-17 .. 256, reserved
)
_STARTS = [first for first, _ in DEFAULT_IGNORABLE]

# Drawn as an empty cell though not White_Space (the fillers are default-ignorable too).
BRAILLE_BLANK = "\u2800"
BLANK_GLYPHS = frozenset(BRAILLE_BLANK + "\u115f\u1160\u3164\uffa0")


def is_default_ignorable(char: str) -> bool:
    code = ord(char)
    at = bisect.bisect_right(_STARTS, code) - 1
    return at >= 0 and code <= DEFAULT_IGNORABLE[at][1]


def first_default_ignorable(text: str) -> str | None:
    return next((c for c in text if is_default_ignorable(c)), None)


def shows_nothing(char: str) -> bool:
    """Whether ``char`` alone is drawn as empty space (or not at all)."""
    return char.isspace() or char in BLANK_GLYPHS or is_default_ignorable(char)


def renders_blank(text: str) -> bool:
    """Whether ``text`` shows no visible character at all (it may still be non-empty)."""
    return all(shows_nothing(c) for c in text)


def describe(char: str) -> str:
    """A code point as a person can look it up: ``U+3164 HANGUL FILLER``."""
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"


@cache
def _prototypes() -> dict[str, str]:
    table = {}
    for line in MAPPINGS.splitlines():
        source, *prototype = line.split()
        table[chr(int(source, 16))] = "".join(chr(int(code, 16)) for code in prototype)
    return table


def skeleton(text: str) -> str:
    """UTS #39 ``skeleton(text)``: equal skeletons mean the two strings look alike."""
    prototypes = _prototypes()
    decomposed = unicodedata.normalize("NFD", text)
    kept = (c for c in decomposed if not is_default_ignorable(c))
    return unicodedata.normalize("NFD", "".join(prototypes.get(c, c) for c in kept))


def lookalike_keys(name: str) -> frozenset[str]:
    """What two names that look alike share at least one of: the skeleton as written and
    the skeleton of the case-folded name (names are unique regardless of case, so
    "аlpha" must meet "Alpha"; the first keeps "I" and "l" alike, which case folding
    would part). Runs of spaces (and braille blanks) count as one, as a reader sees them;
    the skeleton drops the default-ignorables."""
    spaced = " ".join("".join(" " if c == BRAILLE_BLANK else c for c in name).split())
    return frozenset({skeleton(spaced), skeleton(spaced.casefold())})


def look_alike(name: str, other: str) -> bool:
    return not lookalike_keys(name).isdisjoint(lookalike_keys(other))
