"""EPUB: chapters of the spine as labelled pages, DRM, bombs and broken packages."""

from __future__ import annotations

import io
import zipfile

import pytest

from retrieval.parsers import UnsupportedDocumentType, detect_kind
from retrieval.parsers.epub import parse_epub
from retrieval.parsers.errors import ParseError
from retrieval.types import DocumentKind

_CONTAINER = """<?xml version="1.0" encoding="UTF-8"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles>
    <rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
  </rootfiles>
</container>"""

_OPF = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="id">urn:uuid:1</dc:identifier>
    <dc:title>The Harbour Guide</dc:title>
  </metadata>
  <manifest>
    <item id="cover" href="cover.xhtml" media-type="application/xhtml+xml"/>
    <item id="cover-image" href="images/cover.jpg" media-type="image/jpeg"/>
    <item id="c1" href="text/chapter%201.xhtml" media-type="application/xhtml+xml"/>
    <item id="c2" href="text/prices.xhtml" media-type="application/xhtml+xml"/>
    <item id="gone" href="text/gone.xhtml" media-type="application/xhtml+xml"/>
    <item id="font" href="fonts/serif.otf" media-type="font/otf"/>
  </manifest>
  <spine>
    <itemref idref="cover"/>
    <itemref idref="cover-image"/>
    <itemref idref="c1"/>
    <itemref idref="gone"/>
    <itemref idref="c2"/>
    <itemref idref="c1"/>
  </spine>
</package>"""


def _xhtml(body: str, head: str = "<title/>") -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml">'
        f"<head>{head}</head><body>{body}</body></html>"
    )


_CHAPTER_1 = _xhtml(
    "<h1>The Harbour</h1><p>Boats leave at <b>nine</b> daily.</p><p>Caf\u00e9 open.</p>"
)
_CHAPTER_2 = _xhtml(
    "<h2>Prices</h2><table><tr><th>Plan</th><th>Price</th></tr>"
    "<tr><td>Silver</td><td>500</td></tr></table>"
)
_BOOK = {
    "META-INF/container.xml": _CONTAINER,
    "OEBPS/content.opf": _OPF,
    "OEBPS/cover.xhtml": _xhtml('<div><img src="images/cover.jpg" alt=""/></div>'),
    "OEBPS/images/cover.jpg": "\xff\xd8\xff not really a JPEG",
    "OEBPS/text/chapter 1.xhtml": _CHAPTER_1,
    "OEBPS/text/prices.xhtml": _CHAPTER_2,
}

_FONT_OBFUSCATION = """<?xml version="1.0" encoding="UTF-8"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
            xmlns:enc="http://www.w3.org/2001/04/xmlenc#">
  <enc:EncryptedData>
    <enc:EncryptionMethod Algorithm="{algorithm}"/>
    <enc:CipherData><enc:CipherReference URI="{uri}"/></enc:CipherData>
  </enc:EncryptedData>
