"""The parser child process (see ``isolated.py``): frames in on stdin, JSON out on stdout."""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import math
import os
import resource
import signal
import sys
from typing import IO, Any

from retrieval.parsers import OcrOptions, ParseError, parse_document
from retrieval.parsers.image import is_image, render_image
from retrieval.parsers.isolated import _LENGTH, MAX_TEXT_CHARS, READY, encode
from retrieval.parsers.page_boxes import passage_boxes, render_page
from retrieval.types import DocumentKind

_PR_SET_PDEATHSIG = 1


def serve(memory_bytes: int, cpu_seconds: int, ocr_settings: dict[str, Any] | None) -> None:
    _die_with_parent()
    # A cap on the address space turns a decompression bomb into a MemoryError here.
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    stdin, stdout = sys.stdin.buffer, _frames_out()
    by_default = bool((ocr_settings or {}).pop("by_default", True))
    ocr = _ocr_options(ocr_settings, stdout, cpu_seconds)
    _write(stdout, READY)  # imports done: the parent knows the child can work
    while (header := _read_frame(stdin)) is not None:
        data = _read_frame(stdin) or b""
        _limit_cpu(cpu_seconds)  # a spinning parse is killed even if nobody is watching
        request = json.loads(header)
        if request.get("op") in ("boxes", "render"):
            _write(stdout, json.dumps(_page_work(request, data)).encode())
            continue
        try:
            # A collection's switch ("ocr") overrides the deployment's default for its files;
            # a picture is always read (OCR is all there is to it), with the options it has.
            kind = DocumentKind(request["kind"])
            reads_scans = request.get("ocr", by_default) is True or kind is DocumentKind.IMAGE
            document = parse_document(
                data, kind, request["filename"], ocr=ocr if reads_scans else None
            )
            if sum(len(b.text) for page in document.pages for b in page.blocks) > MAX_TEXT_CHARS:
                raise ParseError(f"the document holds more than {MAX_TEXT_CHARS:,} characters")
            reply = encode(document)
        except ParseError as exc:
            reply = {"error": exc.reason}
        _write(stdout, json.dumps(reply).encode())


def _page_work(request: dict[str, Any], data: bytes) -> dict[str, Any]:
    """Boxes of passages on their PDF pages, or a page of a PDF (retrieval.parsers.page_boxes)
    or a picture (retrieval.parsers.image) drawn."""
    try:
        if request["op"] == "boxes":
            passages = [(int(page), str(text)) for page, text in request["passages"]]
            return {"boxes": passage_boxes(data, passages)}
        render = render_image if is_image(data[:16]) else render_page
        png = render(data, int(request["page"]), int(request["width"]))
        return {"png": base64.b64encode(png).decode()}
    except (IndexError, ParseError) as exc:
        return {"error": str(exc)}
    except Exception as exc:  # a PDF pdfium cannot read: the caller shows the text only
        return {"error": f"the page could not be read ({type(exc).__name__})"}


def _frames_out() -> IO[bytes]:
    """Replies go to a copy of stdout; stdout itself then points at stderr, so nothing a
    library prints (ONNX Runtime and OpenCV write from C) can corrupt a frame."""
    frames = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return frames


def _ocr_options(
    settings: dict[str, Any] | None, stdout: IO[bytes], cpu_seconds: int
) -> OcrOptions | None:
    if settings is None:
        return None
    options = OcrOptions(**settings)

    def ask_for_time(pages: int) -> None:
        # The server extends the wall-clock budget; the CPU cap grows with it (all threads).
        extra = options.time_for(pages) * options.threads
        _limit_cpu(cpu_seconds + math.ceil(extra))
        _write(stdout, json.dumps({"ocr_pages": pages}).encode())

    return OcrOptions(**settings, before_ocr=ask_for_time)


def _die_with_parent() -> None:
    """Linux: the kernel kills this process if the server dies, even mid-parse."""
    # Not Linux: no prctl; the closed stdin pipe ends the child once it reads again.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _limit_cpu(seconds: int) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = int(usage.ru_utime + usage.ru_stime) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = used + seconds
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard < 0 else min(soft, hard), hard))


def _write(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_LENGTH.pack(len(payload)) + payload)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None  # the server closed the pipe: exit
    (length,) = _LENGTH.unpack(head)
    return stream.read(length)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]))
