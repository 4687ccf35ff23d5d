"""Mail: RFC 5322 messages (.eml), mailboxes (.mbox) and Outlook messages (.msg).

Each message is a page labelled "Message n: <subject>": the subject as a heading, then a
paragraph of its From, To, Cc and Date headers, then its body (text/plain preferred;
otherwise the HTML body, read by :func:`retrieval.parsers.html.parse_html`, so scripts are
dropped and tables stay tables). Each attachment in a supported format is parsed as a
document of its own and its pages follow its message's page, labelled "Message n › <file
name>"; attachments of other types are skipped with a warning. Pictures embedded in an
HTML body (inline parts with a Content-ID) and signature parts are part of the message's
rendering, not attachments, and are left out silently.

Libraries, and why:

- EML and MBOX: the standard library's ``email`` package (policy ``default``), which
  decodes RFC 2047 headers, RFC 2231 file names and transfer encodings. An mbox is split
  here, from bytes, on ``From`` lines after a blank line (``mailbox.mbox`` wants a file
  on disk), and ``>From`` lines are unescaped (mboxo and mboxrd alike).
- MSG: olefile (BSD-2-Clause) reads the compound file; the MAPI property streams are
  decoded here (subject, sender, display To/Cc, body, HTML body, submit time,
  attachments, attached messages). extract-msg would do that too, but it is GPL-3.0.
  Bodies stored only as compressed RTF are not read (a warning says so).

Limits, each of which leaves a warning rather than failing the document:

- attachments are opened at most ``MAX_DEPTH`` (3) levels deep (a mail attached to a
  mail attached to a mail); the attachments of a deeper one are not opened;
- at most ``MAX_ATTACHMENTS`` (100) attachments per uploaded document, all levels
  together, since each may be a document as large as the upload;
- an attachment whose bytes are those of a message that contains it (a loop) is skipped;
- a message of a mailbox that the ``email`` package cannot read is left out.

An mbox of more than ``MAX_MBOX_MESSAGES`` (10,000) messages is refused, and so is an MSG
whose streams claim more bytes than the file holds (a crafted file whose sector chains
would make olefile read the same sectors over and over).
"""

from __future__ import annotations

import codecs
import hashlib
import io
import mimetypes
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import format_datetime
from pathlib import PurePath
from typing import Any

import olefile

from retrieval.parsers.errors import ParseError, UnsupportedDocumentType
from retrieval.parsers.html import parse_html
from retrieval.parsers.text import clean_text, paragraphs
from retrieval.types import Block, DocumentKind, ParsedDocument, ParsedPage

MAX_DEPTH = 3
MAX_ATTACHMENTS = 100
MAX_MBOX_MESSAGES = 10_000
LABEL_SUBJECT_CHARS = 80
MAX_HEADER_CHARS = 2_000  # a To: of a thousand recipients is cut
MAX_NAME_CHARS = 120

_MBOX_SEPARATOR = re.compile(rb"\n\r?\n(?=From )")
_MBOX_ESCAPED_FROM = re.compile(rb"^>(>*From )", re.M)
# Invisible and direction-changing characters: a label must read as what it is.
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_ENCRYPTED = frozenset(
    {"multipart/encrypted", "application/pkcs7-mime", "application/x-pkcs7-mime"}
)
_SIGNATURES = frozenset(
    {
        "application/pkcs7-signature",
        "application/x-pkcs7-signature",
        "application/pgp-signature",
    }
)
_ATTACHED_MESSAGES = frozenset({"message/rfc822", "message/global"})
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp"})


_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_PROPERTIES = "__properties_version1.0"


# --- nesting limits ----------------------------------------------------------------------


@dataclass
class _Budget:
    """Attachments still to be opened in the whole uploaded document, all levels together."""

    left: int = MAX_ATTACHMENTS
    skipped: int = 0


