"""The golden tables as OpenDocument (ODT, ODS) and PDF files, written by hand: no ODF
writer or PDF library (reportlab) is installed, and both formats are simple enough to
write directly, as ``tests/documents.py`` does.

ODF: a ZIP whose first member is ``mimetype``, stored; then ``content.xml``, ``meta.xml``
and ``META-INF/manifest.xml``. A header cell that spans has ``number-columns-spanned`` or
``number-rows-spanned`` and the cells under it are ``covered-table-cell``, as LibreOffice
writes them; ODT marks its header rows ``table-header-rows``.

PDF: the table as aligned text, each cell placed at its column's fixed x position with
``Td`` moves (Helvetica, WinAnsi encoding), the header repeated on every page, and the
grid drawn with ruling lines (``re`` and ``m``/``l``/``S``), so a reader that finds
tables by their rules can see it as well as one that goes by alignment.
"""

from __future__ import annotations

import io
import textwrap
import zipfile
from xml.sax.saxutils import escape, quoteattr

from bench.table_formats import Span, Table, header_spans
from tests.documents import pdf_file  # the suite's hand-written PDF: header, objects, xref

_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
    'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" '
    'xmlns:dc="http://purl.org/dc/elements/1.1/" office:version="1.3"'
)
_ODT = "application/vnd.oasis.opendocument.text"
_ODS = "application/vnd.oasis.opendocument.spreadsheet"


def write_odt(table: Table) -> bytes:
    body = (
        f'<text:h text:outline-level="1">{escape(table.title)}</text:h>'
        f"<text:p>{escape(table.intro)}</text:p>"
        f'<text:p text:style-name="Caption">{escape(table.caption)}</text:p>'
        f'<table:table table:name="Table1">{_columns(table)}'
        f"<table:table-header-rows>{_header_rows(table)}</table:table-header-rows>"
        f"{_body_rows(table)}</table:table>"
    )
    return _package(_ODT, f"<office:text>{body}</office:text>", table.title)


def write_ods(table: Table) -> bytes:
    """One sheet: the title in A1, a blank row, the header and the rows."""
    title = f"<table:table-row>{_cell(table.title)}</table:table-row>"
    blank = "<table:table-row><table:table-cell/></table:table-row>"
    sheet = (
        f"<table:table table:name={quoteattr(table.title[:31])}>{_columns(table)}"
        f"{title}{blank}{_header_rows(table)}{_body_rows(table)}</table:table>"
    )
    return _package(_ODS, f"<office:spreadsheet>{sheet}</office:spreadsheet>", table.title)


def _columns(table: Table) -> str:
    return f'<table:table-column table:number-columns-repeated="{table.width}"/>'


def _cell(text: str, attrs: str = "") -> str:
    return (
        f'<table:table-cell office:value-type="string"{attrs}>'
        f"<text:p>{escape(text)}</text:p></table:table-cell>"
    )


def _header_rows(table: Table) -> str:
    spans = {(s.row, s.column): s for s in header_spans(table.header)}
    rows = []
    for r in range(len(table.header)):
        cells = []
        for c in range(table.width):
            span = spans.get((r, c))
            if span is None:  # inside a merged cell
                cells.append("<table:covered-table-cell/>")
                continue
            attrs = f' table:number-columns-spanned="{span.columns}"' if span.columns > 1 else ""
            attrs += f' table:number-rows-spanned="{span.rows}"' if span.rows > 1 else ""
            cells.append(_cell(span.text, attrs))
        rows.append(f"<table:table-row>{''.join(cells)}</table:table-row>")
    return "".join(rows)


def _body_rows(table: Table) -> str:
    return "".join(
        f"<table:table-row>{''.join(_cell(value) for value in row)}</table:table-row>"
        for row in table.rows
    )


def _package(mimetype: str, body: str, title: str) -> bytes:
    head = '<?xml version="1.0" encoding="UTF-8"?>\n'
    content = (
        f"{head}<office:document-content {_NS}><office:body>{body}</office:body>"
        "</office:document-content>"
    )
    meta = (
        f"{head}<office:document-meta {_NS}><office:meta><meta:generator>ragdesk bench"
        f"</meta:generator><dc:title>{escape(title)}</dc:title></office:meta>"
        "</office:document-meta>"
    )
    entries = [("/", mimetype), ("content.xml", "text/xml"), ("meta.xml", "text/xml")]
    manifest = (
        f'{head}<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:'
        'manifest:1.0" manifest:version="1.3">'
        + "".join(
            f'<manifest:file-entry manifest:full-path="{path}" manifest:media-type="{kind}"/>'
            for path, kind in entries
        )
        + "</manifest:manifest>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", mimetype, compress_type=zipfile.ZIP_STORED)
        archive.writestr("content.xml", content)
        archive.writestr("meta.xml", meta)
        archive.writestr("META-INF/manifest.xml", manifest)
    return out.getvalue()


PAGE_W, PAGE_H, MARGIN = 595, 842, 48
ROW_H, PAD = 15.0, 4.0


def _char_width(ch: str) -> float:
    """Helvetica's advance widths, roughly, in ems (enough to keep columns apart)."""
    if ch in " .,:;'|!ijlIft()[]-/r":
        return 0.3
    if ch in "mwMW%@":
        return 0.85
    return 0.68 if ch.isupper() else 0.56


