"""HTML to headings, paragraphs and tables with selectolax; scripts, styles and chrome dropped.

selectolax (MIT) binds the Lexbor engine: it parses HTML the way browsers do (a broken
page still gives a tree), fast, without executing or fetching anything.

A data ``<table>`` becomes rows under its header (``retrieval/parsers/tables.py``): the
header is the ``<thead>`` rows, or the leading rows made only of ``<th>``; the caption is
the ``<caption>``, else the nearest heading above. Every cell keeps its column, empty ones
too. A cell spanning columns names each of them in the header but is written once in a
body row; a cell spanning rows is repeated in each (browsers' limits: colspan at most
1,000, rowspan at most 65,534 and never past the table's last row). A table nested in a
cell is flattened into that cell's text.

Layout tables are read as the page they lay out, not as data: a table marked
``role="presentation"``, a single column without a header (the box around an e-mail's
body), or a single row without a header whose cells hold paragraphs or headings (the
columns of a page). Their cells' own headings and paragraphs stay blocks, and a cell of
plain text is a paragraph.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from selectolax.lexbor import LexborHTMLParser as HTMLParser
from selectolax.lexbor import LexborNode as Node

from retrieval.parsers.tables import MAX_COLUMNS, table_blocks
from retrieval.parsers.text import paragraphs, single_page
from retrieval.types import Block, ParsedDocument

_DROPPED = "script, style, noscript, template, svg, iframe, object, nav, header > nav, form"
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = _HEADINGS | {
    "p",
    "li",
    "pre",
    "blockquote",
    "tr",
    "dt",
    "dd",
    "figcaption",
    "caption",
    "address",
}
_CONTAINERS = ", ".join(sorted(_BLOCKS - {"tr", "caption"} | {"table"}))
_LAYOUT_ROLES = {"presentation", "none"}
MAX_COLSPAN = 1_000  # what browsers allow
MAX_ROWSPAN = 65_534
_NUMBER = re.compile(r"\s*(\d{1,9})")  # past 9 digits every limit is reached


def parse_html(text: str, fallback_title: str) -> ParsedDocument:
    tree = HTMLParser(text)
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node else ""
    for node in tree.css(_DROPPED):
        node.decompose()
    root = tree.body or tree.root
    blocks = _structural_blocks(root) if root is not None else []
    if not blocks and root is not None:
        blocks = paragraphs(root.text(separator="\n"))
    if not title:
        title = next((b.text for b in blocks if b.is_heading and not b.table), fallback_title)
    return single_page(title, blocks)


def _structural_blocks(root: Node) -> list[Block]:
    """The blocks in document order. The tree is walked with a stack, not recursion: a
    hostile page can nest elements thousands deep."""
    blocks: list[Block] = []
    heading = ""  # the nearest heading above: a table's caption when it has none
    stack: list[tuple[Node, bool]] = [(child, False) for child in _children(root)]
    while stack:
        node, is_layout_cell = stack.pop()
        if is_layout_cell and node.css_first(_CONTAINERS) is None:
            text = " ".join(_cell_text(node).split())
            blocks.extend([Block(text)] if text else [])
        elif is_layout_cell:
            stack.extend((child, False) for child in _children(node))
        elif node.tag == "table":
            table = _Table(node)
            if table.is_layout:
                stack.extend(table.layout_parts())
            else:
                blocks.extend(table.blocks(heading))
        elif node.tag in _BLOCKS:
            block = _block(node)
            if block is not None:
                blocks.append(block)
                heading = block.text if block.is_heading else heading
        else:
            stack.extend((child, False) for child in _children(node))
    return blocks


def _children(node: Node) -> list[Node]:
    """The element children, last first (the order a stack pops them in reading order)."""
    return list(node.iter())[::-1]


def _block(node: Node) -> Block | None:
    if node.tag == "tr":  # a row outside any table (the parser normally moves these)
        cells = [" ".join(cell.text().split()) for cell in node.css("td, th")]
        text = " | ".join(cell for cell in cells if cell)
    elif node.tag == "pre":
        text = node.text().strip("\n")
    else:
        text = " ".join(node.text(separator=" ").split())
    return Block(text, is_heading=node.tag in _HEADINGS) if text else None


def _cell_text(cell: Node) -> str:
    # Markup inside a cell (a <br>, paragraphs, a nested table) separates words; a cell of
    # bare text is read as is, so "Net<b>work</b>"-style markup does not split a word.
    has_elements = next(cell.iter(), None) is not None
    return cell.text(separator=" ") if has_elements else cell.text()


class _Table:
    """A table's own rows (not those of tables nested in its cells), caption and header."""

    def __init__(self, node: Node):
        self.node = node
        self.caption: Node | None = None
        head: list[Node] = []
        body: list[Node] = []
        for child in node.iter():
            if child.tag == "caption" and self.caption is None:
                self.caption = child
            elif child.tag == "thead":
                head += _rows(child)
            elif child.tag in ("tbody", "tfoot"):
                body += _rows(child)
            elif child.tag == "tr":
                body.append(child)
        self.rows = [_cells(row) for row in head + body]
        self.header_rows = len(head) if head else _leading_th_rows(self.rows)
        self.grid = _grid(self.rows, self.header_rows)

    @property
    def is_layout(self) -> bool:
        if (self.node.attributes.get("role") or "").strip().lower() in _LAYOUT_ROLES:
            return True
        if self.header_rows:
            return False
        if max((len(row) for row in self.grid), default=0) <= 1:
            return True
        return len(self.rows) == 1 and any(
            cell.css_first(_CONTAINERS) is not None for cell in self.rows[0]
        )

    def layout_parts(self) -> Iterator[tuple[Node, bool]]:
        """Caption and cells, last first, for the walk to read as ordinary content."""
        cells = [cell for row in self.rows for cell in row]
        for cell in reversed(cells):
            yield cell, True
        if self.caption is not None:
            yield self.caption, False

    def blocks(self, heading: str) -> list[Block]:
        caption = " ".join(self.caption.text(separator=" ").split()) if self.caption else ""
        return table_blocks(self.grid, caption=caption or heading, header_rows=self.header_rows)


