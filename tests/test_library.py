"""Accepting uploads: display names, durability on disk, duplicates, deletes."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.library import MAX_FILENAME_CHARS, display_filename
from retrieval.parsers import UnsupportedDocumentType
from tests.retrieval_kit import make_kit


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\report.pdf", "report.pdf"),
        ("a\x00b\x07c\u0085.txt", "abc.txt"),
        ("<b>Q&A</b>.md", "b>.md"),  # '/' always separates directories
        ("  .hidden.md ", "hidden.md"),
        ("", "upload"),
        (None, "upload"),
        ("/", "upload"),
        ("Cafe\u0301.txt", "Café.txt"),  # NFC: one form per name
    ],
)
def test_display_filename(raw: str | None, shown: str) -> None:
    assert display_filename(raw) == shown


def test_long_names_keep_their_extension() -> None:
    name = display_filename("x" * 500 + ".docx")
    assert len(name) == MAX_FILENAME_CHARS and name.endswith(".docx")


def test_upload_is_stored_under_its_hash_and_deduplicated(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    first, created = kit.library.submit(data=b"same bytes", filename="a.txt", collection_id=1)
    again, created_again = kit.library.submit(data=b"same bytes", filename="b.txt", collection_id=1)
    assert created and not created_again and again.id == first.id
    path = kit.library.files.path(first.stored_name)
    assert path.read_bytes() == b"same bytes"
    assert path.name == first.content_hash


def test_unsupported_upload_writes_nothing(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    with pytest.raises(UnsupportedDocumentType):
        kit.library.submit(data=b"\x7fELF\x00\x00binary", filename="a.out", collection_id=1)
    assert kit.store.list_documents() == []
    assert not any(p.is_file() for p in kit.library.files.directory.rglob("*"))


def test_stored_names_must_be_hashes(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    with pytest.raises(ValueError):
        kit.library.files.path("../../etc/passwd")
