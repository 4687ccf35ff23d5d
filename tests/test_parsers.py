"""Format detection and parsing of every supported format, including hostile files."""

from __future__ import annotations

import time
from typing import Any

import pytest

from retrieval.parsers import ParseError, UnsupportedDocumentType, detect_kind, parse_document
from retrieval.types import DocumentKind
from tests.documents import (
    docx_bomb,
    docx_with_entities,
    encrypt_pdf,
    make_docx,
    make_pdf,
    pdf_bomb,
)


def parse(data: bytes, filename: str):  # type: ignore[no-untyped-def]
    return parse_document(data, detect_kind(data, filename), filename)


@pytest.mark.parametrize(
    ("data", "filename", "kind"),
    [
        (b"%PDF-1.4 ...", "report.pdf", DocumentKind.PDF),
        (b"%PDF-1.4 ...", "no-extension", DocumentKind.PDF),  # content wins
        (b"# Title\n\ntext", "notes.md", DocumentKind.MARKDOWN),
        (b"a,b\n1,2\n", "table.csv", DocumentKind.CSV),
        (b"<html><p>x</p></html>", "page.htm", DocumentKind.HTML),
        (b"<html><p>x</p></html>", "page.HTML", DocumentKind.HTML),
        (b"<html><p>x</p></html>", "page.xhtml", DocumentKind.HTML),
        (b"# Title", "notes.markdown", DocumentKind.MARKDOWN),
        (b"plain words", "notes.txt", DocumentKind.TEXT),
        (b"plain words", "notes.text", DocumentKind.TEXT),
        (b"%PDF-1.7\n truncated", "broken.pdf", DocumentKind.PDF),  # fails later, with a reason
        (b"", "empty.txt", DocumentKind.TEXT),
    ],
)
def test_detect_kind(data: bytes, filename: str, kind: DocumentKind) -> None:
    assert detect_kind(data, filename) is kind


@pytest.mark.parametrize(
    ("data", "filename", "said"),
    [
        (b"<!DOCTYPE html><html><body>x</body></html>", "invoice.pdf", "is not a PDF"),
        (b'<svg xmlns="http://www.w3.org/2000/svg"></svg>', "logo.pdf", "is not a PDF"),
        (b"MZ\x90\x00" + bytes(range(256)), "setup.pdf", "is not a PDF"),
        (b"plain words", "letter.docx", "is not a DOCX"),
    ],
)
def test_n_content_named_pdf_or_docx_that_is_not_one_is_refused_at_upload(
    data: bytes, filename: str, said: str
) -> None:
    """#30: HTML, SVG or a program named .pdf was accepted, then failed in parsing."""
    with pytest.raises(UnsupportedDocumentType, match=said):
        detect_kind(data, filename)


def test_docx_is_detected_by_content() -> None:
    assert detect_kind(make_docx([("p", "x")]), "upload.bin") is DocumentKind.DOCX


@pytest.mark.parametrize(
    ("data", "filename", "named"),
    [
        (b'<svg xmlns="http://www.w3.org/2000/svg"><text>hi</text></svg>', "logo.svg", "'.svg'"),
        (b"#!/bin/sh\necho deploying\n", "deploy.sh", "'.sh'"),
        (b"plain words", "README", "without an extension"),
        (b"<!DOCTYPE html><html><body>x</body></html>", "page", "without an extension"),
        (b"key = value", "settings.ini", "'.ini'"),
    ],
)
def test_text_of_an_undocumented_type_is_refused_with_the_accepted_types(
    data: bytes, filename: str, named: str
) -> None:
    """Only PDF and DOCX have signatures; any other text must carry a documented extension."""
    with pytest.raises(UnsupportedDocumentType) as caught:
        detect_kind(data, filename)
    reason = str(caught.value)
    assert named in reason and "not a supported type" in reason
    assert "accepted: PDF, Word (DOCX), PowerPoint (PPTX), Excel (XLSX, XLSM)" in reason
    assert reason.endswith("Markdown, plain text (TXT) or CSV")


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        (b"MZ\x90\x00" + bytes(range(256)), "setup.exe"),
        (b"GIF89a\x01\x00\x01\x00", "animation.gif"),
        (b"\x00\x01\x02binary", "data.txt"),  # binary content behind a text extension
    ],
)
def test_binary_types_are_unsupported(data: bytes, filename: str) -> None:
    with pytest.raises(UnsupportedDocumentType):
        detect_kind(data, filename)