@dataclass(frozen=True)
class _Nesting:
    """The messages being parsed, outermost first, each by the sha256 of its bytes (or its
    place in an Outlook file), and the shared attachment budget."""

    ancestors: tuple[str, ...]
    budget: _Budget

    @property
    def depth(self) -> int:
        """How deep this message's attachments are (1: attached to the upload itself)."""
        return len(self.ancestors)


# parse_document calls a parser with (data, fallback_title) only; what an attachment's
# parse needs to know about the messages around it travels here instead.
_NESTING: ContextVar[_Nesting | None] = ContextVar("mail_nesting", default=None)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- the format-independent model and its pages ------------------------------------------


@dataclass(frozen=True)
class _Attachment:
    name: str
    key: str  # what a loop is recognised by: the sha256 of its bytes, or its place
    parse: Callable[[], ParsedDocument]


@dataclass
class _Message:
    subject: str
    headers: list[tuple[str, str]]
    body: list[Block]
    attachments: list[_Attachment] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def blocks(self) -> tuple[Block, ...]:
        blocks = [Block(self.subject, is_heading=True)] if self.subject else []
        if self.headers:
            blocks.append(Block("\n".join(f"{name}: {value}" for name, value in self.headers)))
        return (*blocks, *self.body)


def _parse_mail(
    key: str, fallback_title: str, messages: Callable[[], Iterable[_Message]]
) -> ParsedDocument:
    """The pages of ``messages`` and of their attachments, under the limits above."""
    outer = _NESTING.get()
    nesting = _Nesting(
        ancestors=(outer.ancestors if outer else ()) + (key,),
        budget=outer.budget if outer else _Budget(),
    )
    pages: list[ParsedPage] = []
    warnings: list[str] = []
    title = ""
    try:
        for number, message in enumerate(messages(), start=1):
            if number == 1:
                title = message.subject
            pages.append(ParsedPage(len(pages) + 1, message.blocks(), _label(number, message)))
            warnings += [f"Message {number}: {warning}" for warning in message.warnings]
            pages += _attachment_pages(number, message, nesting, warnings, len(pages))
    except RecursionError:
        raise ParseError("the message's parts are nested too deeply to read") from None
    if outer is None and nesting.budget.skipped:
        warnings.append(
            f"only the first {MAX_ATTACHMENTS} attachments were read; "
            f"{nesting.budget.skipped} more were skipped"
        )
    return ParsedDocument(title or fallback_title, tuple(pages), tuple(warnings))


def _label(number: int, message: _Message) -> str:
    if not message.subject:
        return f"Message {number}"
    return f"Message {number}: {_cut(message.subject, LABEL_SUBJECT_CHARS)}"


def _attachment_pages(
    number: int, message: _Message, nesting: _Nesting, warnings: list[str], before: int
) -> list[ParsedPage]:
    if message.attachments and nesting.depth > MAX_DEPTH:
        warnings.append(
            f"Message {number}: {len(message.attachments)} attachment(s) not opened "
            f"(attachments nested more than {MAX_DEPTH} levels deep are not read)"
        )
        return []
    pages: list[ParsedPage] = []
    for attachment in message.attachments:
        document = _open_attachment(number, attachment, nesting, warnings)
        if document is None:
            continue
        where = f"Message {number} › {attachment.name}"
        warnings += [f"{where}: {warning}" for warning in document.warnings]
        several = len(document.pages) > 1
        for page in document.pages:
            inner = page.label or f"page {page.number}"
            label = f"{where}, {inner}" if several else where
            pages.append(ParsedPage(before + len(pages) + 1, page.blocks, label))
    return pages


def _open_attachment(
    number: int, attachment: _Attachment, nesting: _Nesting, warnings: list[str]
) -> ParsedDocument | None:
    if nesting.budget.left <= 0:
        nesting.budget.skipped += 1
        return None
    nesting.budget.left -= 1
    skipped = f"Message {number}: attachment {attachment.name!r} skipped"
    if attachment.key in nesting.ancestors:
        warnings.append(f"{skipped} (it is a copy of a message that contains it)")
        return None
    token = _NESTING.set(nesting)
    try:
        document = attachment.parse()
    except UnsupportedDocumentType:
        warnings.append(f"{skipped} (unsupported type)")
        return None
    except ParseError as exc:
        warnings.append(f"{skipped} ({exc.reason})")
        return None
    finally:
        _NESTING.reset(token)
    if not any(page.blocks for page in document.pages):
        warnings.append(f"{skipped} (no text could be extracted)")
        return None
    return document


