"""The parser child process (see ``isolated.py``): frames in on stdin, JSON out on stdout."""

from __future__ import annotations

import json
import resource
import sys
from typing import IO

from retrieval.parsers import ParseError, parse_document
from retrieval.parsers.isolated import _LENGTH, encode
from retrieval.types import DocumentKind


def serve(memory_bytes: int) -> None:
    # A cap on the address space turns a decompression bomb into a MemoryError here.
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (header := _read_frame(stdin)) is not None:
        data = _read_frame(stdin) or b""
        request = json.loads(header)
        try:
            document = parse_document(data, DocumentKind(request["kind"]), request["filename"])
            reply = encode(document)
        except ParseError as exc:
            reply = {"error": exc.reason}
        payload = json.dumps(reply).encode()
        stdout.write(_LENGTH.pack(len(payload)) + payload)
        stdout.flush()


def _read_frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None  # the server closed the pipe: exit
    (length,) = _LENGTH.unpack(head)
    return stream.read(length)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