def test_zip_that_is_not_docx_is_unsupported() -> None:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(UnsupportedDocumentType):
        detect_kind(out.getvalue(), "archive.zip")


def test_pdf_keeps_page_numbers_and_title() -> None:
    data = make_pdf(["Intro line\nmore intro", "The refund limit is 300 euros."], title="Policy")
    document = parse(data, "policy.pdf")
    assert document.title == "Policy"
    assert [page.number for page in document.pages] == [1, 2]
    assert "refund limit is 300 euros" in document.pages[1].text


def test_pdf_with_empty_user_password_opens() -> None:
    data = encrypt_pdf(make_pdf(["Secret-free text"]), "")
    assert "Secret-free text" in parse(data, "open.pdf").pages[0].text


def test_password_protected_pdf_fails_with_reason() -> None:
    data = encrypt_pdf(make_pdf(["Classified"]), "hunter2")
    with pytest.raises(ParseError, match=r"password|encrypted"):
        parse(data, "locked.pdf")


@pytest.mark.parametrize("algorithm", ["AES-128", "AES-256", "AES-256-R5"])
def test_aes_encrypted_pdf_with_empty_user_password_opens(algorithm: str) -> None:
    data = encrypt_pdf(make_pdf(["Secret-free text"]), "", algorithm)
    assert "Secret-free text" in parse(data, "open.pdf").pages[0].text


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-128", "AES-256"])
def test_pdf_with_a_user_password_fails_as_encrypted(algorithm: str) -> None:
    data = encrypt_pdf(make_pdf(["Classified"]), "hunter2", algorithm)
    with pytest.raises(ParseError, match="encrypted with a password"):
        parse(data, "locked.pdf")


def test_aes_pdf_without_the_cryptography_package_fails_with_a_clear_reason() -> None:
    """Were the dependency missing, the reason still says what is wrong (not DependencyError)."""
    import subprocess
    import sys

    data = encrypt_pdf(make_pdf(["Secret-free text"]), "", "AES-256")
    script = (
        "import sys\n"
        "sys.modules['cryptography'] = None  # as if it were not installed\n"
        "from retrieval.parsers import ParseError, parse_document\n"
        "from retrieval.types import DocumentKind\n"
        "try:\n"
        "    parse_document(sys.stdin.buffer.read(), DocumentKind.PDF, 'a.pdf')\n"
        "except ParseError as exc:\n"
        "    print(exc.reason)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], input=data, capture_output=True, check=True
    )
    reason = run.stdout.decode()
    assert "encrypted with AES" in reason and "cryptography" in reason, run.stderr.decode()


@pytest.mark.parametrize(
    ("data", "filename", "reason"),
    [
        (b"", "empty.txt", "empty"),
        (b"   \n\t ", "blank.md", "empty"),
        (b"%PDF-1.4\n1 0 obj garbage", "broken.pdf", "PDF"),
        (b"PK\x03\x04garbage", "broken.docx", "DOCX"),
        (make_pdf([""]), "scanned.pdf", "no text"),
    ],
)
def test_broken_files_fail_with_a_reason(data: bytes, filename: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse(data, filename)


def test_docx_headings_paragraphs_and_tables() -> None:
    data = make_docx(
        [("h1", "Expenses"), ("p", "Meals are refunded up to 45 euros a day."), ("h2", "Travel")],
        table=[["Class", "Allowed"], ["Economy", "yes"]],
    )
    document = parse(data, "expenses.docx")
    blocks = document.pages[0].blocks
    assert blocks[0].text == "Expenses" and blocks[0].is_heading
    assert not blocks[1].is_heading
    assert "| Economy | yes |" in [b.text for b in blocks]
    assert document.title == "Expenses"


def test_docx_with_xml_entities_is_refused() -> None:
    with pytest.raises(ParseError, match="entity"):
        parse(docx_with_entities(), "lol.docx")


def test_pdf_decompression_bomb_is_refused_quickly() -> None:
    with pytest.raises(ParseError, match="bomb"):
        parse(pdf_bomb(), "bomb.pdf")


def test_docx_zip_bomb_is_refused() -> None:
    with pytest.raises(ParseError, match="bomb"):
        parse(docx_bomb(), "bomb.docx")


def _docx_with_part(name: str, *, symlink: bool = False) -> bytes:
    import io
    import stat
    import zipfile

    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(make_docx([("p", "Hello")]))) as source,
        zipfile.ZipFile(out, "w") as target,
    ):
        for entry in source.infolist():
            target.writestr(entry, source.read(entry))
        extra = zipfile.ZipInfo(name)
        if symlink:
            extra.external_attr = (stat.S_IFLNK | 0o777) << 16
        target.writestr(extra, "/etc/passwd" if symlink else "<x/>")
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "symlink", "said"),
    [
        ("../../evil.xml", False, "outside the archive"),
        ("word/../../evil.xml", False, "outside the archive"),
        ("/etc/evil.xml", False, "outside the archive"),
        ("C:/evil.xml", False, "outside the archive"),
        ("word/media/link", True, "symbolic link"),
    ],
)
def test_n_docx_with_zip_slip_or_symlink_parts_is_refused(
    name: str, symlink: bool, said: str
) -> None:
    """#30: such parts were ignored and the rest of the file parsed."""
    with pytest.raises(ParseError, match=said):
        parse(_docx_with_part(name, symlink=symlink), "crafted.docx")


