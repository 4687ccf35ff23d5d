"""Parsing in a child process: same results, and hostile files cost only themselves."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from retrieval.parsers import ParseError, isolated, parse_document
from retrieval.parsers.isolated import IsolatedParser, ParserUnavailable
from retrieval.types import DocumentKind
from tests.documents import make_docx, make_pdf


class HalfSent:
    """Files of at least ``min_bytes`` are sent half-way, then held until ``release``: the
    child stays busy with them for as long as the test says, however fast this machine is."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, min_bytes: int = 1 << 20):
        self.halfway, self.release = threading.Event(), threading.Event()
        write_frame = isolated._write_frame

        def gated_write(stream: Any, payload: bytes) -> None:
            if len(payload) < min_bytes:
                return write_frame(stream, payload)
            stream.write(isolated._LENGTH.pack(len(payload)) + payload[: len(payload) // 2])
            stream.flush()
            self.halfway.set()
            self.release.wait(30)
            stream.write(payload[len(payload) // 2 :])
            stream.flush()

        monkeypatch.setattr(isolated, "_write_frame", gated_write)


@pytest.fixture
def parser() -> Iterator[IsolatedParser]:
    isolated = IsolatedParser(timeout_s=20)
    yield isolated
    isolated.close()


@pytest.mark.parametrize(
    ("data", "kind", "name"),
    [
        (make_pdf(["one", "two\nlines"], title="T"), DocumentKind.PDF, "a.pdf"),
        (make_docx([("h1", "Head"), ("p", "Body text")]), DocumentKind.DOCX, "b.docx"),
        ("# Título\n\nÜnïcode body".encode(), DocumentKind.MARKDOWN, "c.md"),
    ],
)
def test_child_results_equal_in_process_results(
    parser: IsolatedParser, data: bytes, kind: DocumentKind, name: str
) -> None:
    assert parser.parse(data, kind, name) == parse_document(data, kind, name)


def test_parse_errors_come_back_with_their_reason(parser: IsolatedParser) -> None:
    with pytest.raises(ParseError, match="empty"):
        parser.parse(b"", DocumentKind.TEXT, "empty.txt")
    assert parser.parse(b"still works", DocumentKind.TEXT, "ok.txt").pages  # same child


def test_a_file_over_the_time_budget_is_abandoned_and_the_next_one_parses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = HalfSent(monkeypatch)
    strict = IsolatedParser(timeout_s=0.05)
    try:
        # The budget runs from the moment the file is handed over; the gate holds it
        # past that, so the reply comes too late whatever the child's speed.
        threading.Timer(0.2, gate.release.set).start()
        with pytest.raises(ParseError, match="longer than"):
            strict.parse(b"word " * (1 << 20), DocumentKind.TEXT, "slow.txt")
        strict.timeout_s = 20
        assert strict.parse(b"next file", DocumentKind.TEXT, "next.txt").pages
    finally:
        gate.release.set()
        strict.close()


def test_memory_cap_turns_a_blow_up_into_a_failure() -> None:
    tiny = IsolatedParser(timeout_s=30, memory_bytes=400 << 20)
    try:
        with pytest.raises(ParseError):
            tiny.parse(b"x " * (60 << 20), DocumentKind.TEXT, "huge.txt")
        assert tiny.parse(b"small", DocumentKind.TEXT, "small.txt").pages
    finally:
        tiny.close()


def test_a_child_that_cannot_start_makes_the_parser_unavailable_not_the_file_bad(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    monkeypatch.setattr("sys.executable", "/bin/false")  # a broken installation
    starved = IsolatedParser(timeout_s=10)
    try:
        with pytest.raises(ParserUnavailable):
            starved.parse(b"fine text", DocumentKind.TEXT, "fine.txt")
        assert starved.problem is not None and "does not start" in starved.problem
    finally:
        starved.close()


def test_close_is_immediate_even_during_a_long_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = HalfSent(monkeypatch)
    parser = IsolatedParser(timeout_s=60)
    outcome: list[BaseException] = []

    def parse_big() -> None:
        try:
            parser.parse(b"word " * (1 << 20), DocumentKind.TEXT, "big.txt")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=parse_big)
    thread.start()
    assert gate.halfway.wait(30)  # the big file is in its child, which waits for the rest
    started = time.monotonic()
    parser.close()
    gate.release.set()
    thread.join(10)
    assert time.monotonic() - started < 2
    assert outcome and isinstance(outcome[0], ParserUnavailable)
    with pytest.raises(ParserUnavailable):
        parser.parse(b"after close", DocumentKind.TEXT, "x.txt")


def test_the_child_dies_with_the_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "server.py"
    script.write_text(
        "import os, signal, time\n"
        "from retrieval.parsers.isolated import IsolatedParser\n"
        "from retrieval.types import DocumentKind\n"
        "p = IsolatedParser(timeout_s=600)\n"
        "p.parse(b'warm up', DocumentKind.TEXT, 'a.txt')\n"
        "print(p.pids()[0], flush=True)\n"
        # Stopped, the child can neither finish nor notice anything: only the kernel's
        # parent-death signal can end it, however fast this machine is.
        "os.kill(p.pids()[0], signal.SIGSTOP)\n"
        "time.sleep(600)\n"
    )
    server = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert server.stdout is not None
    child_pid = int(server.stdout.readline())
    server.send_signal(signal.SIGKILL)
    server.wait()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if not _alive(child_pid):
            return
        time.sleep(0.05)
    pytest.fail("the parser child outlived the server")


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie not yet reaped by init."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_long_parse_holds_one_child_and_a_small_file_parses_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = HalfSent(monkeypatch)
    parser = IsolatedParser(timeout_s=60)  # two children by default
    long_one: list[object] = []

    def parse_big() -> None:
        try:
            long_one.append(parser.parse(b"word " * (1 << 20), DocumentKind.TEXT, "big.txt"))
        except BaseException as exc:  # closed below while still parsing
            long_one.append(exc)

    thread = threading.Thread(target=parse_big)
    try:
        parser.parse(b"warm up", DocumentKind.TEXT, "a.txt")
        thread.start()
        assert gate.halfway.wait(30)  # the big file is in its child
        assert parser.parse(b"small file", DocumentKind.TEXT, "small.txt").pages
        assert thread.is_alive() and not long_one  # still waiting on the big one
        assert len(parser.pids()) == 2
        gate.release.set()
        thread.join(30)
        assert [type(document).__name__ for document in long_one] == ["ParsedDocument"]
    finally:
        gate.release.set()
        parser.close()
        thread.join(10)
