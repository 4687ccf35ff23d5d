"""Parsing in a child process: a hostile file can cost a time budget, never the server.

Parser libraries are large C and Python code bases fed untrusted bytes. In a child
process, a file that spins, balloons or crashes the interpreter only loses that file:
the child is killed (time budget) or dies (memory cap), the document fails with a
reason, and a fresh child serves the next one. Messages are length-prefixed JSON and
raw bytes, never pickle, so even a compromised child cannot run code in the server.

OCR of scanned PDF pages takes seconds a page, more than a document's usual budget: the
child says how many pages it is about to read (``{"ocr_pages": n}``, once, before its
reply) and the budget grows by ``page_timeout_s`` for each, up to ``max_pages`` of them
and no more than the OCR's own budget per document (``OcrOptions.time_for``).
"""

from __future__ import annotations

import base64
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
from retrieval.parsers.ocr import OcrOptions
from retrieval.types import Block, Box, DocumentKind, ParsedDocument, ParsedPage, as_boxes

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">Q")
READY = b"ready"
MAX_TEXT_CHARS = 64 * 1024 * 1024  # extracted text per document
MAX_REPLY_BYTES = 4 * MAX_TEXT_CHARS + (1 << 20)  # JSON of that text, escapes included
START_TIMEOUT_S = 60.0


class ParserUnavailable(Exception):
    """The parser process cannot run (shut down, or failed to start); the file is not at fault."""