def test_a_long_docx_parses_in_seconds() -> None:
    """Headings used to be found through python-docx's Paragraph.style, which scans every
    style for each paragraph (~1.5 ms): 20,000 paragraphs took half a minute or more; one
    lookup of the styles per document makes it a few seconds."""
    import io

    import docx

    built = docx.Document()
    built.add_heading("Contract", level=0)  # the Title style
    built.add_heading("Delivery", level=2)
    for n in range(20_000):
        built.add_paragraph(f"Clause {n}: delivery in 30 days.")
    built.add_paragraph("Signed", style="Heading 1")
    out = io.BytesIO()
    built.save(out)
    data = out.getvalue()
    started = time.perf_counter()
    document = parse(data, "long.docx")
    assert time.perf_counter() - started < 12
    parsed = document.pages[0].blocks
    assert len(parsed) == 20_003
    assert [b.text for b in parsed if b.is_heading] == ["Contract", "Delivery", "Signed"]


def test_html_drops_scripts_and_keeps_structure() -> None:
    html = (
        b"<html><head><title>Handbook</title><script>steal()</script><style>p{}</style></head>"
        b"<body><nav>Home | About</nav><h1>Leave</h1><p>Staff get <b>28</b> days.</p>"
        b"<ul><li><p>First item</p></li><li>Second</li></ul>"
        b"<table><tr><th>Grade</th><th>Days</th></tr><tr><td>A</td><td>30</td></tr></table>"
        b"</body></html>"
    )
    document = parse(html, "handbook.html")
    texts = [b.text for b in document.pages[0].blocks]
    assert document.title == "Handbook"
    assert texts[0] == "Leave" and document.pages[0].blocks[0].is_heading
    assert "Staff get 28 days." in texts
    assert texts.count("First item") == 1  # nested blocks are not duplicated
    assert "| A | 30 |" in texts
    assert not any("steal" in t or "Home" in t for t in texts)


def test_markdown_headings_and_code_fences() -> None:
    text = b"# Guide\n\nIntro.\n\n```\n# not a heading\n```\n\n## Part two\n\nBody.\n"
    blocks = parse(text, "guide.md").pages[0].blocks
    headings = [b.text for b in blocks if b.is_heading]
    assert headings == ["Guide", "Part two"]


def test_csv_rows_are_a_table_under_their_header() -> None:
    data = b"name;office;phone\nAda;London;123\nGrace;Paris;456\n"
    header, *rows = parse(data, "staff.csv").pages[0].blocks
    assert header.text == "| name | office | phone |" and header.is_heading
    assert [row.text for row in rows] == ["| Ada | London | 123 |", "| Grace | Paris | 456 |"]
    context = "staff\n| name | office | phone |\n| --- | --- | --- |"
    assert {block.table for block in (header, *rows)} == {context}


def test_text_decoding_falls_back_and_strips_controls() -> None:
    latin1 = "Café policy\x07 applies".encode("cp1252")
    assert parse(latin1, "menu.txt").pages[0].text == "Café policy applies"
    utf16 = "Straße".encode("utf-16")
    assert parse(utf16, "street.txt").pages[0].text == "Straße"


def test_page_text_offsets_match_blocks() -> None:
    document = parse(b"# A\n\nfirst para\n\nsecond para", "x.md")
    page = document.pages[0]
    assert page.text == "A\n\nfirst para\n\nsecond para"