def _text_width(text: str, size: float, bold: bool = False) -> float:
    return sum(_char_width(ch) for ch in text) * size * (1.08 if bold else 1.0)


def _layout(table: Table) -> tuple[float, list[float]]:
    """The font size and column widths that fit the page: 9 pt, smaller when it must."""
    size = 9.0
    while True:
        widths = [
            max(
                [_text_width(row[c], size) for row in table.rows]
                + [
                    _text_width(s.text, size, True)
                    for s in header_spans(table.header)
                    if s.column == c and s.columns == 1
                ]
            )
            + 2 * PAD
            for c in range(table.width)
        ]
        if sum(widths) <= PAGE_W - 2 * MARGIN or size <= 5:
            return size, widths
        size -= 0.5


def _pdf_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _text_row(
    cells: list[str], x: float, y: float, widths: list[float], font: str, size: float
) -> str:
    """One row of cells in one text object: a ``Td`` to each column's x position."""
    ops = [f"BT /{font} {size:g} Tf {x + PAD:.2f} {y + 4.5:.2f} Td"]
    move = 0.0
    for text, width in zip(cells, widths, strict=True):
        if text:
            if move:
                ops.append(f"{move:.2f} 0 Td")
            ops.append(f"({_pdf_text(text)}) Tj")
            move = 0.0
        move += width
    return " ".join(ops) + " ET"


def _rules(
    spans: list[Span], header_rows: int, body_rows: int, x: float, top: float, widths: list[float]
) -> list[str]:
    """The grid's lines: a frame, then each row's bottom and each column's side, left out
    where a merged header cell covers them."""
    xs = [x]
    for width in widths:
        xs.append(xs[-1] + width)
    count = header_rows + body_rows
    ops = ["0.5 w", f"{x:.2f} {top - count * ROW_H:.2f} {xs[-1] - x:.2f} {count * ROW_H:.2f} re S"]
    for r in range(count):
        y_top, y_bottom = top - r * ROW_H, top - (r + 1) * ROW_H
        for c in range(len(widths)):
            inside = [
                s
                for s in spans
                if s.row <= r < s.row + s.rows and s.column <= c < s.column + s.columns
            ]
            span = inside[0] if inside else None
            if r < count - 1 and (span is None or r == span.row + span.rows - 1):
                ops.append(f"{xs[c]:.2f} {y_bottom:.2f} m {xs[c + 1]:.2f} {y_bottom:.2f} l")
            if c and (span is None or c == span.column):
                ops.append(f"{xs[c]:.2f} {y_top:.2f} m {xs[c]:.2f} {y_bottom:.2f} l")
    ops.append("S")
    return ops


def _pages(table: Table) -> list[str]:
    size, widths = _layout(table)
    spans = header_spans(table.header)
    grid = [[""] * table.width for _ in table.header]
    for span in spans:
        grid[span.row][span.column] = span.text
    pages: list[str] = []
    ops = [f"BT /F2 15 Tf {MARGIN} {PAGE_H - 60} Td ({_pdf_text(table.title)}) Tj ET"]
    y = PAGE_H - 84.0
    for line in textwrap.wrap(table.intro, 95, break_on_hyphens=False):
        ops.append(f"BT /F1 10 Tf {MARGIN} {y:.2f} Td ({_pdf_text(line)}) Tj ET")
        y -= 13
    ops.append(f"BT /F2 10 Tf {MARGIN} {y - 10:.2f} Td ({_pdf_text(table.caption)}) Tj ET")
    top = y - 20
    rows = list(table.rows)
    while rows:
        fit = max(1, int((top - MARGIN) // ROW_H) - len(grid))
        part, rows = rows[:fit], rows[fit:]
        for r, cells in enumerate([*grid, *part]):
            font = "F2" if r < len(grid) else "F1"
            ops.append(_text_row(list(cells), MARGIN, top - (r + 1) * ROW_H, widths, font, size))
        ops += _rules(spans, len(grid), len(part), MARGIN, top, widths)
        pages.append("\n".join(ops))
        ops, top = [], PAGE_H - 60.0
    return pages


def write_pdf(table: Table) -> bytes:
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    fonts = [
        add(b"<< /Type /Font /Subtype /Type1 /BaseFont /%s /Encoding /WinAnsiEncoding >>" % name)
        for name in (b"Helvetica", b"Helvetica-Bold")
    ]
    pages = _pages(table)
    pages_id = len(objects) + 2 * len(pages) + 1
    resources = b"<< /Font << /F1 %d 0 R /F2 %d 0 R >> >>" % (fonts[0], fonts[1])
    kids = []
    for text in pages:
        stream = text.encode("cp1252")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R "
                b"/Resources %s >>" % (pages_id, PAGE_W, PAGE_H, content, resources)
            )
        )
    listed = b" ".join(b"%d 0 R" % kid for kid in kids)
    assert add(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (listed, len(kids))) == pages_id
    info = add(b"<< /Title (%s) >>" % _pdf_text(table.title).encode("cp1252"))
    catalog = add(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id)
    return pdf_file(objects, catalog, info)