class IsolatedParser:
    """A few long-lived child processes that parse documents on request, each one at a time.

    Up to ``processes`` documents parse at once (the ingest worker runs as many parse
    slots), so a file that takes the whole time budget holds one child, not every
    upload. Children start when first needed; the memory cap applies to each.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 120.0,
        memory_bytes: int = 2 << 30,
        processes: int = 2,
        ocr: OcrOptions | None = None,
        ocr_on_request: OcrOptions | None = None,
    ):
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self.ocr = ocr  # None: scanned pages are not read (unless a parse asks for OCR)
        # How a parse that asks for OCR (a collection's switch) reads scanned pages when
        # the deployment's default is off; None: such a parse reads none either.
        self.ocr_on_request = ocr or ocr_on_request
        self.problem: str | None = None  # why a child cannot start, for health checks
        self._children = [_Child() for _ in range(max(1, processes))]
        self._idle = list(self._children)
        self._available = threading.Condition()
        self._closed = False

    def parse(self, data: bytes, kind: DocumentKind, filename: str) -> ParsedDocument:
        """Parse in a child. Raises ParseError (the file's fault) or ParserUnavailable."""
        reply = self._ask({"kind": kind.value, "filename": filename}, data)
        return _decode(reply)

    def parse_with_ocr(
        self, data: bytes, kind: DocumentKind, filename: str, ocr: bool
    ) -> ParsedDocument:
        """:meth:`parse` with OCR of scanned pages on or off for this file, whatever the
        default (a collection's switch: ``retrieval.collections``)."""
        reply = self._ask({"kind": kind.value, "filename": filename, "ocr": ocr}, data)
        return _decode(reply)

    def passage_boxes(self, data: bytes, passages: list[tuple[int, str]]) -> list[list[Box]]:
        """Where each (page, text) stands on its PDF page (page_boxes.passage_boxes), in a
        child. Raises ParseError or ParserUnavailable."""
        reply = self._ask({"op": "boxes", "passages": passages}, data)
        return [list(as_boxes(boxes)) for boxes in reply["boxes"]]

    def render_page(self, data: bytes, page: int, width_px: int) -> bytes:
        """PDF page ``page`` as a PNG (page_boxes.render_page), in a child. Raises
        ParseError (no such page, or unreadable) or ParserUnavailable."""
        reply = self._ask({"op": "render", "page": page, "width": width_px}, data)
        return base64.b64decode(reply["png"])

    def _ask(self, header: dict[str, Any], data: bytes) -> dict[str, Any]:
        child = self._acquire()
        try:
            reply = self._exchange(child, header, data)
        finally:
            with self._available:
                self._idle.append(child)
                self._available.notify()
        if "error" in reply:
            raise ParseError(str(reply["error"]))
        return reply

    def pids(self) -> list[int]:
        """Process ids of the children running now (for diagnostics and tests)."""
        return [c.process.pid for c in self._children if c.process is not None]

    def close(self) -> None:
        """Stop for good, at once: a parse in progress fails as ParserUnavailable."""
        with self._available:
            self._closed = True
            self._available.notify_all()
        for child in self._children:
            process = child.process
            if process is not None:
                process.kill()  # do not wait for a parse that may run for minutes

    def _acquire(self) -> _Child:
        with self._available:
            while not self._idle and not self._closed:
                self._available.wait()
            if self._closed:
                raise ParserUnavailable("the parser has been shut down")
            return self._idle.pop()  # the most recently used: warm, and the others may idle

    def _exchange(self, child: _Child, header: dict[str, Any], data: bytes) -> dict[str, Any]:
        process = self._ensure_started(child)
        assert process.stdin is not None and process.stdout is not None
        budget = self.timeout_s
        deadline = time.monotonic() + budget
        try:
            _write_frame(process.stdin, json.dumps(header).encode())
            _write_frame(process.stdin, data)
            reply: dict[str, Any] = json.loads(_read_frame(process.stdout, deadline))
            if "ocr_pages" in reply and self.ocr_on_request is not None:
                extra = self.ocr_on_request.time_for(int(reply["ocr_pages"]))
                budget += extra
                deadline += extra
                reply = json.loads(_read_frame(process.stdout, deadline))
            if "ocr_pages" in reply:
                raise ValueError("more time asked for twice, or without OCR")
        except TimeoutError:
            child.kill()
            raise ParseError(
                f"parsing took longer than {budget:.0f} s; the file was abandoned"
            ) from None
        except (OSError, EOFError, ValueError):
            child.kill()
            if self._closed:
                raise ParserUnavailable("the parser has been shut down") from None
            raise ParseError("the parser crashed on this file (too large or malformed)") from None
        return reply

    def _ensure_started(self, child: _Child) -> subprocess.Popen[bytes]:
        if self._closed:
            raise ParserUnavailable("the parser has been shut down")
        if child.process is not None and child.process.poll() is None:
            return child.process
        child.kill()
        try:
            process = child.start(
                self.memory_bytes,
                math.ceil(self.timeout_s) + 5,
                self.ocr_on_request,
                by_default=self.ocr is not None,
            )
        except (OSError, EOFError, ValueError, TimeoutError) as exc:
            child.kill()
            self.problem = f"the parser process does not start ({type(exc).__name__})"
            raise ParserUnavailable(self.problem) from exc
        self.problem = None
        if self._closed:  # closed while it started: close() may have missed it
            child.kill()
            raise ParserUnavailable("the parser has been shut down")
        return process


class _Child:
    """One child process, started on demand; its owner uses it from one thread at a time."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def start(
        self, memory_bytes: int, cpu_seconds: int, ocr: OcrOptions | None, *, by_default: bool
    ) -> subprocess.Popen[bytes]:
        encoded = encode_ocr(ocr)
        if encoded is not None and not by_default:
            encoded["by_default"] = False  # read scanned pages only when a parse asks
        limits = [str(memory_bytes), str(cpu_seconds), json.dumps(encoded)]
        process = subprocess.Popen(
            [sys.executable, "-m", "retrieval.parsers.child", *limits],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        self.process = process
        assert process.stdout is not None
        if _read_frame(process.stdout, time.monotonic() + START_TIMEOUT_S) != READY:
            raise ValueError("unexpected greeting")
        return process

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()


def encode_ocr(ocr: OcrOptions | None) -> dict[str, Any] | None:
    if ocr is None:
        return None
    return {
        "dpi": ocr.dpi,
        "threads": ocr.threads,
        "max_pages": ocr.max_pages,
        "page_timeout_s": ocr.page_timeout_s,
        "document_budget_s": ocr.document_budget_s,
    }


def encode(document: ParsedDocument) -> dict[str, Any]:
    return {
        "title": document.title,
        "pages": [
            {
                "number": page.number,
                "label": page.label,
                "blocks": [[b.text, b.is_heading, b.table] for b in page.blocks],
                "regions": [[start, end, list(box)] for start, end, box in page.regions],
            }
            for page in document.pages
        ],
        "warnings": list(document.warnings),
    }


def _decode(reply: dict[str, Any]) -> ParsedDocument:
    pages = tuple(
        ParsedPage(
            number=int(page["number"]),
            blocks=tuple(
                Block(str(text), bool(heading), None if table is None else str(table))
                for text, heading, table in page["blocks"]
            ),
            label=str(page.get("label", "")),
            regions=tuple(
                (int(start), int(end), as_boxes([box])[0])
                for start, end, box in page.get("regions", ())
            ),
        )
        for page in reply["pages"]
    )
    warnings = tuple(str(warning) for warning in reply.get("warnings", ()))
    return ParsedDocument(title=str(reply["title"]), pages=pages, warnings=warnings)


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
