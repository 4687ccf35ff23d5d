"""EPUB e-books (EPUB 2 and 3): one page per chapter of the book's reading order.

The book is a ZIP: ``META-INF/container.xml`` names the package file (OPF), whose
manifest lists the book's files and whose spine gives the reading order. Each XHTML
document of the spine is a chapter, read by the project's HTML parser
(``retrieval/parsers/html.py``) and kept as a page labelled "Chapter n" (with its first
heading: "Chapter 3: The Harbour"). Chapters that yield no text (a cover picture, a blank
page) are no page, so the numbers stay consecutive. The title is the OPF's ``dc:title``.

Why no e-book library: ebooklib, the common one, is AGPL; the format needs only the
standard library's zipfile, defusedxml (already a dependency) for the three XML files read
here (container, package, encryption), and the HTML parser the project already has.
:func:`check_archive` refuses ZIP bombs, DTDs and crafted part names before anything is
parsed.

Refused with a reason: a book whose chapters are encrypted (``META-INF/encryption.xml``
listing them: DRM such as Adobe ADEPT or Apple FairPlay). Font obfuscation, which lists
only fonts there, is fine: fonts are not read.

Skipped with a warning: spine items missing from the book or from the manifest, and items
that are not XHTML (a picture, an SVG page, DTBook). Not read: the table of contents
(NCX), pictures, footnote pop-ups' targets outside the spine, scripts.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
import zlib
from dataclasses import dataclass
from urllib.parse import unquote
from xml.etree.ElementTree import Element
from xml.etree.ElementTree import ParseError as XmlParseError

import defusedxml
import defusedxml.ElementTree as SafeElementTree

from retrieval.parsers.errors import ParseError
from retrieval.parsers.html import parse_html
from retrieval.parsers.office_archive import check_archive
from retrieval.parsers.text import decode_text
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument, ParsedPage

MAX_LABEL_HEADING_CHARS = 80
MAX_NAMES_IN_WARNING = 5
_CONTAINER = "META-INF/container.xml"
_ENCRYPTION = "META-INF/encryption.xml"
_DC = "{http://purl.org/dc/elements/1.1/}"
_XHTML_TYPES = frozenset({"application/xhtml+xml", "text/html", "text/x-oeb1-document"})
_OPF_TYPE = "application/oebps-package+xml"
# An HTML parser reads "<title/>" (valid XHTML) as an open <title> whose text runs to the
# next "</title>": the chapter would vanish into it. The same holds for the other
# raw-text elements, so each self-closed one is written open and closed.
_SELF_CLOSED_RAW = re.compile(
    r"<(title|script|style|textarea|iframe|noscript|noembed|noframes|xmp)(\s[^<>]*)?/>", re.I
)
_ZIP_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error, RuntimeError)


def parse_epub(data: bytes, fallback_title: str) -> ParsedDocument:
    check_archive(data, "EPUB", _CONTAINER)  # bombs and DTDs before any XML is parsed
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        book = _Book(archive)
        package = book.package()
        pages = book.chapters(package)
    title = named_title(package.title) or next(
        (b.text for page in pages for b in page.blocks if _is_heading(b)), fallback_title
    )
    return ParsedDocument(title=title, pages=tuple(pages), warnings=tuple(book.warnings))


@dataclass(frozen=True)
class _Package:
    path: str
    title: str
    spine: tuple[str, ...]  # manifest ids in reading order
    manifest: dict[str, tuple[str, str]]  # id -> (path in the archive, media type)


class _Book:
    def __init__(self, archive: zipfile.ZipFile) -> None:
        self.archive = archive
        self.names = set(archive.namelist())
        # Books made on Windows sometimes differ from their manifest in letter case only.
        self.folded = {name.casefold(): name for name in self.names}
        self.warnings: list[str] = []

    def package(self) -> _Package:
        path = self._package_path()
        encrypted = self._encrypted_paths()
        if path in encrypted:
            raise _drm()
        root = self._xml(path, "its package file")
        manifest = _manifest(root, posixpath.dirname(path))
        spine = tuple(ref.get("idref") or "" for ref in root.iterfind("{*}spine/{*}itemref"))
        if not spine:
            raise ParseError("not a valid EPUB file (its package file lists no chapters)")
        chapters = {self._member(manifest[idref][0]) for idref in spine if idref in manifest}
        if chapters & encrypted:
            raise _drm()
        return _Package(path, _title(root), spine, manifest)

    def chapters(self, package: _Package) -> list[ParsedPage]:
        pages: list[ParsedPage] = []
        missing: list[str] = []
        not_xhtml: list[str] = []
        repeated: list[str] = []
        seen: set[str] = set()
        for idref in package.spine:
            path, media_type = package.manifest.get(idref, ("", ""))
            name = self._member(path) if path else None
            if name is None:
                missing.append(path or idref or "(no id)")
            elif media_type not in _XHTML_TYPES:
                not_xhtml.append(path)
            elif name in seen:  # read once: a spine naming a big chapter again and again
                repeated.append(path)
            elif blocks := self._chapter_blocks(name):
                pages.append(_page(len(pages) + 1, blocks))
            if name is not None:
                seen.add(name)
        self._warn(missing, "missing from the book")
        self._warn(not_xhtml, "not XHTML")
        self._warn(repeated, "listed twice")
        return pages

    def _package_path(self) -> str:
        root = self._xml(_CONTAINER, _CONTAINER)
        rootfiles = root.findall(".//{*}rootfile")
        # A book may offer several renditions; the OPF one is the book.
        rootfiles.sort(key=lambda e: (e.get("media-type") or _OPF_TYPE) != _OPF_TYPE)
        path = next((e.get("full-path") for e in rootfiles if e.get("full-path")), None)
        if not path:
            raise ParseError(f"not a valid EPUB file ({_CONTAINER} names no package file)")
        name = self._member(posixpath.normpath(path.lstrip("/")))
        if name is None:
            raise ParseError(f"not a valid EPUB file (its package file {path[:100]!r} is missing)")
        return name

    def _encrypted_paths(self) -> set[str]:
        """The files the book lists as encrypted (fonts, when only obfuscated: harmless,
        since only the package file and the chapters are read)."""
        if _ENCRYPTION not in self.names:
            return set()
        root = self._xml(_ENCRYPTION, _ENCRYPTION)
        paths = set()
        for reference in root.iterfind(".//{*}EncryptedData//{*}CipherReference"):
            uri = reference.get("URI") or ""
            path = self._member(_resolve("", uri))
            if path is not None:
                paths.add(path)
        return paths

    def _chapter_blocks(self, name: str) -> list[Block]:
        html = _SELF_CLOSED_RAW.sub(r"<\1\2></\1>", decode_text(self._read(name)))
        document = parse_html(html, "")
        return [block for page in document.pages for block in page.blocks]

    def _xml(self, name: str, what: str) -> Element:
        try:
            root: Element = SafeElementTree.fromstring(self._read(name))
        except (XmlParseError, defusedxml.DefusedXmlException) as exc:
            raise ParseError(f"not a valid EPUB file ({what} is not well-formed XML)") from exc
        return root

    def _read(self, name: str) -> bytes:
        try:
            return self.archive.read(name)
        except RuntimeError as exc:  # zipfile's "File is encrypted": a password-protected ZIP
            raise ParseError("the EPUB's files are password-protected") from exc
        except (NotImplementedError, *_ZIP_ERRORS) as exc:
            raise ParseError(f"not a valid EPUB file ({name[:100]!r} cannot be read)") from exc

    def _member(self, path: str) -> str | None:
        if path in self.names:
            return path
        return self.folded.get(path.casefold())

    def _warn(self, paths: list[str], why: str) -> None:
        if not paths:
            return
        shown = ", ".join(repr(p[:100]) for p in paths[:MAX_NAMES_IN_WARNING])
        extra = len(paths) - MAX_NAMES_IN_WARNING
        more = f" and {extra:,} more" if extra > 0 else ""
        count = f"{len(paths):,} item{'s' if len(paths) > 1 else ''}"
        self.warnings.append(f"{count} of the reading order skipped ({why}): {shown}{more}")


def _page(number: int, blocks: list[Block]) -> ParsedPage:
    heading = next((b.text for b in blocks if _is_heading(b)), "")
    if len(heading) > MAX_LABEL_HEADING_CHARS:
        heading = heading[: MAX_LABEL_HEADING_CHARS - 1].rstrip() + "…"
    label = f"Chapter {number}: {heading}" if heading else f"Chapter {number}"
    return ParsedPage(number=number, blocks=tuple(blocks), label=label)


def _title(package: Element) -> str:
    """The first non-empty ``dc:title`` (EPUB 3 may list a subtitle or a series after it)."""
    metadata = package.find("{*}metadata")
    titles = metadata.iterfind(f".//{_DC}title") if metadata is not None else iter(())
    return next((t for t in (_text(e) for e in titles) if t), "")


def _manifest(package: Element, base: str) -> dict[str, tuple[str, str]]:
    manifest = {}
    for item in package.iterfind("{*}manifest/{*}item"):
        item_id, href = item.get("id"), item.get("href")
        if item_id and href:
            media_type = (item.get("media-type") or "").split(";")[0].strip().lower()
            manifest[item_id] = (_resolve(base, href), media_type)
    return manifest


def _is_heading(block: Block) -> bool:
    return block.is_heading and block.table is None  # not a table's header row


def _resolve(base: str, href: str) -> str:
    """An href of the package (URL-encoded, relative to the package file) as an archive path."""
    path = unquote(href.split("#", 1)[0])
    return posixpath.normpath(posixpath.join(base, path)) if path else ""


def _text(element: Element) -> str:
    return " ".join("".join(element.itertext()).split())


def _drm() -> ParseError:
    return ParseError(
        "this e-book is protected by DRM (its chapters are encrypted); "
        "only EPUB files without copy protection can be read"
    )
