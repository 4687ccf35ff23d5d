"""Signatures of mail: Outlook items among Compound Files, and the header lines of a
saved mail or mailbox (images: ``retrieval/parsers/image.py``).

Cheap tests on the first bytes, with no parser library imported: the server checks every
upload with them before it is stored (``detect_kind``).
"""

from __future__ import annotations

import re

# An Outlook item keeps its properties in streams named like this (MS-OXMSG 2.1).
_MSG_STREAMS = (b"_\x00_\x00s\x00u\x00b\x00s\x00t\x00g\x001\x00.\x000\x00_\x00",)
_MSG_PROPERTIES = "__properties_version1.0".encode("utf-16-le")
# A header field of RFC 5322: a name of printable ASCII without a colon, then a colon.
_FIELD = re.compile(rb"([!-9;-~]{1,76}):[ \t]?")
_MAIL_FIELDS = frozenset(
    {
        b"from",
        b"to",
        b"cc",
        b"subject",
        b"date",
        b"message-id",
        b"mime-version",
        b"received",
        b"return-path",
        b"reply-to",
        b"in-reply-to",
        b"references",
        b"content-type",
        b"delivered-to",
        b"x-mailer",
    }
)
_MBOX_FROM = re.compile(rb"From \S+ .{10,80}\r?\n")


def is_msg(data: bytes) -> bool:
    """Whether a Compound File holds an Outlook item (its directory names the property
    streams and storages of MS-OXMSG), not a Word or Excel file or an encrypted package."""
    window = data[: 1 << 20]
    return _MSG_PROPERTIES in window or any(name in window for name in _MSG_STREAMS)


def looks_like_eml(head: bytes) -> bool:
    """A saved mail: it opens with header lines, at least three of them mail's own fields
    (From, To, Subject, Date, Message-ID, Received …), before the first blank line. A
    Markdown note that starts "From the CEO:" has one such line at most."""
    return _mail_fields(head) >= 3


def looks_like_mbox(head: bytes) -> bool:
    """An mbox: a "From sender date" separator line, then a mail's header lines."""
    match = _MBOX_FROM.match(head)
    return match is not None and _mail_fields(head[match.end() :]) >= 2


def _mail_fields(head: bytes) -> int:
    seen: set[bytes] = set()
    for line in head.split(b"\n")[:200]:
        line = line.rstrip(b"\r")
        if not line:
            break  # the blank line that ends the header
        if line[:1] in (b" ", b"\t"):
            continue  # a folded continuation of the field above
        match = _FIELD.match(line)
        if match is None:
            return 0  # not a header line: this is not a mail's header
        name = match.group(1).lower()
        if name in _MAIL_FIELDS:
            seen.add(name)
    return len(seen)
