"""RTF (Rich Text Format) files, read by a small tokenizer of our own: one page of headings,
paragraphs and tables.

Why our own reader: the RTF libraries for Python do not keep a document's structure.
striprtf (BSD) strips control words with regular expressions and writes a table as text
with bars between cells, no header attached, so a row no longer says what its values
are; it also drops headings. pyth and rtf2xml are unmaintained, and
converting through LibreOffice would start a whole office suite per upload. RTF is a
simple grammar (groups in braces, control words, text), so one regular expression and a
small state machine read what this project needs, with no dependency.

What is read:

- Paragraphs (``\\par``), line breaks and tabs as spaces.
- Headings: paragraphs with an outline level (``\\outlinelevel0`` to ``8``) or in a style
  of the style sheet named "heading …" or "Title" (or one that has an outline level).
- Tables: cells (``\\cell``) and rows (``\\row``) through the one table model
  (``retrieval/parsers/tables.py``), captioned with the nearest heading above. The
  header is at least the rows marked ``\\trhdr`` (Word's "repeat as header row");
  ``tables.split_header`` finds more under cells merged across (``\\clmrg``) or down
  (``\\clvmrg``), or guesses it from a first row of labels. A table nested in a cell
  joins its cell's text.
- Text as written: ``\\uN`` escapes (skipping the ``\\ucN`` fallback characters that follow),
  surrogate pairs, ``\\'hh`` escapes and raw 8-bit text in the document's code page
  (``\\ansicpgN``) or its font's (``\\fcharsetN``, ``\\cpgN``: Russian, Greek, CJK ...).
- The title from ``{\\info{\\title …}}``, unless it is a placeholder.

Not read: headers, footers, footnotes, comments, field instructions (a field's shown
result is read), hidden text, pictures, embedded objects' data (the object's shown result
is read) and every ``{\\*\\…}`` destination this reader does not know, as RTF prescribes.

Limits, so hostile input fails fast instead of costing the parser's budget: groups nested
more than ``MAX_DEPTH`` deep are refused (Word nests a few dozen); binary data (``\\binN``)
is skipped by its count without being copied, so a count beyond the file costs nothing.
Reading is linear in the file's size: a 5 MB file as Word writes it (tables, pictures)
took 0.5 s; the worst case, a file of nothing but tiny groups or escapes, about 1 s per
MB, so even a 50 MB upload stays well inside the parser's time budget.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable

from retrieval.parsers.errors import ParseError
from retrieval.parsers.table_headers import Hint, grid_blocks
from retrieval.parsers.text import clean_text, single_page
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument

MAX_DEPTH = 1_000
MAX_UC_SKIP = 8  # a fallback of more bytes than a character can take is a broken \ucN
MAX_HEADING_CHARS = 300  # a longer "heading" is a body paragraph in a heading style

# One token at a time; groups: 1 word, 2 its number, 3 hex escape, 4 control symbol,
# 5 brace, 6 text. Unmatched: newlines (not text in RTF) and a stray backslash.
_TOKEN = re.compile(
    r"\\([a-zA-Z]{1,32})(-?\d{1,10})? ?"
    r"|\\'([0-9a-fA-F]{2})"
    r"|\\([^a-zA-Z'])"
    r"|([{}])"
    r"|([^\\{}\r\n]+)"
    r"|[\r\n]+|\\",
    re.S,
)
_SKIP_STOP = re.compile(r"[{}\\]")
_BIN = re.compile(r"\\bin(-?\d{1,10}) ?")
_RTF_START = b"{\\rtf"

# Destinations whose content is not the document's text (``{\*\…}`` ones are skipped
# whatever their name).
_SKIPPED = frozenset(
    {
        "colortbl",
        "pict",
        "objdata",
        "header",
        "headerl",
        "headerr",
        "headerf",
        "footer",
        "footerl",
        "footerr",
        "footerf",
        "footnote",
        "annotation",
        "fldinst",
        "nonshppict",
        "themedata",
        "colorschememapping",
        "datastore",
        "latentstyles",
        "listtable",
        "listoverridetable",
        "revtbl",
        "rsidtbl",
        "filetbl",
        "xmlnstbl",
        "pgdsctbl",
        "generator",
        "userprops",
        "template",
        "docvar",
        "bkmkstart",
        "bkmkend",
        "xe",
        "tc",
        "txe",
        "ftnsep",
        "ftnsepc",
        "ftncn",
        "aftnsep",
        "aftnsepc",
        "aftncn",
        "background",
        "private",
        "pntxta",
        "pntxtb",
        "shpinst",
        "sp",
    }
)
# Control words that end a paragraph, cell or row, or carry a character of their own:
# they are never the fallback of a \uN escape.
_STRUCTURAL = frozenset({"par", "sect", "page", "cell", "row", "nestcell", "nestrow", "u"})
_CHARACTERS = {
    "line": " ",
    "tab": " ",
    "nestcell": " ",
    "nestrow": " ",
    "emdash": "\u2014",
    "endash": "\u2013",
    "emspace": " ",
    "enspace": " ",
    "qmspace": " ",
    "bullet": "\u2022",
    "lquote": "\u2018",
    "rquote": "\u2019",
    "ldblquote": "\u201c",
    "rdblquote": "\u201d",
}
_SYMBOLS = {"~": " ", "_": "-", "{": "{", "}": "}", "\\": "\\", "\t": " "}
# \fcharsetN of a font: the Windows code page of its text (0 and 1 mean the document's).
_CHARSET_CODEPAGES = {
    77: "mac_roman",
    128: "cp932",
    129: "cp949",
    130: "johab",
    134: "gbk",
    136: "cp950",
    161: "cp1253",
    162: "cp1254",
    163: "cp1258",
    177: "cp1255",
    178: "cp1256",
    186: "cp1257",
    204: "cp1251",
    222: "cp874",
    238: "cp1250",
    254: "cp437",
    255: "cp850",
}
_DEFAULT_CODEPAGE = "cp1252"
_BODY, _TITLE, _INFO, _FONTS, _STYLES = "body", "title", "info", "fonts", "styles"
_TEXT_SINKS = frozenset({_BODY, _TITLE})
_ENTRY_SINKS = frozenset({_FONTS, _STYLES})


def parse_rtf(data: bytes, fallback_title: str) -> ParsedDocument:
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(_RTF_START):
        raise ParseError("not an RTF file (it does not start with {\\rtf)")
    reader = _Reader(data.decode("latin-1"))  # one char per byte: \binN counts bytes
    reader.run()
    blocks = reader.blocks
    title = named_title(reader.title) or next(
        (b.text for b in blocks if b.is_heading and b.table is None), fallback_title
    )
    return single_page(title, blocks)


def is_rtf(data: bytes) -> bool:
    """Whether ``data`` is an RTF file (for format detection)."""
    return data[:64].lstrip(b"\xef\xbb\xbf \t\r\n").startswith(_RTF_START)


def _too_deep() -> ParseError:
    return ParseError(
        f"the RTF is nested too deeply (more than {MAX_DEPTH:,} groups inside each other)"
    )


def _codepage(number: int) -> str | None:
    """Python's codec for a Windows code page number, or None when Python has none."""
    name = "utf-8" if number == 65001 else f"cp{number}"
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


