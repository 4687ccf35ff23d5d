"""Real documents of every supported format, built in memory for tests and benchmarks."""

from __future__ import annotations

import io
import zipfile
import zlib

import docx
from pypdf import PdfReader, PdfWriter


def make_pdf(pages: list[str], *, title: str | None = None) -> bytes:
    """A genuine PDF with one text line per ``\\n`` on each page (Helvetica, uncompressed)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    pages_id = len(objects) + 2 * len(pages) + 1
    page_ids = []
    for text in pages:
        lines = [
            line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            for line in text.split("\n")
        ]
        ops = ["BT", "/F1 11 Tf", "14 TL", "50 780 Td"]
        ops += [f"({line}) Tj T*" for line in lines]
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        page_ids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (pages_id, content, font)
            )
        )
    kids = b" ".join(b"%d 0 R" % i for i in page_ids)
    assert add(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_ids))) == pages_id
    info = add(b"<< /Title (%s) >>" % title.encode("latin-1")) if title else None
    catalog = add(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id)
    return pdf_file(objects, catalog, info)


def encrypt_pdf(data: bytes, password: str, algorithm: str = "RC4-128") -> bytes:
    """``data`` encrypted with ``password`` as the user password; AES needs cryptography."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(blocks: list[tuple[str, str]], *, table: list[list[str]] | None = None) -> bytes:
    """``blocks`` are (style, text) with style 'h1', 'h2' or 'p'."""
    document = docx.Document()
    for style, text in blocks:
        if style.startswith("h"):
            document.add_heading(text, level=int(style[1:]))
        else:
            document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pdf_bomb(expanded_bytes: int = 200 * 1024 * 1024) -> bytes:
    """A small PDF whose page content inflates to ``expanded_bytes`` of spaces."""
    compressor = zlib.compressobj(9)
    block = b" " * (1024 * 1024)
    stream = b"".join(compressor.compress(block) for _ in range(expanded_bytes // len(block)))
    stream += compressor.flush()
    base = make_pdf(["x"])
    start = base.index(b"2 0 obj")
    end = base.index(b"endobj", start) + len(b"endobj")
    bomb = b"2 0 obj\n<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream)
    return base[:start] + bomb + stream + b"\nendstream\nendobj" + base[end:]


def replace_in_zip(data: bytes, member: str, content: bytes) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            payload = content if item.filename == member else source.read(item)
            target.writestr(item.filename, payload)
    return out.getvalue()


def docx_with_entities() -> bytes:
    """A 'billion laughs' DOCX: entity declarations in word/document.xml."""
    base = make_docx([("p", "placeholder")])
    xml = zipfile.ZipFile(io.BytesIO(base)).read("word/document.xml")
    evil = (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        b'<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;">]>\n'
        + xml.split(b"?>", 1)[1].replace(b"placeholder", b"&lol2;")
    )
    return replace_in_zip(base, "word/document.xml", evil)


def docx_bomb(uncompressed_bytes: int = 60 * 1024 * 1024) -> bytes:
    base = make_docx([("p", "tiny")])
    source = zipfile.ZipFile(io.BytesIO(base))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            target.writestr(item.filename, source.read(item))
        target.writestr("word/media/zeros.bin", b"\0" * uncompressed_bytes)
    return out.getvalue()


def pdf_file(objects: list[bytes], catalog: int, info: int | None = None) -> bytes:
    """The numbered ``objects`` written out as a PDF file: header, objects, cross-reference
    table and trailer (``catalog`` and ``info`` are object numbers)."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.writelines(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"<< /Size %d /Root %d 0 R" % (len(objects) + 1, catalog)
    if info:
        trailer += b" /Info %d 0 R" % info
    out.write(b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()