</encryption>"""


def _epub(parts: dict[str, str], *, mimetype: bytes = b"application/epub+zip") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", mimetype, compress_type=zipfile.ZIP_STORED)
        for name, text in parts.items():
            archive.writestr(name, text.encode("utf-8"))
    return buffer.getvalue()


def _reason(data: bytes) -> str:
    with pytest.raises(ParseError) as caught:
        parse_epub(data, "fallback")
    return caught.value.reason


def test_spine_chapters_become_labelled_pages() -> None:
    data = _epub(_BOOK)
    assert detect_kind(data, "upload") is DocumentKind.EPUB
    document = parse_epub(data, "fallback")
    assert document.title == "The Harbour Guide"
    first, second = document.pages
    assert (first.number, first.label) == (1, "Chapter 1: The Harbour")
    assert [b.text for b in first.blocks] == [
        "The Harbour",
        "Boats leave at nine daily.",
        "Café open.",
    ]
    assert first.blocks[0].is_heading
    assert (second.number, second.label) == (2, "Chapter 2: Prices")
    rows = [b for b in second.blocks if "Silver" in b.text]
    assert len(rows) == 1 and "500" in rows[0].text
    assert rows[0].table is not None and "Plan" in rows[0].table
    # The cover (a picture only) is no page; the picture, the missing file and the
    # repeated chapter are skipped with warnings.
    assert document.warnings == (
        "1 item of the reading order skipped (missing from the book): 'OEBPS/text/gone.xhtml'",
        "1 item of the reading order skipped (not XHTML): 'OEBPS/images/cover.jpg'",
        "1 item of the reading order skipped (listed twice): 'OEBPS/text/chapter 1.xhtml'",
    )


def test_self_closed_title_does_not_swallow_the_chapter() -> None:
    chapter = _xhtml("<p>Kept text.</p>", head='<title/><script src="x.js"/>')
    book = {**_BOOK, "OEBPS/text/chapter 1.xhtml": chapter}
    pages = parse_epub(_epub(book), "fallback").pages
    assert [b.text for b in pages[0].blocks] == ["Kept text."]
    assert pages[0].label == "Chapter 1"


def test_title_falls_back_to_first_heading() -> None:
    book = {**_BOOK, "OEBPS/content.opf": _OPF.replace("The Harbour Guide", "Untitled")}
    assert parse_epub(_epub(book), "fallback").title == "The Harbour"


def test_encrypted_chapters_are_refused_as_drm() -> None:
    encryption = _FONT_OBFUSCATION.format(
        algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc", uri="OEBPS/text/prices.xhtml"
    )
    reason = _reason(_epub({**_BOOK, "META-INF/encryption.xml": encryption}))
    assert reason == (
        "this e-book is protected by DRM (its chapters are encrypted); "
        "only EPUB files without copy protection can be read"
    )


def test_font_obfuscation_alone_is_fine() -> None:
    encryption = _FONT_OBFUSCATION.format(
        algorithm="http://www.idpf.org/2008/embedding", uri="OEBPS/fonts/serif.otf"
    )
    book = {**_BOOK, "META-INF/encryption.xml": encryption, "OEBPS/fonts/serif.otf": "x"}
    assert len(parse_epub(_epub(book), "fallback").pages) == 2


def test_billion_laughs_in_a_chapter_is_refused() -> None:
    laughs = (
        '<?xml version="1.0"?><!DOCTYPE html [<!ENTITY lol "lol">'
        '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
        "<html><body><p>&lol2;</p></body></html>"
    )
    reason = _reason(_epub({**_BOOK, "OEBPS/text/prices.xhtml": laughs}))
    assert reason == "the EPUB contains XML entity declarations, refused"


def test_missing_or_broken_package_file() -> None:
    without_opf = {k: v for k, v in _BOOK.items() if k != "OEBPS/content.opf"}
    assert _reason(_epub(without_opf)) == (
        "not a valid EPUB file (its package file 'OEBPS/content.opf' is missing)"
    )
    broken = {**_BOOK, "OEBPS/content.opf": "<package><manifest>"}
    assert _reason(_epub(broken)) == (
        "not a valid EPUB file (its package file is not well-formed XML)"
    )
    no_spine = {**_BOOK, "OEBPS/content.opf": _OPF.split("<spine>")[0] + "</package>"}
    assert _reason(_epub(no_spine)) == (
        "not a valid EPUB file (its package file lists no chapters)"
    )
    without_container = {k: v for k, v in _BOOK.items() if k != "META-INF/container.xml"}
    assert _reason(_epub(without_container)) == (
        "not a valid EPUB file (META-INF/container.xml is missing)"
    )


def test_is_epub_reads_the_mimetype_member() -> None:
    odt = _epub(_BOOK, mimetype=b"application/vnd.oasis.opendocument.text")
    assert detect_kind(odt, "upload") is not DocumentKind.EPUB
    for data in (b"PK\x03\x04 broken", b"<html></html>"):
        with pytest.raises(UnsupportedDocumentType):
            detect_kind(data, "upload")


def test_chapter_with_a_plain_doctype_is_read() -> None:
    chapter = _CHAPTER_1.replace("<html", "<!DOCTYPE html>\n<html", 1)
    book = {**_BOOK, "OEBPS/text/chapter 1.xhtml": chapter}
    assert len(parse_epub(_epub(book), "fallback").pages) == 2