def test_pathological_heading_lines_parse_in_linear_time() -> None:
    import time

    line = "# a" + " " * 100_000 + "b"
    started = time.perf_counter()
    document = parse(f"{line}\n\n#   Title ##  \n\ntext".encode(), "evil.md")
    assert time.perf_counter() - started < 1.0
    assert [b.text for b in document.pages[0].blocks if b.is_heading][-1] == "Title"


def test_text_that_mentions_the_pdf_header_stays_text() -> None:
    assert (
        detect_kind(b"Notes: a PDF starts with %PDF-1.7 bytes", "notes.md") is DocumentKind.MARKDOWN
    )


def test_docx_entities_declared_late_or_in_utf16_are_refused() -> None:
    import io
    import zipfile

    from tests.documents import make_docx, replace_in_zip

    base = make_docx([("p", "x")])
    xml = zipfile.ZipFile(io.BytesIO(base)).read("word/document.xml")
    padded = (
        b"<!--" + b" " * 8000 + b"-->" + b'<!DOCTYPE d [<!ENTITY e "x">]>' + xml.split(b"?>", 1)[1]
    )
    with pytest.raises(ParseError, match="entity"):
        parse(replace_in_zip(base, "word/document.xml", padded), "late.docx")
    utf16 = ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE d [<!ENTITY e "x">]><d/>').encode(
        "utf-16"
    )
    with pytest.raises(ParseError, match="entity"):
        parse(replace_in_zip(base, "word/styles.xml", utf16), "utf16.docx")


@pytest.mark.parametrize(
    ("core_title", "blocks", "expected"),
    [
        ("Document1", [("p", "Body only.")], "travel-policy"),  # the file's name
        ("Document1", [("h1", "Travel policy"), ("p", "Body.")], "Travel policy"),
        ("Microsoft Word - old.doc", [("p", "Body only.")], "travel-policy"),
        ("Untitled document", [("p", "Body only.")], "travel-policy"),
        ("Expenses and travel 2026", [("h1", "Intro"), ("p", "Body.")], "Expenses and travel 2026"),
    ],
)
def test_docx_titles_skip_placeholders(core_title: str, blocks: Any, expected: str) -> None:
    import io

    import docx

    document = docx.Document(io.BytesIO(make_docx(blocks)))
    document.core_properties.title = core_title
    out = io.BytesIO()
    document.save(out)
    parsed = parse_document(out.getvalue(), DocumentKind.DOCX, "travel-policy.docx")
    assert parsed.title == expected


def _zip(parts: dict[str, bytes]) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in parts.items():
            archive.writestr(name, content)
    return buffer.getvalue()


_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


@pytest.mark.parametrize(
    ("data", "filename", "kind"),
    [
        (_zip({"ppt/presentation.xml": b"<p/>"}), "deck.bin", DocumentKind.PPTX),
        (_zip({"xl/workbook.xml": b"<w/>"}), "prices", DocumentKind.XLSX),
        (_zip({"xl/workbook.xml": b"<w/>"}), "macros.xlsm", DocumentKind.XLSX),
        (_zip({"word/document.xml": b"<d/>"}), "named-as-slides.pptx", DocumentKind.DOCX),
        (
            _zip({"mimetype": b"application/vnd.oasis.opendocument.spreadsheet"}),
            "rota.zip",
            DocumentKind.ODS,
        ),
        (
            _zip({"mimetype": b"application/vnd.oasis.opendocument.text"}),
            "letter.odt",
            DocumentKind.ODT,
        ),
        (
            _zip({"mimetype": b"application/vnd.oasis.opendocument.presentation"}),
            "talk.odp",
            DocumentKind.ODP,
        ),
        (_zip({"mimetype": b"application/epub+zip"}), "book.epub", DocumentKind.EPUB),
        (b"{\\rtf1\\ansi Hello}", "note.doc", DocumentKind.RTF),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "notice", DocumentKind.IMAGE),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "notice.jpeg", DocumentKind.IMAGE),
        (b"II*\x00\x08\x00\x00\x00", "scan.tif", DocumentKind.IMAGE),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "photo.webp", DocumentKind.IMAGE),
        (
            _OLE + b"\x00" * 200 + "__substg1.0_0037001F".encode("utf-16-le"),
            "mail.msg",
            DocumentKind.MSG,
        ),
        (_OLE + b"\x00" * 200 + b"EncryptedPackage", "locked.xlsx", DocumentKind.XLSX),
        (
            b"From: Ann <ann@example.com>\nTo: staff@example.com\nSubject: Rota\n\nHi all",
            "forwarded",
            DocumentKind.EML,
        ),
        (
            b"From ann@example.com Mon Dec  7 10:00:00 2026\nFrom: ann@example.com\n"
            b"Subject: Rota\n\nHi",
            "archive",
            DocumentKind.MBOX,
        ),
        (b"From: the CEO\n\nOur plans for 2027.", "note.md", DocumentKind.MARKDOWN),
    ],
)
def test_magic_bytes_decide_the_format_and_the_name_is_a_hint(
    data: bytes, filename: str, kind: DocumentKind
) -> None:
    assert detect_kind(data, filename) is kind


