"""Checks on a ZIP container (DOCX, PPTX, XLSX, ODF, EPUB) before any XML parser sees it:
bombs, DTDs and crafted part names.

The limits are set by what real documents need, so that a hostile file fails at once
with a reason instead of costing the parser's whole time budget and memory:

- A Word document is a few dozen parts (document, styles, numbering, headers and
  footers per section, footnotes, comments, theme, properties) plus one per image;
  2,000 parts leave room for a manual with well over a thousand pictures.
- Uploads are at most 50 MB and images are stored compressed already (about 1:1), so
  100 MiB expanded covers any genuine file under the upload limit.
- XML is what costs: python-docx builds a tree of every part and walks the document at
  about 1 MB/s, holding some 13 bytes of memory per byte of XML. A thousand pages of
  formatted text are 10 to 30 MB; 64 MiB took 58 s and 830 MB on a busy 2-core machine,
  inside the parser's default budget (120 s, 2 GiB). The 150 MB of a ratio-111 bomb
  took the whole budget.
- Word's XML deflates 5 to 30 times; past 100 times an expansion is filler (a bomb's
  zeros or repeated elements). The ratio only counts once a part or the archive expands
  beyond 8 MiB: a small file that compresses well harms nobody.
- Part names are plain relative paths. Nothing here extracts to disk, but a name that
  climbs out (``../``), starts at a root, or is a symbolic link is never made by Word:
  such a file is crafted, and is refused rather than parsed around.
"""

from __future__ import annotations

import io
import re
import stat
import zipfile

from retrieval.parsers.errors import ParseError

MAX_MEMBERS = 2_000
MAX_UNCOMPRESSED_BYTES = 100 << 20
MAX_XML_BYTES = 64 << 20
MAX_COMPRESSION_RATIO = 100
RATIO_FLOOR_BYTES = 8 << 20
_HEAD_BYTES = 64 * 1024  # a DTD can only come before the root element
_MB = 1 << 20


def check_archive(
    data: bytes,
    fmt: str = "DOCX",
    required: str = "word/document.xml",
    max_members: int = MAX_MEMBERS,
) -> None:
    """Raise ParseError, with the limit that was crossed, unless ``data`` is a sane ZIP
    container of format ``fmt`` (named in reasons) holding the part ``required``.

    The limits were set for Word's files (above); presentations, workbooks, ODF files and
    e-books are the same kind of container (XML parts beside compressed media). A format
    made of many small parts says how many it may have (a deck: four parts a slide with
    its notes); the sizes and ratios still bound what they expand to.
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ParseError(f"not a valid {fmt} file (the ZIP container is broken)") from exc
    with archive:
        members = archive.infolist()
        _check_declared_sizes(members, len(data), fmt, max_members)
        _check_names(members, fmt)
        if required not in archive.namelist():
            raise ParseError(f"not a valid {fmt} file ({required} is missing)")
        xml_bytes = 0
        for member in members:
            head = _as_utf8(_head_of(archive, member, fmt))
            if _declares_dtd(head):
                raise ParseError(f"the {fmt} contains XML entity declarations, refused")
            # By content, not by name: a relationship can make any part name the document.
            if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
                xml_bytes += member.file_size
        if xml_bytes > MAX_XML_BYTES:
            raise ParseError(
                f"the {fmt} holds {xml_bytes / _MB:,.0f} MB of XML; at most "
                f"{MAX_XML_BYTES // _MB} MB are accepted (possible ZIP bomb)"
            )


def _head_of(archive: zipfile.ZipFile, member: zipfile.ZipInfo, fmt: str) -> bytes:
    try:
        with archive.open(member) as part:
            return part.read(_HEAD_BYTES)
    except NotImplementedError as exc:  # an unknown compression (a RuntimeError too)
        raise ParseError(f"the {fmt} uses a ZIP compression this server cannot read") from exc
    except RuntimeError as exc:  # zipfile's word for a part encrypted with a password
        raise ParseError(
            f"the {fmt} is protected by a password; upload an unprotected copy"
        ) from exc
    except zipfile.BadZipFile as exc:
        raise ParseError(f"not a valid {fmt} file (a part is damaged: {exc})") from exc


def _check_names(members: list[zipfile.ZipInfo], fmt: str) -> None:
    for member in members:
        name = member.filename
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts:
            raise ParseError(f"the {fmt} has a part named outside the archive ({name[:100]!r})")
        if stat.S_ISLNK(member.external_attr >> 16):
            raise ParseError(f"the {fmt} has a part that is a symbolic link ({name[:100]!r})")


def _check_declared_sizes(
    members: list[zipfile.ZipInfo], size: int, fmt: str, max_members: int
) -> None:
    """Limits on the sizes the archive declares (zipfile never inflates past them)."""
    if len(members) > max_members:
        raise ParseError(
            f"the {fmt} has {len(members):,} parts; at most {max_members:,} are accepted "
            "(possible ZIP bomb)"
        )
    total = sum(member.file_size for member in members)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ParseError(
            f"the {fmt} expands to {total / _MB:,.0f} MB; at most "
            f"{MAX_UNCOMPRESSED_BYTES // _MB} MB are accepted (possible ZIP bomb)"
        )
    wholes = [(f"the {fmt}", total, size)]
    parts = [
        (f"the {fmt} part {m.filename[:100]!r}", m.file_size, m.compress_size) for m in members
    ]
    for what, expanded, compressed in wholes + parts:
        ratio = expanded / max(compressed, 1)
        if expanded > RATIO_FLOOR_BYTES and ratio > MAX_COMPRESSION_RATIO:
            raise ParseError(
                f"{what} expands {ratio:,.0f} times; at most {MAX_COMPRESSION_RATIO} "
                "times is accepted (possible ZIP bomb)"
            )


def _as_utf8(head: bytes) -> bytes:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 XML
        return head.decode("utf-16", errors="ignore").encode()
    return head


def _declares_dtd(head: bytes) -> bool:
    """Defence in depth (the XML parsers behind do not resolve entities either): entity
    declarations, or a DOCTYPE with an internal subset (``[ … ]``), where they live. A
    plain DOCTYPE declares nothing, and every EPUB chapter opens with one."""
    return b"<!ENTITY" in head.upper() or _INTERNAL_SUBSET.search(head) is not None


_INTERNAL_SUBSET = re.compile(rb"<!DOCTYPE[^>\[]*\[", re.IGNORECASE)
