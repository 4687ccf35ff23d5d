"""Parsing in a child process: a hostile file can cost a time budget, never the server.

Parser libraries are large C and Python code bases fed untrusted bytes. In a child
process, a file that spins, balloons or crashes the interpreter only loses that file:
the child is killed (time budget) or dies (memory cap), the document fails with a
reason, and a fresh child serves the next one. Messages are length-prefixed JSON and
raw bytes, never pickle, so even a compromised child cannot run code in the server.
"""

from __future__ import annotations

import json
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from typing import IO, Any

from retrieval.parsers.errors import ParseError
from retrieval.types import Block, DocumentKind, ParsedDocument, ParsedPage

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">Q")
MAX_RESPONSE_BYTES = 1 << 31


class IsolatedParser:
    """One long-lived child process that parses documents on request, one at a time."""

    def __init__(self, *, timeout_s: float = 120.0, memory_bytes: int = 2 << 30):
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def parse(self, data: bytes, kind: DocumentKind, filename: str) -> ParsedDocument:
        with self._lock:
            child = self._ensure_child()
            assert child.stdin is not None and child.stdout is not None
            header = json.dumps({"kind": kind.value, "filename": filename}).encode()
            deadline = time.monotonic() + self.timeout_s
            try:
                _write_frame(child.stdin, header)
                _write_frame(child.stdin, data)
                reply = json.loads(_read_frame(child.stdout, deadline))
            except TimeoutError:
                self._kill()
                raise ParseError(
                    f"parsing took longer than {self.timeout_s:.0f} s; the file was abandoned"
                ) from None
            except (OSError, EOFError, ValueError):
                self._kill()
                raise ParseError(
                    "the parser crashed on this file (too large or malformed)"
                ) from None
        if "error" in reply:
            raise ParseError(str(reply["error"]))
        return _decode(reply)

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _ensure_child(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "retrieval.parsers.child", str(self.memory_bytes)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
        return self._child

    def _kill(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            for pipe in (self._child.stdin, self._child.stdout):
                if pipe is not None:
                    pipe.close()
            self._child = None


def encode(document: ParsedDocument) -> dict[str, Any]:
    return {
        "title": document.title,
        "pages": [
            {"number": page.number, "blocks": [[b.text, b.is_heading] for b in page.blocks]}
            for page in document.pages
        ],
    }


def _decode(reply: dict[str, Any]) -> ParsedDocument:
    pages = tuple(
        ParsedPage(
            number=int(page["number"]),
            blocks=tuple(Block(str(text), bool(heading)) for text, heading in page["blocks"]),
        )
        for page in reply["pages"]
    )
    return ParsedDocument(title=str(reply["title"]), pages=pages)


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_LENGTH.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _read_frame(stream: IO[bytes], deadline: float) -> bytes:
    (length,) = _LENGTH.unpack(_read_exactly(stream, _LENGTH.size, deadline))
    if length > MAX_RESPONSE_BYTES:
        raise ValueError("reply too large")
    return _read_exactly(stream, length, deadline)


def _read_exactly(stream: IO[bytes], size: int, deadline: float) -> bytes:
    fd = stream.fileno()
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
