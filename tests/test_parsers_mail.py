"""Mail (EML, MBOX, MSG): one page per message, attachments parsed after it, and limits."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from email.message import EmailMessage

import pytest

from retrieval.parsers import ParseError, mail, parse_document
from retrieval.parsers.mail import parse_eml, parse_mbox, parse_msg
from retrieval.parsers.signatures import is_msg as looks_like_msg
from retrieval.parsers.signatures import looks_like_eml, looks_like_mbox
from retrieval.types import DocumentKind, ParsedDocument


def _mail(subject: str, body: str = "Body text.", **headers: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = headers.get("sender", "Alice Example <alice@example.com>")
    message["To"] = headers.get("to", "Bob <bob@example.com>")
    if "cc" in headers:
        message["Cc"] = headers["cc"]
    message["Date"] = "Mon, 20 Jan 2025 10:00:00 +0100"
    message["Subject"] = subject
    message["Message-ID"] = f"<{abs(hash(subject))}@example.com>"
    message.set_content(body)
    return message


def _texts(document: ParsedDocument) -> list[str]:
    return [block.text for page in document.pages for block in page.blocks]


# --- EML ---------------------------------------------------------------------------------


def test_plain_message_is_a_page_with_subject_heading_headers_and_body() -> None:
    message = _mail("Budget 2025", "First paragraph.\n\nSecond paragraph.", cc="Carol <c@x.org>")
    document = parse_document(bytes(message), DocumentKind.EML, "budget.eml")

    assert document.title == "Budget 2025"
    (page,) = document.pages
    assert (page.number, page.label) == (1, "Message 1: Budget 2025")
    heading, headers, *body = page.blocks
    assert heading.text == "Budget 2025" and heading.is_heading
    assert headers.text == (
        "From: Alice Example <alice@example.com>\n"
        "To: Bob <bob@example.com>\n"
        "Cc: Carol <c@x.org>\n"
        "Date: Mon, 20 Jan 2025 10:00:00 +0100"
    )
    assert not headers.is_heading
    assert [block.text for block in body] == ["First paragraph.", "Second paragraph."]
    assert document.warnings == ()


def test_html_only_message_is_read_through_the_html_parser_without_scripts() -> None:
    message = _mail("Prices")
    message.set_content(
        "<html><head><script>alert('pwned')</script></head><body>"
        "<p>Our prices:</p><table><tr><th>Plan</th><th>Price</th></tr>"
        "<tr><td>Silver</td><td>500</td></tr></table></body></html>",
        subtype="html",
    )
    document = parse_eml(bytes(message), "prices")

    texts = _texts(document)
    assert "Our prices:" in texts
    assert any("Silver" in text and "500" in text for text in texts)
    assert not any("alert" in text or "pwned" in text for text in texts)


def test_plain_text_is_preferred_over_its_html_alternative() -> None:
    message = _mail("Both", "The plain version.")
    message.add_alternative("<p>The HTML version.</p>", subtype="html")
    texts = _texts(parse_eml(bytes(message), "both"))
    assert "The plain version." in texts
    assert not any("HTML version" in text for text in texts)


def _with_attachments() -> EmailMessage:
    inner = _mail("Inner note", "Deepest text.")
    middle = _mail("Middle note", "Middle text.")
    middle.add_attachment(inner, filename="inner.eml")
    outer = _mail("Outer note", "Outer text.")
    outer.add_attachment(
        b"plan,price\nSilver,500\nGold,900\n", maintype="text", subtype="csv", filename="prices.csv"
    )
    outer.add_attachment(middle, filename="fwd.eml")
    return outer


def test_attachments_are_parsed_recursively_after_their_message() -> None:
    document = parse_eml(bytes(_with_attachments()), "outer")

    assert [(page.number, page.label) for page in document.pages] == [
        (1, "Message 1: Outer note"),
        (2, "Message 1 › prices.csv"),
        (3, "Message 1 › fwd.eml, Message 1: Middle note"),
        (4, "Message 1 › fwd.eml, Message 1 › inner.eml"),
    ]
    outer, csv, middle, inner = document.pages
    assert "Outer text." in outer.text
    assert "Silver" in csv.text and "500" in csv.text
    assert middle.blocks[0].text == "Middle note" and "Middle text." in middle.text
    assert "Deepest text." in inner.text
    assert document.title == "Outer note"
    assert document.warnings == ()


def test_unsupported_and_broken_attachments_are_skipped_with_a_warning() -> None:
    message = _mail("Files")
    message.add_attachment(
        b"MZ\x90\x00" + bytes(range(256)),
        maintype="application",
        subtype="octet-stream",
        filename="setup.exe",
    )
    message.add_attachment(b"%PDF-1.7\n broken", maintype="application", subtype="pdf",
                           filename="broken.pdf")  # fmt: skip
    message.add_attachment(b"  ", maintype="text", subtype="plain", filename="blank.txt")
    document = parse_eml(bytes(message), "files")

    assert len(document.pages) == 1
    assert document.warnings[0] == "Message 1: attachment 'setup.exe' skipped (unsupported type)"
    assert document.warnings[1].startswith("Message 1: attachment 'broken.pdf' skipped (")
    assert document.warnings[2] == "Message 1: attachment 'blank.txt' skipped (the file is empty)"


def test_pictures_of_the_html_body_and_signatures_are_not_attachments() -> None:
    message = _mail("Signed")
    message.add_alternative('<p>See <img src="cid:logo@x"></p>', subtype="html")
    html = message.get_body(preferencelist=("html",))
    assert isinstance(html, EmailMessage)
    html.add_related(b"\x89PNG\r\n\x1a\n", maintype="image", subtype="png", cid="<logo@x>")
    message.add_attachment(
        b"signature", maintype="application", subtype="pkcs7-signature", filename="smime.p7s"
    )
    document = parse_eml(bytes(message), "signed")
    assert len(document.pages) == 1
    assert document.warnings == ()


def test_nameless_attachment_is_known_by_its_declared_type() -> None:
    message = _mail("Typed")
    message.add_attachment(b"plan,price\nSilver,500\n", maintype="text", subtype="csv")
    attachment = next(message.iter_attachments())
    attachment.replace_header("Content-Disposition", "attachment")  # no file name anywhere
    document = parse_eml(bytes(message), "typed")
    labels = [page.label for page in document.pages]
    assert labels == ["Message 1: Typed", "Message 1 › attachment 1"]
    assert "Silver" in document.pages[1].text


def test_encrypted_message_keeps_its_headers_and_says_so() -> None:
    data = (
        b"From: a@example.com\nTo: b@example.com\nSubject: Secret\nMIME-Version: 1.0\n"
        b'Content-Type: multipart/encrypted; protocol="application/pgp-encrypted"; boundary=b\n\n'
        b"--b\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n"
        b"--b\nContent-Type: application/octet-stream\n\n-----BEGIN PGP MESSAGE-----\n--b--\n"
    )
    document = parse_eml(data, "secret")
    assert [block.text for block in document.pages[0].blocks] == [
        "Secret",
        "From: a@example.com\nTo: b@example.com",
    ]
    assert document.warnings == ("Message 1: it is encrypted; only its headers were read",)


def test_latin1_subject_and_body_are_decoded() -> None:
    encoded = (
        b"From: =?iso-8859-1?q?Ren=E9?= <rene@example.fr>\r\n"
        b"To: bob@example.com\r\n"
        b"Subject: =?iso-8859-1?q?Caf=E9_cr=E8me?=\r\n"
        b"MIME-Version: 1.0\r\n"
        b"Content-Type: text/plain; charset=iso-8859-1\r\n"
        b"Content-Transfer-Encoding: 8bit\r\n\r\n"
        b"D\xe9j\xe0 vu.\r\n"
    )
    document = parse_eml(encoded, "cafe")
    assert document.title == "Café crème"
    assert document.pages[0].label == "Message 1: Café crème"
    assert document.pages[0].blocks[1].text.startswith("From: René <rene@example.fr>")
    assert "Déjà vu." in _texts(document)

    raw_8bit = b"From: a@example.com\nSubject: Caf\xe9 au lait\n\nBody\n"  # not RFC 2047
    assert parse_eml(raw_8bit, "raw").title == "Café au lait"

    for charset in (b"undefined", b"idna", b"no-such-charset", b"hex"):
        odd = b"Subject: x\nContent-Type: text/plain; charset=" + charset + b"\n\nCaf\xc3\xa9\n"
        assert _texts(parse_eml(odd, "odd"))[-1] == "Café"


def test_long_subject_is_cut_in_the_label_only() -> None:
    subject = "Quarterly " * 20
    document = parse_eml(bytes(_mail(subject)), "long")
    label = document.pages[0].label
    assert label.startswith("Message 1: Quarterly") and label.endswith("…")
    assert len(label) <= len("Message 1: ") + 80
    assert document.pages[0].blocks[0].text == subject.strip()


def test_message_without_subject_is_titled_by_its_file_name() -> None:
    document = parse_eml(b"From: a@example.com\nTo: b@example.com\n\nHello\n", "note")
    assert document.title == "note"
    assert document.pages[0].label == "Message 1"
    assert [b.text for b in document.pages[0].blocks] == [
        "From: a@example.com\nTo: b@example.com",
        "Hello",
    ]


# --- limits ------------------------------------------------------------------------------


def _nested(levels: int) -> EmailMessage:
    """A mail with ``levels`` mails attached inside each other, each saying its level."""
    message = _mail(f"Level {levels}", f"Text of level {levels}.")
    for level in range(levels - 1, -1, -1):
        outer = _mail(f"Level {level}", f"Text of level {level}.")
        outer.add_attachment(message, filename=f"level{level + 1}.eml")
        message = outer
    return message


def test_three_levels_of_attached_mail_are_read() -> None:
    document = parse_eml(bytes(_nested(3)), "nested")
    assert "Text of level 3." in "\n".join(_texts(document))
    assert document.warnings == ()


def test_a_fourth_level_of_attached_mail_is_not_opened() -> None:
    document = parse_eml(bytes(_nested(4)), "nested")
    text = "\n".join(_texts(document))
    assert "Text of level 3." in text and "Text of level 4." not in text
    (warning,) = document.warnings
    assert "1 attachment(s) not opened" in warning
    assert "nested more than 3 levels deep" in warning
    assert warning.startswith("Message 1 › level1.eml: Message 1 › level2.eml:")


def test_at_most_100_attachments_are_read() -> None:
    message = _mail("Many")
    for index in range(150):
        message.add_attachment(f"note {index}", filename=f"n{index}.txt")
    document = parse_eml(bytes(message), "many")
    assert len(document.pages) == 1 + 100
    assert document.pages[-1].label == "Message 1 › n99.txt"
    assert document.warnings == ("only the first 100 attachments were read; 50 more were skipped",)


def test_an_attachment_that_is_a_copy_of_an_ancestor_is_not_opened_again() -> None:
    inner = _mail("Inner", "Inner text.")
    outer = _mail("Outer")
    outer.add_attachment(bytes(inner), maintype="application", subtype="octet-stream",
                         filename="again.eml")  # fmt: skip
    # As if ``inner`` were the message around ``outer``: a loop.
    around = mail._Nesting((hashlib.sha256(bytes(inner)).hexdigest(),), mail._Budget())
    token = mail._NESTING.set(around)
    try:
        document = parse_eml(bytes(outer), "outer")
    finally:
        mail._NESTING.reset(token)
    assert len(document.pages) == 1
    assert document.warnings == (
        "Message 1: attachment 'again.eml' skipped (it is a copy of a message that contains it)",
    )


def test_deeply_nested_mime_fails_with_a_reason() -> None:
    data = b"Subject: x\nContent-Type: message/rfc822\n\n" * 2000 + b"Subject: end\n\nhi\n"
    with pytest.raises(ParseError, match="nested too deeply"):
        parse_document(data, DocumentKind.EML, "deep.eml")


# --- MBOX --------------------------------------------------------------------------------


def _mbox(messages: list[EmailMessage]) -> bytes:
    parts = []
    for message in messages:
        body = bytes(message).replace(b"\r\n", b"\n")
        escaped = b"\n".join(
            b">" + line if line.lstrip(b">").startswith(b"From ") else line
            for line in body.split(b"\n")
        )
        parts.append(b"From alice@example.com Mon Jan 20 10:00:00 2025\n" + escaped + b"\n")
    return b"\n".join(parts)


def test_mbox_messages_are_pages_and_from_lines_are_unescaped() -> None:
    data = _mbox(
        [
            _mail("One", "First message."),
            _mail("Two", "Hello\nFrom the start, we agreed.\n>From here on, quoted.\n"),
            _mail("Three", "Third message."),
        ]
    )
    assert b"\n>From the start" in data and b"\n>>From here" in data
    document = parse_document(data, DocumentKind.MBOX, "archive.mbox")
    assert [page.label for page in document.pages] == [
        "Message 1: One",
        "Message 2: Two",
        "Message 3: Three",
    ]
    assert [page.number for page in document.pages] == [1, 2, 3]
    assert document.title == "One"
    second = document.pages[1].text
    assert "From the start, we agreed." in second and "\n>From here on" in second
    assert "From alice@example.com Mon" not in "\n".join(_texts(document))


def test_mbox_with_attachments_labels_them_by_their_message() -> None:
    data = _mbox([_mail("Plain"), _with_attachments()])
    labels = [page.label for page in parse_mbox(data, "box").pages]
    assert labels[:3] == ["Message 1: Plain", "Message 2: Outer note", "Message 2 › prices.csv"]


def test_unreadable_message_of_a_mailbox_is_left_out_with_a_warning() -> None:
    deep = b"Subject: x\nContent-Type: message/rfc822\n\n" * 2000 + b"Subject: end\n\nhi\n"
    data = _mbox([_mail("One")]) + b"\nFrom x\n" + deep + b"\n" + _mbox([_mail("Three")])
    document = parse_mbox(data, "box")
    assert [page.label for page in document.pages] == [
        "Message 1: One",
        "Message 2",
        "Message 3: Three",
    ]
    assert document.warnings == ("Message 2: it could not be read (its MIME structure is broken)",)


def test_mbox_of_too_many_messages_is_refused() -> None:
    data = b"From x\nSubject: s\n\nb\n\n" * 10_001
    with pytest.raises(ParseError, match="more than 10,000 messages; split it"):
        parse_document(data, DocumentKind.MBOX, "huge.mbox")


# --- detection ---------------------------------------------------------------------------


def test_looks_like_eml_and_mbox() -> None:
    eml = bytes(_mail("Hi"))
    assert looks_like_eml(eml)
    assert looks_like_eml(b"Received: from x by y\n\tid 1\nSubject: s\nDate: d\n\nbody")
    assert not looks_like_mbox(eml)
    mbox = _mbox([_mail("Hi")])
    assert looks_like_mbox(mbox) and not looks_like_eml(mbox)

    markdown = b"From the CEO:\n\nWe had a great year.\nSubject: growth\nDate: today\n"
    assert not looks_like_eml(markdown) and not looks_like_mbox(markdown)
    assert not looks_like_mbox(b"From the CEO: we had a great year\nTo: all\n")
    assert not looks_like_eml(b"# Notes\n\nFrom: me\nTo: you\n")
    assert not looks_like_eml(b"Subject: only one known header\n\nbody")
    assert not looks_like_eml(b"plain words\n")


# --- MSG ---------------------------------------------------------------------------------

_FREE, _END, _FAT_SECTOR, _NO_STREAM = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF
Tree = dict[str, "bytes | Tree"]


class _Entry:
    def __init__(self, name: str, content: bytes | Tree):
        self.name = name
        self.data = content if isinstance(content, bytes) else None
        self.kids = [] if isinstance(content, bytes) else [_Entry(k, v) for k, v in content.items()]
        self.left = self.right = self.child = _NO_STREAM
        self.sid = 0
        self.start, self.size = _END, 0


def _compound_file(tree: Tree) -> bytes:
    """A minimal OLE compound file (version 3, 512-byte sectors) holding ``tree``: the
    writer olefile lacks. Streams under 4 KiB live in the mini stream, as the format says."""
    root = _Entry("Root Entry", tree)
    entries = list(_walk(root))
    for index, entry in enumerate(entries):
        entry.sid = index
    for entry in entries:
        entry.child = _balanced(sorted(entry.kids, key=lambda e: (len(e.name), e.name.upper())))
    mini, minifat, big = bytearray(), [], []
    for entry in entries[1:]:
        if entry.data is None or not entry.data:
            continue
        entry.size = len(entry.data)
        if entry.size < 4096:
            entry.start = len(mini) // 64
            count = -(-entry.size // 64)
            minifat += [*range(entry.start + 1, entry.start + count), _END]
            mini += entry.data.ljust(count * 64, b"\0")
        else:
            big.append(entry)
    directory = b"".join(_direntry(entry, entry is root) for entry in entries)
    chains = [directory.ljust(-(-len(directory) // 512) * 512, b"\0")]
    chains.append(b"".join(struct.pack("<I", n) for n in minifat))
    chains.append(bytes(mini))
    chains += [entry.data for entry in big]  # type: ignore[misc]
    chains = [chain.ljust(-(-len(chain) // 512) * 512, b"\0") for chain in chains]
    body_sectors = sum(len(chain) // 512 for chain in chains)
    fat_count = 1
    while fat_count * 128 < body_sectors + fat_count:
        fat_count += 1
    fat = [_FAT_SECTOR] * fat_count
    starts = []
    for chain in chains:
        count = len(chain) // 512
        starts.append(len(fat) if count else _END)
        fat += [*range(len(fat) + 1, len(fat) + count), _END] if count else []
    root.start, root.size = starts[2], len(mini)
    for entry, start in zip(big, starts[3:], strict=True):
        entry.start = start
    directory = b"".join(_direntry(entry, entry is root) for entry in entries)
    chains[0] = directory.ljust(len(chains[0]), b"\0")
    fat += [_FREE] * (fat_count * 128 - len(fat))
    header = struct.pack(
        "<8s16sHHHHH6sIIIIIIIII",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",
        bytes(16),
        0x3E,
        3,
        0xFFFE,
        9,
        6,
        bytes(6),
        0,
        fat_count,
        starts[0],
        0,
        4096,
        starts[1],
        len(chains[1]) // 512,
        _END,
        0,
    )
    difat = [*range(fat_count), *[_FREE] * (109 - fat_count)]
    header += b"".join(struct.pack("<I", n) for n in difat)
    return header + b"".join(struct.pack("<I", n) for n in fat) + b"".join(chains)


def _walk(entry: _Entry) -> Iterator[_Entry]:
    yield entry
    for kid in entry.kids:
        yield from _walk(kid)


def _balanced(kids: list[_Entry]) -> int:
    if not kids:
        return _NO_STREAM
    middle = len(kids) // 2
    kids[middle].left = _balanced(kids[:middle])
    kids[middle].right = _balanced(kids[middle + 1 :])
    return kids[middle].sid


def _direntry(entry: _Entry, is_root: bool) -> bytes:
    name = entry.name.encode("utf-16-le") + b"\0\0"
    kind = 5 if is_root else (2 if entry.data is not None else 1)
    return struct.pack(
        "<64sHBBIII16sIQQIQ",
        name,
        len(name),
        kind,
        1,  # black: every tree here is balanced, colours are not checked
        entry.left,
        entry.right,
        entry.child,
        bytes(16),
        0,
        0,
        0,
        entry.start,
        entry.size,
    )


def _unicode(text: str) -> bytes:
    return text.encode("utf-16-le") + b"\0\0"


def _properties(header: int, *entries: tuple[int, bytes]) -> bytes:
    return bytes(header) + b"".join(
        struct.pack("<II", tag, 6) + value.ljust(8, b"\0") for tag, value in entries
    )


_JAN_20_2025 = struct.pack("<q", (1737363600 + 11644473600) * 10_000_000)  # 09:00 UTC


def _msg_message(subject: str, body: str, header: int, attachments: list[Tree]) -> Tree:
    message: Tree = {
        "__properties_version1.0": _properties(header, (0x00390040, _JAN_20_2025)),
        "__substg1.0_0037001F": _unicode(subject),
        "__substg1.0_0C1A001F": _unicode("Alice Example"),
        "__substg1.0_0C1F001F": _unicode("alice@example.com"),
        "__substg1.0_0E04001F": _unicode("Bob"),
    }
    if body.startswith("<"):
        message["__substg1.0_10130102"] = body.encode()
    else:
        message["__substg1.0_1000001F"] = _unicode(body)
    for index, attachment in enumerate(attachments):
        message[f"__attach_version1.0_#{index:08X}"] = attachment
    return message


def _msg(attachments: list[Tree] | None = None, body: str = "Hello from Outlook.") -> bytes:
    return _compound_file(_msg_message("Quarterly plan", body, 32, attachments or []))


def _file_attachment(name: str, data: bytes) -> Tree:
    return {
        "__properties_version1.0": _properties(8, (0x37050003, struct.pack("<i", 1))),
        "__substg1.0_3707001F": _unicode(name),
        "__substg1.0_37010102": data,
    }


def test_msg_message_with_attachments() -> None:
    embedded: Tree = {
        "__properties_version1.0": _properties(8, (0x37050003, struct.pack("<i", 5))),
        "__substg1.0_3001001F": _unicode("Forwarded note"),
        "__substg1.0_3701000D": _msg_message("Forwarded note", "Inner words.", 24, []),
    }
    big_csv = b"plan,price\n" + b"".join(b"Plan%d,%d\n" % (i, i) for i in range(600))
    data = _msg([_file_attachment("prices.csv", big_csv), embedded])
    assert looks_like_msg(data) and not looks_like_eml(data)

    document = parse_document(data, DocumentKind.MSG, "plan.msg")
    assert document.title == "Quarterly plan"
    assert [page.label for page in document.pages] == [
        "Message 1: Quarterly plan",
        "Message 1 › prices.csv",
        "Message 1 › Forwarded note",
    ]
    first = document.pages[0]
    assert [block.text for block in first.blocks] == [
        "Quarterly plan",
        "From: Alice Example <alice@example.com>\nTo: Bob\nDate: Mon, 20 Jan 2025 09:00:00 +0000",
        "Hello from Outlook.",
    ]
    assert "Plan599" in document.pages[1].text  # a stream of regular sectors, not mini
    assert "Inner words." in document.pages[2].text
    assert document.warnings == ()


def test_msg_html_body_and_unsupported_attachment() -> None:
    html = "<p>Rates:</p><script>evil()</script><table><tr><td>Gold</td><td>900</td></tr></table>"
    data = _msg([_file_attachment("tool.exe", b"MZ\x00\x01" * 50)], body=html)
    document = parse_msg(data, "rates")
    texts = _texts(document)
    assert "Rates:" in texts and any("Gold" in t and "900" in t for t in texts)
    assert not any("evil" in t for t in texts)
    assert document.warnings == ("Message 1: attachment 'tool.exe' skipped (unsupported type)",)


def test_msg_8bit_strings_are_read_in_the_message_codepage() -> None:
    message = _msg_message("unused", "unused", 32, [])
    del message["__substg1.0_0037001F"], message["__substg1.0_1000001F"]
    message["__substg1.0_0037001E"] = "Отчёт".encode("cp1251") + b"\0"
    message["__substg1.0_1000001E"] = "Привет".encode("cp1251")
    message["__properties_version1.0"] = _properties(32, (0x3FFD0003, struct.pack("<i", 1251)))
    document = parse_msg(_compound_file(message), "x")
    assert document.title == "Отчёт"
    assert "Привет" in _texts(document)


def test_msg_that_is_not_one_fails_with_a_reason() -> None:
    with pytest.raises(ParseError, match="not an OLE compound file"):
        parse_document(b"just text", DocumentKind.MSG, "x.msg")
    word_like = _compound_file({"WordDocument": b"x" * 100})
    assert not looks_like_msg(word_like)
    with pytest.raises(ParseError, match="not an Outlook message"):
        parse_document(word_like, DocumentKind.MSG, "x.msg")
    damaged = _msg()[:700]
    with pytest.raises(ParseError, match="damaged"):
        parse_document(damaged, DocumentKind.MSG, "x.msg")


def test_eml_attachment_of_an_msg_is_parsed() -> None:
    data = _msg([_file_attachment("note.eml", bytes(_mail("Attached EML", "EML body.")))])
    document = parse_msg(data, "x")
    assert document.pages[1].label == "Message 1 › note.eml"
    assert "EML body." in document.pages[1].text
