"""The golden tables of ``bench/data/tables`` written out as files of every format, the
way people make them: CSV as Excel exports it, Markdown, HTML, a mail, DOCX (python-docx),
XLSX (openpyxl) and PPTX (python-pptx); ODF and PDF are written by hand in
``bench/table_files.py`` (no writer library for them is installed).

A table's header is a grid of rows (``Table.header``) in which a merged cell repeats its
text over every position it covers ("2026" four times over "Q1 … Q4", "Region" over
"Region"); each writer turns those runs back into the format's own merged cells
(:func:`header_spans`), so a parser meets real spans, as in a real file.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path

import docx
import openpyxl
from docx.oxml import OxmlElement
from docx.shared import Pt
from openpyxl.styles import Font
from openpyxl.utils import get_column_letter
from pptx import Presentation
from pptx.util import Inches
from pptx.util import Pt as PptPt

from retrieval.parsers.tables import flatten_header

SLIDE_ROWS = 15  # body rows per slide: a longer table goes on over several slides


@dataclass(frozen=True)
class Table:
    name: str  # the file's stem, and the golden set's ``document``
    title: str
    intro: str
    caption: str
    header: tuple[tuple[str, ...], ...]
    rows: tuple[tuple[str, ...], ...]

    @property
    def width(self) -> int:
        return len(self.header[0])


@dataclass(frozen=True)
class Span:
    """A header cell: where it starts and how many rows and columns it covers."""

    row: int
    column: int
    rows: int
    columns: int
    text: str


def load_tables(path: Path) -> list[Table]:
    def grid(rows: list[list[str]]) -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(row) for row in rows)

    raw = json.loads(path.read_text(encoding="utf-8"))
    return [Table(**{**t, "header": grid(t["header"]), "rows": grid(t["rows"])}) for t in raw]


def header_spans(header: tuple[tuple[str, ...], ...]) -> list[Span]:
    """The header's cells, each run of one text (across, then down) merged into one."""
    taken: set[tuple[int, int]] = set()
    spans = []
    for r, row in enumerate(header):
        for c, text in enumerate(row):
            if (r, c) in taken:
                continue
            columns = 1
            while text and c + columns < len(row) and row[c + columns] == text:
                columns += 1
            rows = 1
            while (
                text
                and r + rows < len(header)
                and header[r + rows][c : c + columns] == ((text,) * columns)
            ):
                rows += 1
            taken |= {(r + i, c + j) for i in range(rows) for j in range(columns)}
            spans.append(Span(r, c, rows, columns, text))
    return spans


def header_grid(table: Table) -> list[list[str]]:
    """The header with each merged cell's text in its first position only (what a
    spreadsheet saved as CSV, or a table drawn without merges, shows)."""
    grid = [[""] * table.width for _ in table.header]
    for span in header_spans(table.header):
        grid[span.row][span.column] = span.text
    return grid


def write_csv(table: Table) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerows(header_grid(table))
    writer.writerows(table.rows)
    return out.getvalue().encode("utf-8")


