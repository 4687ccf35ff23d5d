"""Grammar compiles under a deadline, in a bounded number of threads of their own.

llama.cpp compiles a GBNF grammar in C (``ragdesk_init_grammar``, GIL released), and its
time is not bounded by the grammar's size, which ``llm.engine.grammar`` bounds: 287
characters of nested optional rules (``r1 ::= r0 r0``, 18 deep) took 52 s of one core on
the development machine (the parser's initial stacks double with each level;
docs/BENCHMARKS.md). A thread in C cannot be stopped, so each compile runs in a thread of
its own and the caller waits for it at most ``timeout_s``:

- a compile that takes longer is refused as the request's own fault (``InvalidRequest``,
  400: its grammar is pathological; the same grammar would take as long again). It goes on
  in the background, holding its slot, and what it makes is freed when it ends;
- at most ``slots`` compiles run at once, so runaway compiles hold at most that many
  cores. While every slot is held, a new grammar waits for one at most ``timeout_s`` and
  is then refused as a capacity problem (``Overloaded``, 503 with ``Retry-After``: its
  grammar may be fine).

Requests without a grammar never come here, so they are never held up by one; nor do
the server's own grammars (the answer check's two words, ``CompletionRequest.own_grammar``):
they compile at once in the caller's thread, so runaway grammars in every slot cannot
hold up the second look.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import Generic, TypeVar, cast

from llm.params import InvalidRequest, Overloaded

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_SLOTS = 2


class GrammarCompiler:
    """Runs ``build`` (a grammar compile) under the deadline, at most ``slots`` at once."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, slots: int = DEFAULT_SLOTS):
        if timeout_s <= 0 or slots < 1:
            raise ValueError("a grammar compiler needs a positive timeout and a slot")
        self.timeout_s = timeout_s
        self.slots = slots
        self._free = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self._running = 0

    @property
    def running(self) -> int:
        """Compiles in progress, abandoned ones included."""
        with self._lock:
            return self._running

    def compile(
        self,
        build: Callable[[], T],
        discard: Callable[[T], None],
        *,
        done: Callable[[], None] | None = None,
    ) -> T:
        """What ``build`` returns, or its exception; ``Overloaded`` when no slot frees up
        within the deadline (``build`` is not called), ``InvalidRequest`` when ``build``
        does not end within it. ``discard`` frees what an abandoned ``build`` returns.
        ``done`` is called once: in the compiling thread when ``build`` (and any
        ``discard``) is over, whether or not anyone still waits; at once when ``build``
        never started."""
        if not self._free.acquire(timeout=self.timeout_s):
            if done is not None:
                done()
            raise Overloaded(
                f"all {self.slots} grammar compile slots are busy with earlier grammars "
                "that are slow to compile; try again shortly",
                retry_after_s=max(1, math.ceil(self.timeout_s)),
            )
        job = _Job(build, discard, done, self._ended)
        with self._lock:
            self._running += 1
        try:
            threading.Thread(target=job.run, name="ragdesk-grammar", daemon=True).start()
        except BaseException:
            job.abandon()
            self._ended()
            if done is not None:
                done()
            raise
        return job.result(self.timeout_s)

    def _ended(self) -> None:
        with self._lock:
            self._running -= 1
        self._free.release()


class _Job(Generic[T]):
    """One compile: its thread hands the result over, or frees it when nobody waits."""

    def __init__(
        self,
        build: Callable[[], T],
        discard: Callable[[T], None],
        done: Callable[[], None] | None,
        ended: Callable[[], None],
    ):
        self._build, self._discard, self._done, self._ended = build, discard, done, ended
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        value: T | None = None
        error: BaseException | None = None
        try:
            value = self._build()
        except BaseException as exc:  # handed to the caller, who raises it
            error = exc
        with self._lock:
            self._value, self._error = value, error
            abandoned = self._abandoned
            self._finished.set()
        try:
            if abandoned and error is None:
                self._discard(cast(T, value))
        except Exception:
            log.exception("freeing an abandoned grammar failed")
        finally:
            self._ended()  # the slot frees only now: the work is really over
            if self._done is not None:
                self._done()

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True

    def result(self, timeout_s: float) -> T:
        self._finished.wait(timeout_s)
        with self._lock:
            if not self._finished.is_set():
                self._abandoned = True
                raise InvalidRequest(
                    f"the grammar did not compile within {timeout_s:g} s (its rules are too "
                    "ambiguous: nested optional or repeated rules multiply the parser's "
                    "states); simplify it"
                )
        if self._error is not None:
            raise self._error
        return cast(T, self._value)