def _parse_blob(blob: bytes, name: str, kind: DocumentKind | None) -> ParsedDocument:
    # Imported here: the package loads this module (lazily, by name) to parse mail.
    from retrieval.parsers import detect_kind, parse_document

    return parse_document(blob, kind or detect_kind(blob, name), name)


def _blob_attachment(
    blob: bytes, name: str, kind: DocumentKind | None = None, typed: str = ""
) -> _Attachment:
    """An attachment parsed by its bytes and name; a name without an extension borrows
    one from its declared type (``typed``), since text formats are known by extension."""
    detect_as = name
    if typed and not PurePath(name).suffix:
        detect_as += mimetypes.guess_extension(typed.lower().strip()) or ""
    return _Attachment(name, _digest(blob), lambda: _parse_blob(blob, detect_as, kind))


def _one_line(text: str) -> str:
    return " ".join(_INVISIBLE.sub("", clean_text(text)).split())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _file_name(raw: str, fallback: str) -> str:
    """A file name fit for a label: its last path part, on one line, not too long."""
    name = _one_line(raw).replace("\\", "/").rsplit("/", 1)[-1].strip()
    return _cut(name, MAX_NAME_CHARS) if name else fallback


def _decode(data: bytes, charset: str | None) -> str:
    """Text in its declared charset, else UTF-8, else Windows-1252 (which never fails)."""
    if charset:
        try:
            return data.decode(charset, errors="replace")
        except (LookupError, UnicodeError):  # unknown, not text ("hex"), or "undefined"
            pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _html_blocks(html: str) -> list[Block]:
    document = parse_html(html, "")
    return [block for page in document.pages for block in page.blocks]


def _text_blocks(text: str) -> list[Block]:
    return paragraphs(clean_text(text))


# --- EML and MBOX ------------------------------------------------------------------------


def parse_eml(data: bytes, fallback_title: str) -> ParsedDocument:
    return _parse_mail(_digest(data), fallback_title, lambda: [_parse_rfc822(data)])


def parse_mbox(data: bytes, fallback_title: str) -> ParsedDocument:
    spans = _mbox_spans(data)
    return _parse_mail(
        _digest(data),
        fallback_title,
        lambda: (_mailbox_message(chunk) for chunk in _mbox_messages(data, spans)),
    )


def _mbox_spans(data: bytes) -> list[tuple[int, int]]:
    starts = [0]
    for separator in _MBOX_SEPARATOR.finditer(data):
        starts.append(separator.end())
        if len(starts) > MAX_MBOX_MESSAGES + 1:
            raise _too_many_messages()
    # Only what comes before the first "From " line may be blank (not a message).
    if len(starts) == MAX_MBOX_MESSAGES + 1 and data[: starts[1]].strip():
        raise _too_many_messages()
    return list(zip(starts, [*starts[1:], len(data)], strict=True))


def _too_many_messages() -> ParseError:
    return ParseError(
        f"the mailbox holds more than {MAX_MBOX_MESSAGES:,} messages; split it into smaller files"
    )


def _mbox_messages(data: bytes, spans: list[tuple[int, int]]) -> Iterator[bytes]:
    for start, end in spans:
        chunk = data[start:end]
        if chunk.startswith(b"From "):  # the envelope line is not part of the message
            newline = chunk.find(b"\n")
            chunk = chunk[newline + 1 :] if newline >= 0 else b""
        if chunk.strip():
            yield _MBOX_ESCAPED_FROM.sub(rb"\1", chunk)


