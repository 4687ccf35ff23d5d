"""XLSX/XLSM through openpyxl, and CSV, into the one table model (retrieval/parsers/tables.py)."""

from __future__ import annotations

import datetime
import io
import re
import time
import zipfile
from collections.abc import Callable

import pytest
from openpyxl import Workbook

from retrieval.parsers import UnsupportedDocumentType, detect_kind, spreadsheet
from retrieval.parsers.errors import ParseError
from retrieval.parsers.spreadsheet import parse_xlsx
from retrieval.parsers.text import parse_csv
from retrieval.types import DocumentKind, ParsedPage


def xlsx(workbook: Workbook) -> bytes:
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def rewrite(data: bytes, name: str, change: Callable[[str], str]) -> bytes:
    """The archive with part ``name`` changed (or added, from an empty text)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        names = source.namelist()
        for member in names:
            text = source.read(member)
            target.writestr(member, change(text.decode()) if member == name else text)
        if name not in names:
            target.writestr(name, change(""))
    return out.getvalue()


def rows(page: ParsedPage) -> list[str]:
    return [block.text for block in page.blocks if not block.is_heading]


def contexts(page: ParsedPage) -> list[str | None]:
    return [block.table for block in page.blocks if not block.is_heading]


def test_every_sheet_is_a_labelled_page_and_empty_sheets_are_skipped() -> None:
    workbook = Workbook()
    staff = workbook.active
    assert staff is not None
    staff.title = "Staff"
    staff.append(["Name", "Office"])
    staff.append(["Ada", "London"])
    workbook.create_sheet("Empty")
    secret = workbook.create_sheet("Salaries")
    secret.sheet_state = "hidden"
    secret.append(["Name", "Salary"])
    secret.append(["Ada", 5000])
    deep = workbook.create_sheet("Deep")
    deep.sheet_state = "veryHidden"
    deep.append(["x"])
    workbook.properties.title = "Team book"

    document = parse_xlsx(xlsx(workbook), "fallback")

    assert document.title == "Team book"
    assert [(p.number, p.label) for p in document.pages] == [
        (1, "Sheet “Staff”"),
        (2, "Sheet “Salaries” (hidden)"),
        (3, "Sheet “Deep” (hidden)"),
    ]
    assert rows(document.pages[0]) == ["| Ada | London |"]
    assert contexts(document.pages[0]) == ["Staff\n| Name | Office |\n| --- | --- |"]
    assert rows(document.pages[1]) == ["| Ada | 5000 |"]
    assert document.warnings == ()


def test_title_row_and_merged_header_cells_name_every_column() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Prices"
    sheet["A1"] = "Price list 2025"
    sheet.merge_cells("A1:D1")
    sheet.append(["Product", 2025, None, "Since"])
    sheet.append([None, "Q1", "Q2", None])
    sheet.merge_cells("B2:C2")
    sheet.merge_cells("A2:A3")
    sheet.merge_cells("D2:D3")
    sheet.append(["Gold", 1000, 1100, 2019])
    sheet.append(["Silver", 500, 550, 2020])

    page = parse_xlsx(xlsx(workbook), "prices").pages[0]

    header = "| Product | 2025 Q1 | 2025 Q2 | Since |"
    assert rows(page) == ["| Gold | 1000 | 1100 | 2019 |", "| Silver | 500 | 550 | 2020 |"]
    assert set(contexts(page)) == {f"Prices — Price list 2025\n{header}\n| --- | --- | --- | --- |"}
    assert "Price list 2025" not in " ".join(rows(page))  # a caption, not a row


def test_values_read_as_the_cells_show_them() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["Kind", "Value"])
    values: list[tuple[str, object, str | None]] = [
        ("int", 1000, None),
        ("float int", 500.0, None),
        ("noise", 0.1 + 0.2, None),
        ("pi", 3.141592653589793, None),
        ("date", datetime.date(2024, 3, 1), None),
        ("datetime", datetime.datetime(2024, 3, 1, 14, 30), None),
        ("time", datetime.time(9, 15), None),
        ("true", True, None),
        ("false", False, None),
        ("error", "#DIV/0!", None),
        ("percent", 0.125, "0.0%"),
        ("money", 1234.5, '#,##0.00 "€"'),
        ("dollars", -1234.567, "[$$-409]#,##0.00"),
        ("rounded", 2.5, "0"),
        ("text digits", "007", "@"),
        ("big", 1e20, None),
    ]
    for row, (kind, value, number_format) in enumerate(values, start=2):
        sheet.append([kind, value])
        if number_format:
            sheet.cell(row, 2).number_format = number_format

    shown = rows(parse_xlsx(xlsx(workbook), "values").pages[0])

    assert shown == [
        "| int | 1000 |",
        "| float int | 500 |",
        "| noise | 0.3 |",
        "| pi | 3.14159265358979 |",
        "| date | 2024-03-01 |",
        "| datetime | 2024-03-01 14:30 |",
        "| time | 09:15 |",
        "| true | TRUE |",
        "| false | FALSE |",
        "| error | #DIV/0! |",
        "| percent | 12.5% |",
        "| money | 1,234.50 € |",
        "| dollars | -$1,234.57 |",
        "| rounded | 3 |",  # half away from zero, as Excel rounds
        "| text digits | 007 |",
        "| big | 1E+20 |",
    ]


def test_formulas_give_their_saved_values_and_are_never_evaluated() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["Item", "Price", "Qty", "Total", "Check", "Stale"])
    sheet.append(["Pen", 2, 3, 111, 222, 333])
    cells = {
        "D2": '<c r="D2"><f>B2*C2</f><v>6</v></c>',
        "E2": '<c r="E2" t="e"><f>B2/0</f><v>#DIV/0!</v></c>',
        "F2": '<c r="F2"><f>B2+C2</f></c>',  # never calculated: no saved value
    }

    def with_formulas(xml: str) -> str:
        for ref, cell in cells.items():
            xml = re.sub(rf'<c r="{ref}"[^>]*>.*?</c>', cell, xml)
        return xml

    data = rewrite(xlsx(workbook), "xl/worksheets/sheet1.xml", with_formulas)
    page = parse_xlsx(data, "formulas").pages[0]

    assert rows(page) == ["| Pen | 2 | 3 | 6 | #DIV/0! |  |"]
    assert "B2*C2" not in str(page.blocks)


def test_vertically_merged_groups_repeat_down_their_rows() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Stock"
    sheet.append(["Group", "Item", "Qty"])
    sheet.append(["Fruit", "Apple", 3])
    sheet.append([None, "Pear", 4])
    sheet.merge_cells("A2:A3")
    sheet.append(["Section total", None, 7])
    sheet.merge_cells("A4:B4")  # a label over two body cells is not repeated across

    assert rows(parse_xlsx(xlsx(workbook), "stock").pages[0]) == [
        "| Fruit | Apple | 3 |",
        "| Fruit | Pear | 4 |",
        "| Section total |  | 7 |",
    ]


def test_blank_rows_continue_a_table_or_start_the_next() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Report"
    for row in (
        ["Region", "Sales"],
        ["North", 10],
        [],
        ["South", 20],  # more of the same table
        [],
        ["Costs by product"],
        ["Product", "Units"],  # a table of its own, under its title
        ["Pen", 5],
        [],
        ["Source: company records"],
    ):
        sheet.append(row)

    page = parse_xlsx(xlsx(workbook), "report").pages[0]

    sales = "Report\n| Region | Sales |\n| --- | --- |"
    costs = "Report — Costs by product\n| Product | Units |\n| --- | --- |"
    assert list(zip(rows(page), contexts(page), strict=True)) == [
        ("| North | 10 |", sales),
        ("| South | 20 |", sales),
        ("| Pen | 5 |", costs),
        ("Source: company records", None),
    ]


def test_a_numeric_first_row_is_data_not_a_header() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append([1, 2])
    sheet.append([3, 4])
    page = parse_xlsx(xlsx(workbook), "numbers").pages[0]
    assert rows(page) == ["| 1 | 2 |", "| 3 | 4 |"]
    assert set(contexts(page)) == {"Sheet"}


def test_the_far_corner_cell_is_fast_and_columns_are_cut() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet["A1"] = "Name"
    sheet["A2"] = "Ada"
    sheet["XFD1048576"] = "far away"
    data = xlsx(workbook)
    started = time.monotonic()
    document = parse_xlsx(data, "corner")
    assert time.monotonic() - started < 2
    assert "far away" not in str(document.pages)
    assert document.warnings == (
        "Sheet “Sheet”: values right of column IV (the 256th) were left out",
    )

    alone = Workbook()
    corner = alone.active
    assert corner is not None
    corner["XFD1048576"] = "far away"
    with pytest.raises(ParseError, match=r"no cell values to index \(.*right of column IV"):
        parse_xlsx(xlsx(alone), "corner")


def test_a_sheet_claiming_every_cell_but_holding_none_is_fast() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet["A1"] = "placeholder"
    huge = rewrite(
        xlsx(workbook),
        "xl/worksheets/sheet1.xml",
        lambda xml: re.sub(r"<sheetData>.*</sheetData>", "<sheetData/>", xml).replace(
            "<sheetViews>", '<dimension ref="A1:XFD1048576"/><sheetViews>'
        ),
    )
    started = time.monotonic()
    with pytest.raises(ParseError, match="no cell values to index"):
        parse_xlsx(huge, "huge")
    assert time.monotonic() - started < 2


def test_formatting_without_values_ends_a_sheet() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["Name", "Office"])
    sheet.append(["Ada", "London"])
    for row in range(3, 3 + spreadsheet.MAX_EMPTY_RUN + 5):
        sheet.cell(row, 1).number_format = "0.00"  # a styled cell without a value
    sheet.cell(3 + spreadsheet.MAX_EMPTY_RUN + 5, 1, "too late")

    document = parse_xlsx(xlsx(workbook), "styled")

    assert rows(document.pages[0]) == ["| Ada | London |"]
    assert document.warnings == (
        "Sheet “Sheet”: reading stopped at row 1,002 after 1,000 rows holding no values "
        "(formatting only); anything below was not indexed",
    )


def test_the_cell_limit_truncates_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spreadsheet, "MAX_CELLS", 7)
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    for row in range(10):
        sheet.append([f"r{row}", row])
    workbook.create_sheet("Later").append(["never", "read"])

    document = parse_xlsx(xlsx(workbook), "big")

    assert [p.label for p in document.pages] == ["Sheet “Sheet”"]
    assert rows(document.pages[0]) == ["| r0 | 0 |", "| r1 | 1 |", "| r2 | 2 |"]
    assert document.warnings == (
        "The workbook has more than 7 filled cells; only the first 7 were indexed "
        "(sheet “Sheet” stops before row 4)",
        "Sheet “Later” was left out (cell limit reached)",
    )


def test_xlsm_macros_are_data_and_never_run() -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["Macro", "Status"])
    sheet.append(["Auto_Open", "not run"])
    data = rewrite(xlsx(workbook), "xl/vbaProject.bin", lambda _: "Attribute VB_Name = x")
    assert rows(parse_xlsx(data, "macros").pages[0]) == ["| Auto_Open | not run |"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"PK\x03\x04 not really a zip", "not a valid XLSX file (the ZIP container is broken)"),
        ("word", "not a valid XLSX file (xl/workbook.xml is missing)"),
        ("workbook", "the XLSX workbook cannot be opened: its XML is malformed"),
        ("styles", "the XLSX workbook cannot be opened: its XML is malformed"),
        ("dtd", "the XLSX contains XML entity declarations, refused"),
        ("sheet", "the XLSX workbook could not be read: sheet “Sheet” is damaged "),
    ],
)
def test_broken_workbooks_fail_with_a_reason(data: bytes | str, reason: str) -> None:
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["a", "b"])
    good = xlsx(workbook)
    broken = {
        "word": rewrite(b"PK\x05\x06" + bytes(18), "word/document.xml", lambda _: "<w/>"),
        "workbook": rewrite(good, "xl/workbook.xml", lambda xml: xml[: len(xml) // 2]),
        "styles": rewrite(good, "xl/styles.xml", lambda _: "<styleSheet"),
        "dtd": rewrite(good, "xl/workbook.xml", lambda xml: '<!DOCTYPE x [<!ENTITY a "b">]>' + xml),
        "sheet": rewrite(good, "xl/worksheets/sheet1.xml", lambda xml: xml[: len(xml) - 40]),
    }
    with pytest.raises(ParseError) as caught:
        parse_xlsx(broken[data] if isinstance(data, str) else data, "broken")
    assert caught.value.reason.startswith(reason)


def test_a_damaged_sheet_is_left_out_with_a_warning() -> None:
    workbook = Workbook()
    workbook.active.append(["a", "b"])  # type: ignore[union-attr]
    workbook.create_sheet("Fine").append(["Name", "Office"])
    data = rewrite(
        xlsx(workbook), "xl/worksheets/sheet1.xml", lambda xml: xml.replace("</c>", "", 1)
    )
    document = parse_xlsx(data, "partial")
    assert [p.label for p in document.pages] == ["Sheet “Fine”"]
    assert document.warnings == (
        "The XLSX sheet “Sheet” is damaged (its XML is malformed); it was left out",
    )


def _zip_of(*names: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in names:
            archive.writestr(name, "<x/>")
    return buffer.getvalue()


def test_workbooks_are_recognised_by_their_parts() -> None:
    assert detect_kind(xlsx(Workbook()), "upload") is DocumentKind.XLSX
    docx = _zip_of("word/document.xml", "[Content_Types].xml")
    assert detect_kind(docx, "upload") is not DocumentKind.XLSX
    with pytest.raises(UnsupportedDocumentType):  # XLSB: binary, not read
        detect_kind(_zip_of("xl/workbook.bin"), "upload")


def test_csv_is_one_table_under_the_file_name() -> None:
    page = parse_csv("name;office;phone\nAda;London;123\n\nGrace; Paris ;456\n", "staff").pages[0]
    assert rows(page) == ["| Ada | London | 123 |", "| Grace | Paris | 456 |"]
    assert set(contexts(page)) == {"staff\n| name | office | phone |\n| --- | --- | --- |"}


def test_csv_without_a_header_row() -> None:
    page = parse_csv("2024,10\n2025,12\n", "years").pages[0]
    assert rows(page) == ["| 2024 | 10 |", "| 2025 | 12 |"]
    assert set(contexts(page)) == {"years"}
    single = parse_csv("only,one,row\n", "one").pages[0]
    assert rows(single) == ["| only | one | row |"]


def test_csv_errors_keep_their_reasons() -> None:
    with pytest.raises(ParseError, match="the CSV file has no rows"):
        parse_csv(" \n\n", "blank")
    with pytest.raises(ParseError, match="malformed CSV:"):
        parse_csv('a,b\n"x' + "y" * 1_000_001 + '",z\n', "huge")


def test_csv_merged_header_cells_as_excel_exports_them() -> None:
    """A merged "2025" is written in the first column of its span, the others empty; the
    "Region" merged down leaves the row under it empty."""
    data = (
        "Region,2025,,2026,\r\n"
        ",Q1,Q2,Q1,Q2\r\n"
        'London,"£612,400","£588,950","£645,760","£619,230"\r\n'
        'Midlands,"£318,740","£302,615","£334,270","£321,160"\r\n'
    )
    page = parse_csv(data, "regional-sales").pages[0]
    header = "| Region | 2025 Q1 | 2025 Q2 | 2026 Q1 | 2026 Q2 |"
    assert page.blocks[0].text == header and page.blocks[0].is_heading
    assert rows(page) == [
        "| London | £612,400 | £588,950 | £645,760 | £619,230 |",
        "| Midlands | £318,740 | £302,615 | £334,270 | £321,160 |",
    ]
    assert set(contexts(page)) == {f"regional-sales\n{header}\n{'| --- ' * 5}|"}


def test_csv_title_line_over_a_blank_line_captions_the_table() -> None:
    data = "Price list 2027,,\n,,\nPlan,Price,Seats\nSilver,500,30\n\nGold,900,60\n"
    page = parse_csv(data, "prices").pages[0]
    context = "prices — Price list 2027\n| Plan | Price | Seats |\n| --- | --- | --- |"
    assert rows(page) == ["| Silver | 500 | 30 |", "| Gold | 900 | 60 |"]  # one table
    assert set(contexts(page)) == {context}
    note = parse_csv("Only a note\n", "note").pages[0]
    assert [(b.text, b.table) for b in note.blocks] == [("Only a note", None)]


def test_xlsx_two_header_rows_under_a_title_and_a_blank_row() -> None:
    """The layout the table bench writes: title in A1, a blank row, a header whose
    "Region" is merged down and whose years are merged over their quarters."""
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Sales"
    sheet["A1"] = "Sales by region"
    sheet.append([])
    sheet.append(["Region", 2025, None, 2026, None])
    sheet.append([None, "Q1", "Q2", "Q1", "Q2"])
    sheet.append(["North", 10, 20, 30, 40])
    for cells in ("A3:A4", "B3:C3", "D3:E3"):
        sheet.merge_cells(cells)
    page = parse_xlsx(xlsx(workbook), "sales").pages[0]
    header = "| Region | 2025 Q1 | 2025 Q2 | 2026 Q1 | 2026 Q2 |"
    assert rows(page) == ["| North | 10 | 20 | 30 | 40 |"]
    assert contexts(page) == [f"Sales — Sales by region\n{header}\n{'| --- ' * 5}|"]