class _Group:
    """What a group inherits from its parent and restores when it closes (RTF's scoping)."""

    __slots__ = ("codepage", "hidden", "intbl", "outline", "sink", "style", "uc")

    def __init__(self, sink: str) -> None:
        self.sink = sink
        self.uc = 1
        self.codepage: str | None = None  # the font's; None: the document's
        self.hidden = False
        self.intbl = False
        self.outline: int | None = None
        self.style = 0

    def copy(self) -> _Group:
        group = _Group(self.sink)
        group.uc = self.uc
        group.codepage = self.codepage
        group.hidden = self.hidden
        group.intbl = self.intbl
        group.outline = self.outline
        group.style = self.style
        return group


class _Entry:
    """A font or a style being read from the font table or the style sheet."""

    def __init__(self) -> None:
        self.number: int | None = None
        self.charset: int | None = None
        self.cpg: int | None = None
        self.outline: int | None = None
        self.name: list[str] = []


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.stack = [_Group(_BODY)]
        self.fresh = False  # the last token opened a group: a destination may follow
        self.pending_skip = 0  # \uN fallback characters still to skip
        self.high_surrogate: int | None = None
        self.ansi_codepage = _DEFAULT_CODEPAGE
        self.default_font = 0
        self.fonts: dict[int, str | None] = {}
        self.heading_styles: set[int] = set()
        self.entry = _Entry()
        self.raw = bytearray()  # bytes awaiting their code page (a DBCS char is two)
        self.raw_context: tuple[str, str] = (_BODY, _DEFAULT_CODEPAGE)
        self.paragraph: list[str] = []
        self.title_parts: list[str] = []
        self.cell: list[str] = []
        self.row: list[str] = []
        self.rows: list[list[str]] = []
        # The row definition (\trowd … \cellx): each cell's merge, whether a header row.
        self.cell_hint = Hint.NONE
        self.row_hints: list[Hint] = []
        self.row_header = False
        self.hints: list[list[Hint]] = []
        self.header_rows: list[bool] = []
        self.last_heading = ""
        self.blocks: list[Block] = []
        self.words: dict[str, Callable[[int | None], None]] = {
            "par": self._end_paragraph,
            "sect": self._end_paragraph,
            "page": self._end_paragraph,
            "cell": self._end_cell,
            "row": self._end_row,
            "pard": self._pard,
            "intbl": self._intbl,
            "itap": self._itap,
            "trowd": self._trowd,
            "trhdr": self._trhdr,
            "clmrg": lambda _: self._merged(Hint.ACROSS),
            "clvmrg": lambda _: self._merged(Hint.BELOW),
            "cellx": self._cellx,
            "outlinelevel": self._outlinelevel,
            "s": self._style,
            "f": self._font,
            "fcharset": self._fcharset,
            "cpg": self._cpg,
            "plain": self._plain,
            "deff": self._deff,
            "v": self._hidden,
            "u": self._unicode,
            "uc": self._uc,
            "ansicpg": self._ansicpg,
            "mac": lambda _: self._set_ansi("mac_roman"),
            "pc": lambda _: self._set_ansi("cp437"),
            "pca": lambda _: self._set_ansi("cp850"),
        }

    @property
    def group(self) -> _Group:
        return self.stack[-1]

    @property
    def title(self) -> str:
        return " ".join(clean_text("".join(self.title_parts)).split())

    def run(self) -> None:
        text, pos, end = self.text, 0, len(self.text)
        match = _TOKEN.match
        while pos < end:
            token = match(text, pos)
            assert token is not None  # the last alternatives match any character
            pos = token.end()
            kind = token.lastindex
            if kind == 1 or kind == 2:
                number = token.group(2)
                pos = self._word(token.group(1), int(number) if number else None, pos)
            elif kind == 6:
                self._text(token.group(6))
            elif kind == 3:
                self._hex(int(token.group(3), 16))
            elif kind == 5:
                if token.group(5) == "{":
                    self._open()
                elif self._close():
                    break
            elif kind == 4:
                pos = self._symbol(token.group(4), pos)
        self._finish()

    # Groups

    def _open(self) -> None:
        if len(self.stack) > MAX_DEPTH:  # the root state plus MAX_DEPTH open groups
            raise _too_deep()
        self.stack.append(self.group.copy())
        self.fresh = True
        self.pending_skip = 0

    def _close(self) -> bool:
        """Close a group; True when it was the document's outermost one."""
        closing = self.stack.pop() if len(self.stack) > 1 else self.group
        if closing.sink in _ENTRY_SINKS:
            self._end_entry(closing.sink)
        self.fresh = False
        self.pending_skip = 0
        return len(self.stack) == 1

    def _skip_group(self, pos: int) -> int:
        """Jump past the end of the group just opened, reading only braces, escapes and
        binary counts (a picture's megabytes of hex are scanned, not tokenized)."""
        text, depth = self.text, 1
        search = _SKIP_STOP.search
        while True:
            stop = search(text, pos)
            if stop is None:
                return len(text)
            at = stop.start()
            char = text[at]
            if char == "\\":
                binary = _BIN.match(text, at)
                pos = binary.end() + max(0, int(binary.group(1))) if binary else at + 2
                continue
            pos = at + 1
            if char == "{":
                depth += 1
                if len(self.stack) - 1 + depth - 1 > MAX_DEPTH:
                    raise _too_deep()
            else:
                depth -= 1
                if depth == 0:
                    self.stack.pop()
                    self.fresh = False
                    return pos

    # Tokens

    def _word(self, name: str, number: int | None, pos: int) -> int:
        if name == "bin":
            return min(len(self.text), pos + max(0, number or 0))
        if self.pending_skip and name not in _STRUCTURAL:
            self.pending_skip -= 1  # a control word standing in for the \uN character
            return pos
        self.pending_skip = 0
        if self.fresh:
            self.fresh = False
            if name in _SKIPPED:
                return self._skip_group(pos)
            self._destination(name)
        handler = self.words.get(name)
        if handler is not None:
            handler(number)
        elif name in _CHARACTERS:
            self._put_text(_CHARACTERS[name])
        return pos

    def _destination(self, name: str) -> None:
        group = self.group
        if name == "fonttbl":
            group.sink = _FONTS
        elif name == "stylesheet":
            group.sink = _STYLES
        elif name == "info":
            group.sink = _INFO
        elif name == "title" and group.sink == _INFO:
            group.sink = _TITLE

    def _symbol(self, symbol: str, pos: int) -> int:
        if symbol == "*" and self.fresh:
            return self._skip_group(pos)  # a destination this reader need not know
        self.fresh = False
        if self.pending_skip:
            self.pending_skip -= 1
            return pos
        if symbol in "\r\n":
            self._end_paragraph(None)  # "\" before a newline is \par
        elif symbol in _SYMBOLS:
            self._put_text(_SYMBOLS[symbol])
        return pos

    def _text(self, run: str) -> None:
        self.fresh = False
        if self.pending_skip:
            skipped = min(self.pending_skip, len(run))
            self.pending_skip -= skipped
            run = run[skipped:]
        if not run:
            return
        sink = self.group.sink
        if sink in _ENTRY_SINKS:
            self._entry_text(run, sink)
        else:
            self._put_bytes(run.encode("latin-1"))

    def _hex(self, byte: int) -> None:
        self.fresh = False
        if self.pending_skip:
            self.pending_skip -= 1
        elif self.group.sink not in _ENTRY_SINKS:
            self._put_bytes(bytes((byte,)))

    # Text

    def _put_bytes(self, data: bytes) -> None:
        group = self.group
        if group.hidden or group.sink not in _TEXT_SINKS:
            return
        context = (group.sink, group.codepage or self.ansi_codepage)
        if self.raw and context != self.raw_context:
            self._flush()
        self.raw_context = context
        self.raw += data

    def _put_text(self, text: str) -> None:
        group = self.group
        if group.hidden or group.sink not in _TEXT_SINKS:
            return
        self._flush()
        (self.paragraph if group.sink == _BODY else self.title_parts).append(text)

    def _flush(self) -> None:
        if not self.raw:
            return
        sink, codepage = self.raw_context
        text = self.raw.decode(codepage, errors="replace")
        (self.paragraph if sink == _BODY else self.title_parts).append(text)
        self.raw.clear()

    def _take_paragraph(self) -> str:
        self._flush()
        text = " ".join(clean_text("".join(self.paragraph)).split())
        self.paragraph.clear()
        return text

    # Paragraphs and tables

    def _end_paragraph(self, _: int | None) -> None:
        if self.group.sink != _BODY:
            return
        text = self._take_paragraph()
        if self.group.intbl:
            self.cell.append(text)
            return
        self._end_table()
        if text:
            heading = self._is_heading() and len(text) <= MAX_HEADING_CHARS
            self.blocks.append(Block(text, is_heading=heading))
            if heading:
                self.last_heading = text

    def _is_heading(self) -> bool:
        group = self.group
        return group.outline is not None or group.style in self.heading_styles

    def _end_cell(self, _: int | None) -> None:
        if self.group.sink != _BODY:
            return
        self.cell.append(self._take_paragraph())
        self.row.append(" ".join(part for part in self.cell if part))
        self.cell = []

    def _end_row(self, _: int | None) -> None:
        if self.group.sink != _BODY:
            return
        if self._take_paragraph() or any(self.cell):  # text after the last \cell
            self._end_cell(None)
        self._keep_row()
        self.cell = []

    def _keep_row(self) -> None:
        if self.row:
            self.rows.append(self.row)
            self.hints.append(list(self.row_hints))
            self.header_rows.append(self.row_header)
        self.row = []

    def _end_table(self) -> None:
        self._keep_row()
        rows, hints, header = self.rows, self.hints, self.header_rows
        self.rows, self.hints, self.header_rows, self.cell = [], [], [], []
        if rows:
            marked = next((r for r, flag in enumerate(header) if not flag), len(rows))
            caption = self.last_heading
            self.blocks.extend(grid_blocks(rows, hints, caption=caption, marked=marked))

    def _trowd(self, _: int | None) -> None:
        if self.group.sink == _BODY:
            self.cell_hint, self.row_hints, self.row_header = Hint.NONE, [], False

    def _trhdr(self, _: int | None) -> None:
        self.row_header = self.group.sink == _BODY

    def _merged(self, hint: Hint) -> None:
        if self.group.sink == _BODY:
            self.cell_hint |= hint

    def _cellx(self, _: int | None) -> None:
        if self.group.sink == _BODY:
            self.row_hints.append(self.cell_hint)
            self.cell_hint = Hint.NONE

    def _finish(self) -> None:
        self._flush()
        self.high_surrogate = None
        text = self._take_paragraph()
        self._end_table()
        if text:
            self.blocks.append(Block(text))

    # Properties

    def _pard(self, _: int | None) -> None:
        group = self.group
        group.intbl, group.outline, group.style = False, None, 0

    def _intbl(self, _: int | None) -> None:
        self.group.intbl = True

    def _itap(self, number: int | None) -> None:
        self.group.intbl = bool(number)

    def _outlinelevel(self, number: int | None) -> None:
        level = number if number is not None and 0 <= number <= 8 else None  # 9: body text
        if self.group.sink == _STYLES:
            self.entry.outline = level
        else:
            self.group.outline = level

    def _style(self, number: int | None) -> None:
        if self.group.sink == _STYLES:
            self.entry.number = number
        else:
            self.group.style = number or 0

    def _font(self, number: int | None) -> None:
        if self.group.sink == _FONTS:
            self.entry.number = number
        elif self.group.sink != _STYLES:
            self.group.codepage = self.fonts.get(number or 0)

    def _fcharset(self, number: int | None) -> None:
        if self.group.sink == _FONTS:
            self.entry.charset = number

    def _cpg(self, number: int | None) -> None:
        if self.group.sink == _FONTS:
            self.entry.cpg = number

    def _plain(self, _: int | None) -> None:
        self.group.hidden = False
        self.group.codepage = self.fonts.get(self.default_font)

    def _deff(self, number: int | None) -> None:
        self.default_font = number or 0

    def _hidden(self, number: int | None) -> None:
        self.group.hidden = number != 0

    def _uc(self, number: int | None) -> None:
        self.group.uc = min(max(number or 0, 0), MAX_UC_SKIP)

    def _ansicpg(self, number: int | None) -> None:
        self._set_ansi(_codepage(number or 0) or _DEFAULT_CODEPAGE)

    def _set_ansi(self, codepage: str) -> None:
        self._flush()
        self.ansi_codepage = codepage

    def _unicode(self, number: int | None) -> None:
        if number is None or not -32768 <= number <= 65535:
            return
        code = number + 65536 if number < 0 else number
        self.pending_skip = 0
        if 0xD800 <= code < 0xDC00:
            self.high_surrogate = code
        elif 0xDC00 <= code < 0xE000:
            if self.high_surrogate is not None:
                pair = 0x10000 + ((self.high_surrogate - 0xD800) << 10) + (code - 0xDC00)
                self._put_text(chr(pair))
            self.high_surrogate = None
        else:
            self.high_surrogate = None
            self._put_text(chr(code))
        self.pending_skip = self.group.uc

    # Font table and style sheet

    def _entry_text(self, run: str, sink: str) -> None:
        while ";" in run:
            name, _, run = run.partition(";")
            self.entry.name.append(name)
            self._end_entry(sink)
        self.entry.name.append(run)

    def _end_entry(self, sink: str) -> None:
        entry, self.entry = self.entry, _Entry()
        if entry.number is None:
            return
        if sink == _FONTS:
            self.fonts[entry.number] = self._font_codepage(entry)
            return
        name = " ".join("".join(entry.name).split()).lower()
        if entry.outline is not None or name.startswith(("heading", "title")):
            self.heading_styles.add(entry.number)

    @staticmethod
    def _font_codepage(entry: _Entry) -> str | None:
        if entry.cpg is not None and (codepage := _codepage(entry.cpg)):
            return codepage
        return _CHARSET_CODEPAGES.get(entry.charset or 0)