def _mailbox_message(data: bytes) -> _Message:
    """A message of a mailbox; one the ``email`` package fails on is left out with a
    warning (its number kept), not the whole mailbox."""
    try:
        return _parse_rfc822(data)
    except Exception:  # RecursionError included: a MIME structure nested too deeply
        return _Message(
            "", [], [], warnings=["it could not be read (its MIME structure is broken)"]
        )


def _parse_rfc822(data: bytes) -> _Message:
    message = BytesParser(policy=policy.default).parsebytes(data)
    return _email_message(message)


def _email_message(message: Message) -> _Message:
    headers = [(name, _header(message, name)) for name in ("From", "To", "Cc", "Date")]
    parts = _Parts(message)
    body: list[Block] = []
    for part in parts.texts:
        body += _part_blocks(part)
    attachments = [
        _part_attachment(part, index) for index, part in enumerate(parts.attachments, start=1)
    ]
    warnings = ["it is encrypted; only its headers were read"] if parts.encrypted else []
    return _Message(
        subject=_header(message, "Subject"),
        headers=[(name, value) for name, value in headers if value],
        body=body,
        attachments=attachments,
        warnings=warnings,
    )


def _header(message: Message, name: str) -> str:
    raw = next((value for key, value in message.raw_items() if key.lower() == name.lower()), None)
    if raw is None:
        return ""
    if any("\udc80" <= char <= "\udcff" for char in raw):
        # Raw 8-bit bytes (no RFC 2047): the policy would show them as U+FFFD.
        text = _decode(raw.encode("ascii", "surrogateescape"), None)
    else:
        try:
            text = str(message.get(name))
        except Exception:  # the stdlib's header parser fails on some malformed values
            text = raw
    return _cut(_one_line(text), MAX_HEADER_CHARS)


class _Parts:
    """A message's parts sorted out: the body's text parts and the attachments.

    The body is the text/plain part the ``email`` package picks (else the HTML one, also
    when the plain one is blank); other inline text parts outside a multipart/alternative
    (a mailing list's footer) are body too. Alternatives of the body, pictures an HTML
    body shows (Content-ID), and signatures are neither.
    """

    def __init__(self, message: Message):
        self.texts: list[Message] = []
        self.attachments: list[Message] = []
        self.encrypted = False
        self._body = _body_part(message)
        self._visit(message, in_alternative=False)

    def _visit(self, part: Message, in_alternative: bool) -> None:
        content_type = part.get_content_type()
        if part is self._body:
            self.texts.append(part)
        elif content_type in _ATTACHED_MESSAGES:
            self.attachments.append(part)
        elif content_type in _ENCRYPTED:
            self.encrypted = True
        elif part.is_multipart():
            alternative = in_alternative or content_type == "multipart/alternative"
            for sub in part.get_payload():
                if isinstance(sub, Message):
                    self._visit(sub, alternative)
        elif content_type in _SIGNATURES or _is_body_picture(part):
            pass
        elif _file_name_of(part) or part.get_content_disposition() == "attachment":
            self.attachments.append(part)
        elif content_type in ("text/plain", "text/html"):
            if not in_alternative:
                self.texts.append(part)
        else:
            self.attachments.append(part)


def _body_part(message: Message) -> Message | None:
    if not isinstance(message, EmailMessage):
        return None
    body = message.get_body(preferencelist=("plain", "html"))
    if body is not None and body.get_content_subtype() == "plain" and not _part_text(body).strip():
        return message.get_body(preferencelist=("html",)) or body
    return body


def _is_body_picture(part: Message) -> bool:
    return (
        part.get_content_maintype() == "image"
        and part.get("Content-ID") is not None
        and part.get_content_disposition() != "attachment"
    )


def _file_name_of(part: Message) -> str:
    try:
        return part.get_filename() or ""
    except Exception:  # a malformed RFC 2231 parameter
        return ""


def _part_text(part: Message) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    return _decode(payload, part.get_content_charset())


