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
import math
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
READY = b"ready"
MAX_TEXT_CHARS = 64 * 1024 * 1024  # extracted text per document
MAX_REPLY_BYTES = 4 * MAX_TEXT_CHARS + (1 << 20)  # JSON of that text, escapes included
START_TIMEOUT_S = 60.0


class ParserUnavailable(Exception):
    """The parser process cannot run (shut down, or failed to start); the file is not at fault."""


class IsolatedParser:
    """One long-lived child process that parses documents on request, one at a time."""

    def __init__(self, *, timeout_s: float = 120.0, memory_bytes: int = 2 << 30):
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self.problem: str | None = None  # why the child cannot start, for health checks
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False

    def parse(self, data: bytes, kind: DocumentKind, filename: str) -> ParsedDocument:
        """Parse in the child. Raises ParseError (the file's fault) or ParserUnavailable."""
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
                if self._closed:
                    raise ParserUnavailable("the parser has been shut down") from None
                raise ParseError(
                    "the parser crashed on this file (too large or malformed)"
                ) from None
        if "error" in reply:
            raise ParseError(str(reply["error"]))
        return _decode(reply)

    def close(self) -> None:
        """Stop for good, at once: a parse in progress fails as ParserUnavailable."""
        self._closed = True
        child = self._child
        if child is not None:
            child.kill()  # no lock: do not wait for a parse that may run for minutes

    def _ensure_child(self) -> subprocess.Popen[bytes]:
        if self._closed:
            raise ParserUnavailable("the parser has been shut down")
        if self._child is not None and self._child.poll() is None:
            return self._child
        self._kill()
        cpu_seconds = str(math.ceil(self.timeout_s) + 5)
        child = subprocess.Popen(
            [sys.executable, "-m", "retrieval.parsers.child", str(self.memory_bytes), cpu_seconds],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        self._child = child
        assert child.stdout is not None
        try:
            if _read_frame(child.stdout, time.monotonic() + START_TIMEOUT_S) != READY:
                raise ValueError("unexpected greeting")
        except (OSError, EOFError, ValueError, TimeoutError) as exc:
            self._kill()
            self.problem = f"the parser process does not start ({type(exc).__name__})"
            raise ParserUnavailable(self.problem) from exc
        self.problem = None
        return child

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
    if length > MAX_REPLY_BYTES:
        raise ValueError("reply too large")
    return _read_exactly(stream, length, deadline)


def _read_exactly(stream: IO[bytes], size: int, deadline: float) -> bytes:
    fd = stream.fileno()
    readable = select.poll()  # not select(): it fails for descriptors above 1023
    readable.register(fd, select.POLLIN | select.POLLHUP)
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        wait = deadline - time.monotonic()
        if wait <= 0 or not readable.poll(wait * 1000):
            raise TimeoutError
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