def write_markdown(table: Table) -> bytes:
    def line(cells: list[str] | tuple[str, ...]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [f"# {table.title}", "", table.intro, "", f"**{table.caption}**", ""]
    lines += [line(flatten_header(table.header)), line(["---"] * table.width)]
    lines += [line(row) for row in table.rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


def html_table(table: Table) -> str:
    head = []
    spans = header_spans(table.header)
    for r in range(len(table.header)):
        cells = "".join(_th(span) for span in spans if span.row == r)
        head.append(f"<tr>{cells}</tr>")
    body = [
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in table.rows
    ]
    return (
        f"<table>\n<caption>{html.escape(table.caption)}</caption>\n"
        f"<thead>\n{chr(10).join(head)}\n</thead>\n<tbody>\n{chr(10).join(body)}\n</tbody>\n"
        "</table>"
    )


def _th(span: Span) -> str:
    attrs = f' colspan="{span.columns}"' if span.columns > 1 else ""
    attrs += f' rowspan="{span.rows}"' if span.rows > 1 else ""
    return f"<th{attrs}>{html.escape(span.text)}</th>"


def write_html(table: Table) -> bytes:
    page = (
        '<!DOCTYPE html>\n<html lang="en-GB">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(table.title)}</title>\n</head>\n<body>\n"
        f"<h1>{html.escape(table.title)}</h1>\n<p>{html.escape(table.intro)}</p>\n"
        f"{html_table(table)}\n</body>\n</html>\n"
    )
    return page.encode("utf-8")


def write_eml(table: Table) -> bytes:
    """A mail from the operations team whose HTML body holds the table (no plain-text
    alternative: the table is the HTML part's to give)."""
    message = EmailMessage()
    message["From"] = "Operations Team <operations@tennerby-vale.example>"
    message["To"] = "All staff <staff@tennerby-vale.example>"
    message["Subject"] = table.title
    message["Date"] = format_datetime(datetime(2027, 2, 15, 9, 30, tzinfo=UTC))
    message["Message-ID"] = f"<{table.name}.2027@tennerby-vale.example>"
    body = (
        f"<html><body><p>Hello everyone,</p><p>{html.escape(table.intro)}</p>\n"
        f"{html_table(table)}\n<p>Thanks,<br>Operations Team</p></body></html>\n"
    )
    message.set_content(body, subtype="html")
    return message.as_bytes()


def write_docx(table: Table) -> bytes:
    document = docx.Document()
    document.core_properties.title = table.title
    document.add_heading(table.title, level=1)
    document.add_paragraph(table.intro)
    document.add_paragraph(table.caption, style="Caption")
    grid = document.add_table(rows=len(table.header) + len(table.rows), cols=table.width)
    grid.style = "Table Grid"
    for span in header_spans(table.header):
        cell = grid.cell(span.row, span.column)
        if span.rows > 1 or span.columns > 1:
            end = grid.cell(span.row + span.rows - 1, span.column + span.columns - 1)
            cell = cell.merge(end)
        cell.text = span.text
        for run in cell.paragraphs[0].runs:
            run.bold = True
    for row in grid.rows[: len(table.header)]:
        # Word's "Repeat as header row at the top of each page"
        row._tr.get_or_add_trPr().append(OxmlElement("w:tblHeader"))
    for row, values in zip(grid.rows[len(table.header) :], table.rows, strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
            cell.paragraphs[0].runs[0].font.size = Pt(9)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def write_xlsx(table: Table) -> bytes:
    """A title in A1, a blank row, then the header (merged cells where it spans) and rows."""
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = table.title[:31]
    book.properties.title = table.title
    sheet.cell(1, 1, table.title).font = Font(bold=True, size=14)
    top = 3
    for span in header_spans(table.header):
        sheet.cell(top + span.row, span.column + 1, span.text).font = Font(bold=True)
        if span.rows > 1 or span.columns > 1:
            sheet.merge_cells(
                start_row=top + span.row,
                start_column=span.column + 1,
                end_row=top + span.row + span.rows - 1,
                end_column=span.column + span.columns,
            )
    first = top + len(table.header)
    for r, row in enumerate(table.rows):
        for c, value in enumerate(row):
            sheet.cell(first + r, c + 1, value)
    for c in range(table.width):
        longest = max(len(row[c]) for row in (*table.header, *table.rows))
        sheet.column_dimensions[get_column_letter(c + 1)].width = min(60, longest + 2)
    sheet.freeze_panes = f"A{first}"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def write_pptx(table: Table) -> bytes:
    """A title slide (title and intro), then the table on slides of ``SLIDE_ROWS`` rows,
    each under the caption with the header repeated, as a real deck does."""
    deck = Presentation()
    deck.core_properties.title = table.title
    cover = deck.slides.add_slide(deck.slide_layouts[0])
    assert cover.shapes.title is not None
    cover.shapes.title.text = table.title
    cover.placeholders[1].text = table.intro
    parts = [table.rows[i : i + SLIDE_ROWS] for i in range(0, len(table.rows), SLIDE_ROWS)]
    for number, part in enumerate(parts, start=1):
        slide = deck.slides.add_slide(deck.slide_layouts[5])  # "Title Only"
        assert slide.shapes.title is not None
        more = f" ({number} of {len(parts)})" if len(parts) > 1 else ""
        slide.shapes.title.text = table.caption + more
        count = len(table.header) + len(part)
        shape = slide.shapes.add_table(
            count, table.width, Inches(0.3), Inches(1.4), Inches(9.4), Inches(0.3) * count
        )
        grid = shape.table
        for span in header_spans(table.header):
            cell = grid.cell(span.row, span.column)
            if span.rows > 1 or span.columns > 1:
                end = span.row + span.rows - 1, span.column + span.columns - 1
                cell.merge(grid.cell(*end))
            _slide_text(cell, span.text)
        for r, row in enumerate(part, start=len(table.header)):
            for c, value in enumerate(row):
                _slide_text(grid.cell(r, c), value)
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _slide_text(cell: object, text: str) -> None:
    frame = cell.text_frame  # type: ignore[attr-defined]
    frame.text = text
    for run in frame.paragraphs[0].runs:
        run.font.size = PptPt(10)


def writers() -> dict[str, Callable[[Table], bytes]]:
    """Each format's file extension and writer."""
    from bench import table_files

    return {
        "csv": write_csv,
        "md": write_markdown,
        "html": write_html,
        "docx": write_docx,
        "xlsx": write_xlsx,
        "pptx": write_pptx,
        "ods": table_files.write_ods,
        "odt": table_files.write_odt,
        "pdf": table_files.write_pdf,
        "eml": write_eml,
    }


def write_corpus(tables: list[Table], extension: str, folder: Path) -> None:
    """Every table as ``<name>.<extension>`` in ``folder``."""
    write = writers()[extension]
    folder.mkdir(parents=True, exist_ok=True)
    for table in tables:
        (folder / f"{table.name}.{extension}").write_bytes(write(table))