def _part_blocks(part: Message) -> list[Block]:
    text = _part_text(part)
    return _html_blocks(text) if part.get_content_subtype() == "html" else _text_blocks(text)


def _part_attachment(part: Message, index: int) -> _Attachment:
    if part.get_content_type() in _ATTACHED_MESSAGES:
        name = _file_name(_file_name_of(part), "attached message")
        blob = _attached_message_bytes(part)
        if blob is None:
            return _Attachment(name, "", _unreadable("the attached message cannot be read"))
        return _blob_attachment(blob, name, DocumentKind.EML)
    name = _file_name(_file_name_of(part), f"attachment {index}")
    payload = part.get_payload(decode=True)
    blob = payload if isinstance(payload, bytes) else b""
    return _blob_attachment(blob, name, typed=part.get_content_type())


def _attached_message_bytes(part: Message) -> bytes | None:
    """A message/rfc822 part's message written back to bytes, to be parsed as a mail of
    its own: its loop check (by sha256) and limits are then those of an attached file."""
    payload = part.get_payload()
    inner = payload[0] if isinstance(payload, list) and payload else None
    if not isinstance(inner, Message):  # message/global, or a part left unparsed
        decoded = part.get_payload(decode=True)
        return decoded if isinstance(decoded, bytes) else None
    try:
        return inner.as_bytes(policy=policy.default)
    except Exception:  # the generator refuses some malformed messages
        return None


def _unreadable(reason: str) -> Callable[[], ParsedDocument]:
    def fail() -> ParsedDocument:
        raise ParseError(reason)

    return fail


# --- MSG ---------------------------------------------------------------------------------

_TOP_HEADER = 32  # the property stream's header: top-level message, attached one, others
_EMBEDDED_HEADER = 24
_OTHER_HEADER = 8
_ATTACH_PREFIX = "__attach_version1.0_#"
_RECIPIENT_PREFIX = "__recip_version1.0_#"
_ATTACHED_MESSAGE = "__substg1.0_3701000D"
_PT_LONG = 0x0003
_PT_SYSTIME = 0x0040
_SUBMIT_TIME = 0x0039
_DELIVERY_TIME = 0x0E06
_MESSAGE_CODEPAGE = 0x3FFD
_INTERNET_CODEPAGE = 0x3FDE
_RECIPIENT_TYPE = 0x0C15
_CODEPAGES = {
    65001: "utf-8",
    1200: "utf-16-le",
    20127: "ascii",
    50220: "iso2022_jp",
    51932: "euc_jp",
    52936: "hz",
    **{28590 + n: f"iso-8859-{n}" for n in range(1, 16)},
}
_FILETIME_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)


def parse_msg(data: bytes, fallback_title: str) -> ParsedDocument:
    ole = _open_ole(data)
    with ole:
        store = _MsgStore(ole, (), _TOP_HEADER, _digest(data))
        return _parse_mail(store.key, fallback_title, lambda: [_msg_message(store)])


def _open_ole(data: bytes) -> Any:
    if not data.startswith(_OLE_MAGIC):
        raise ParseError("not an Outlook message (.msg): the file is not an OLE compound file")
    try:
        # A file object, never the bytes: olefile takes bytes shorter than 1,536 for a path.
        ole = olefile.OleFileIO(io.BytesIO(data), raise_defects=olefile.DEFECT_INCORRECT)
    except RecursionError:
        raise ParseError("the Outlook message (.msg) is nested too deeply to read") from None
    except Exception as exc:  # olefile's many errors on a damaged container
        raise ParseError(
            "the Outlook message (.msg) is damaged: its compound file cannot be read"
        ) from exc
    if not ole.exists(_PROPERTIES):
        ole.close()
        raise ParseError(
            "this is an Office compound file but not an Outlook message (.msg): "
            "it has no message properties"
        )
    claimed = sum(
        entry.size
        for entry in ole.direntries
        if entry is not None and entry.entry_type == olefile.STGTY_STREAM
    )
    if claimed > len(data):
        ole.close()
        raise ParseError(
            "the Outlook message (.msg) is damaged or crafted: its parts claim more bytes "
            "than the file holds"
        )
    return ole