@pytest.mark.parametrize(
    ("data", "filename", "reason"),
    [
        (b"<html>not a sheet</html>", "prices.xlsx", r"named .xlsx but is not an XLSX \(not a"),
        (b"plain words", "photo.jpg", "named .jpg but is not a PNG, JPEG, TIFF or WebP image"),
        (_OLE + b"\x00" * 512, "old.doc", "legacy Office binary files"),
        (_zip({"readme.txt": b"hi"}), "bundle.zip", "other than Office, OpenDocument or EPUB"),
        (b"From: the CEO\n\nOur plans for 2027.", "note", "files without an extension"),
    ],
)
def test_what_no_parser_reads_is_refused_with_a_reason(
    data: bytes, filename: str, reason: str
) -> None:
    with pytest.raises(UnsupportedDocumentType, match=reason):
        detect_kind(data, filename)


def test_a_password_protected_office_file_fails_with_a_reason() -> None:
    data = _OLE + b"\x00" * 200 + b"EncryptedPackage"
    with pytest.raises(ParseError, match="protected by a password"):
        parse_document(data, detect_kind(data, "locked.pptx"), "locked.pptx")


def test_markdown_pipe_table_rows_carry_their_header() -> None:
    text = (
        "# Plans\n\nIntro.\n\n**Health plan comparison**\n\n"
        "| Plan | Fee \\| VAT | Notes |\n|:---|---:|:-:|\n| Silver | £500 | a \\| b |\n"
        "Gold | £900\n| Bronze | £1 | c | extra |\nAfter the table.\n"
    ).encode()
    document = parse(text, "plans.md")
    blocks = document.pages[0].blocks
    context = "Health plan comparison\n| Plan | Fee \\| VAT | Notes |\n| --- | --- | --- |"
    assert document.title == "Plans"
    assert [(b.text, b.is_heading, b.table) for b in blocks[3:]] == [
        ("| Plan | Fee \\| VAT | Notes |", True, context),
        ("| Silver | £500 | a \\| b |", False, context),
        ("| Gold | £900 |  |", False, context),  # short rows padded, long ones cut
        ("| Bronze | £1 | c |", False, context),
        ("After the table.", False, None),
    ]


def test_markdown_table_under_a_heading_and_tables_in_code_fences_untouched() -> None:
    text = b"## Rooms\n\nRoom | Seats\n--- | ---\nAshdown | 22\n\n```\n| a | b |\n|---|---|\n```\n"
    blocks = parse(text, "rooms.md").pages[0].blocks
    context = "Rooms\n| Room | Seats |\n| --- | --- |"
    assert [(b.text, b.table) for b in blocks] == [
        ("Rooms", None),
        ("| Room | Seats |", context),
        ("| Ashdown | 22 |", context),
        ("```\n| a | b |\n|---|---|\n```", None),
    ]


def test_markdown_pipes_without_a_rule_stay_a_paragraph() -> None:
    text = b"a | b\nc | d\n\n| x |\n| - | - |\n| 1 |\n"  # no rule; cells unequal to the rule
    blocks = parse(text, "notes.md").pages[0].blocks
    assert [(b.text, b.table) for b in blocks] == [
        ("a | b\nc | d", None),
        ("| x |\n| - | - |\n| 1 |", None),
    ]


def test_a_long_markdown_table_keeps_its_header_on_every_row() -> None:
    rows = "".join(f"| SKU-{n:03} | Item {n} | £{n}.00 |\n" for n in range(60))
    text = f"# Catalogue\n\n| SKU | Item | Price |\n|---|---|---|\n{rows}".encode()
    blocks = parse(text, "catalogue.md").pages[0].blocks[1:]
    context = "Catalogue\n| SKU | Item | Price |\n| --- | --- | --- |"
    assert len(blocks) == 61 and {b.table for b in blocks} == {context}