def _rows(section: Node) -> list[Node]:
    return [child for child in section.iter() if child.tag == "tr"]


def _cells(row: Node) -> list[Node]:
    return [child for child in row.iter() if child.tag in ("td", "th")]


def _leading_th_rows(rows: Sequence[Sequence[Node]]) -> int:
    count = 0
    for row in rows:
        if not row or any(cell.tag != "th" for cell in row):
            break
        count += 1
    return count


def _grid(rows: Sequence[Sequence[Node]], header_rows: int) -> list[list[str]]:
    """Each row's text per column, spans laid out as browsers do. A column held by a
    rowspan from above gets that cell's text; a colspan's text is repeated across its
    columns in the header and written once in the body."""
    below: dict[int, tuple[str, int]] = {}  # column -> (text, rows it still covers)
    grid: list[list[str]] = []
    for index, cells in enumerate(rows):
        row: list[str] = []
        for cell in cells:
            _fill_spanned(row, below, until=None)
            if len(row) >= MAX_COLUMNS:
                break
            text = _cell_text(cell)
            colspan = _span(cell, "colspan", MAX_COLSPAN) or 1
            rowspan = _span(cell, "rowspan", MAX_ROWSPAN)
            rowspan = min(rowspan or len(rows), len(rows) - index)  # 0: to the last row
            for offset in range(min(colspan, MAX_COLUMNS - len(row))):
                value = text if offset == 0 or index < header_rows else ""
                if rowspan > 1:
                    below[len(row)] = (value, rowspan - 1)
                row.append(value)
        _fill_spanned(row, below, until=max(below, default=-1) + 1)
        grid.append(row)
    return grid


def _fill_spanned(row: list[str], below: dict[int, tuple[str, int]], until: int | None) -> None:
    """Add the cells that rowspans from above hold at the row's next columns (``until``:
    also past gaps, up to that column, at the row's end)."""
    while len(row) < MAX_COLUMNS and (len(row) in below or (until and len(row) < until)):
        column = len(row)
        if column not in below:
            row.append("")
            continue
        text, left = below.pop(column)
        if left > 1:
            below[column] = (text, left - 1)
        row.append(text)


def _span(cell: Node, name: str, limit: int) -> int:
    """A span attribute as browsers read it: leading digits, capped; 1 when unreadable."""
    match = _NUMBER.match(cell.attributes.get(name) or "")
    return min(int(match.group(1)), limit) if match else 1