class _MsgStore:
    """One storage of an Outlook file that holds MAPI properties: the message itself, an
    attachment, a recipient, or an attached message."""

    def __init__(self, ole: Any, path: tuple[str, ...], header: int, key: str):
        self.ole = ole
        self.path = path
        self.key = key
        self.properties = self._properties(header)
        codepage = self.long(_MESSAGE_CODEPAGE) or self.long(_INTERNET_CODEPAGE)
        self.codepage = _codec(codepage)
        self.html_codepage = _codec(self.long(_INTERNET_CODEPAGE) or codepage)

    def stream(self, name: str) -> bytes | None:
        path = [*self.path, name]
        if self.ole.get_type(path) != olefile.STGTY_STREAM:
            return None  # absent (get_type answers False), or a storage
        try:
            data: bytes = self.ole.openstream(path).read()
        except Exception as exc:  # a broken sector chain
            raise ParseError(
                "the Outlook message (.msg) is damaged: one of its parts cannot be read"
            ) from exc
        return data

    def has_storage(self, name: str) -> bool:
        return bool(self.ole.get_type([*self.path, name]) == olefile.STGTY_STORAGE)

    def text(self, prop: int) -> str:
        """A string property: UTF-16 (type 001F), else 8-bit in the codepage (001E)."""
        unicode = self.stream(f"__substg1.0_{prop:04X}001F")
        if unicode is not None:
            return unicode.decode("utf-16-le", errors="replace").split("\x00", 1)[0]
        eight_bit = self.stream(f"__substg1.0_{prop:04X}001E")
        if eight_bit is not None:
            return _decode(eight_bit, self.codepage).split("\x00", 1)[0]
        return ""

    def binary(self, prop: int) -> bytes | None:
        return self.stream(f"__substg1.0_{prop:04X}0102")

    def long(self, prop: int) -> int:
        value = self.properties.get((prop << 16) | _PT_LONG)
        return int(struct.unpack_from("<i", value)[0]) if value else 0

    def time(self, *props: int) -> datetime | None:
        for prop in props:
            value = self.properties.get((prop << 16) | _PT_SYSTIME)
            if value:
                ticks = struct.unpack_from("<q", value)[0]
                try:
                    return _FILETIME_EPOCH + timedelta(microseconds=ticks // 10)
                except OverflowError:
                    continue
        return None

    def children(self, prefix: str) -> list[tuple[str, ...]]:
        """The storages right under this one whose names start with ``prefix``."""
        depth = len(self.path)
        found = {
            tuple(entry)
            for entry in self.ole.listdir(streams=False, storages=True)
            if len(entry) == depth + 1
            and tuple(entry[:depth]) == self.path
            and entry[depth].lower().startswith(prefix.lower())
        }
        return sorted(found)

    def _properties(self, header: int) -> dict[int, bytes]:
        raw = self.stream(_PROPERTIES) or b""
        properties = {}
        for offset in range(header, len(raw) - 15, 16):
            tag = struct.unpack_from("<I", raw, offset)[0]
            properties[tag] = raw[offset + 8 : offset + 16]
        return properties


def _codec(codepage: int) -> str | None:
    """Python's name for a Windows codepage number; None when unknown (then the text is
    tried as UTF-8, then as Windows-1252)."""
    if codepage <= 0:
        return None
    name = _CODEPAGES.get(codepage, f"cp{codepage}")
    try:
        codecs.lookup(name)
    except LookupError:
        return None
    return name


def _msg_message(store: _MsgStore) -> _Message:
    sent = store.time(_SUBMIT_TIME, _DELIVERY_TIME)
    to, cc = store.text(0x0E04), store.text(0x0E03)
    if not to and not cc:
        to, cc = _msg_recipients(store)
    headers = [
        ("From", _msg_sender(store)),
        ("To", to),
        ("Cc", cc),
        ("Date", format_datetime(sent) if sent else ""),
    ]
    message = _Message(
        subject=_one_line(store.text(0x0037)),
        headers=[(name, _cut(_one_line(value), MAX_HEADER_CHARS)) for name, value in headers],
        body=_msg_body(store),
    )
    message.headers = [(name, value) for name, value in message.headers if value]
    if not message.body and store.binary(0x1009) is not None:
        message.warnings.append("its body is stored only as compressed RTF, which is not read")
    for index, path in enumerate(store.children(_ATTACH_PREFIX), start=1):
        attachment = _msg_attachment(store, path, index, message.warnings)
        if attachment is not None:
            message.attachments.append(attachment)
    return message


def _msg_sender(store: _MsgStore) -> str:
    name = store.text(0x0C1A) or store.text(0x0042)
    address = store.text(0x5D01) or store.text(0x0C1F) or store.text(0x0065)
    if "@" not in address:  # an Exchange (X.500) address says nothing to a reader
        address = ""
    if name and address and name != address:
        return f"{name} <{address}>"
    return name or address


def _msg_recipients(store: _MsgStore) -> tuple[str, str]:
    to: list[str] = []
    cc: list[str] = []
    for path in store.children(_RECIPIENT_PREFIX):
        recipient = _MsgStore(store.ole, path, _OTHER_HEADER, store.key)
        name = recipient.text(0x3001)
        address = recipient.text(0x39FE) or recipient.text(0x3003)
        shown = f"{name} <{address}>" if name and "@" in address and name != address else name
        kind = recipient.long(_RECIPIENT_TYPE)
        if shown and kind in (0, 1):
            to.append(shown)
        elif shown and kind == 2:
            cc.append(shown)
    return ", ".join(to), ", ".join(cc)


def _msg_body(store: _MsgStore) -> list[Block]:
    text = store.text(0x1000)
    if text.strip():
        return _text_blocks(text)
    html = store.binary(0x1013)
    if html is not None:
        return _html_blocks(_decode(html, store.html_codepage))
    unicode_html = store.text(0x1013)
    return _html_blocks(unicode_html) if unicode_html else []


def _msg_attachment(
    store: _MsgStore, path: tuple[str, ...], index: int, warnings: list[str]
) -> _Attachment | None:
    attachment = _MsgStore(store.ole, path, _OTHER_HEADER, store.key)
    raw_name = attachment.text(0x3707) or attachment.text(0x3704) or attachment.text(0x3001)
    name = _file_name(raw_name, f"attachment {index}")
    if attachment.text(0x3712) and _is_picture(name, attachment.text(0x370E)):
        return None  # a picture the HTML body shows (it has a Content-ID)
    if attachment.has_storage(_ATTACHED_MESSAGE):
        inner = (*path, _ATTACHED_MESSAGE)
        if store.ole.get_type([*inner, _PROPERTIES]) != olefile.STGTY_STREAM:
            warnings.append(f"attachment {name!r} skipped (an embedded OLE object, not read)")
            return None
        key = f"{store.key}/{'/'.join(inner)}"
        return _Attachment(name, key, lambda: _attached_msg(store.ole, inner, key, name))
    data = attachment.binary(0x3701)
    if data is None:
        warnings.append(f"attachment {name!r} skipped (it holds no data)")
        return None
    return _blob_attachment(data, name, typed=attachment.text(0x370E))


def _is_picture(name: str, mime_type: str) -> bool:
    return mime_type.lower().startswith("image/") or PurePath(name).suffix.lower() in (
        _IMAGE_SUFFIXES
    )


def _attached_msg(ole: Any, path: tuple[str, ...], key: str, name: str) -> ParsedDocument:
    store = _MsgStore(ole, path, _EMBEDDED_HEADER, key)
    return _parse_mail(key, PurePath(name).stem or name, lambda: [_msg_message(store)])
