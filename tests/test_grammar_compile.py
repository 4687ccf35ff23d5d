"""Grammar compiles have a deadline and a bounded number of threads (N1, issue #30).

A compile runs in C and cannot be stopped: 287 characters of nested optional GBNF rules
took 52 s (docs/BENCHMARKS.md). Every compile here is a fake that blocks on an event, so
the tests assert order and bounds, never how fast the machine is: a compile that has not
ended cannot have ended before its deadline, and a slot that has not been freed cannot
be taken.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from litestar.testing import TestClient

from llm.answer_check import check_request
from llm.engine.engine import Engine, EngineConfig
from llm.engine.grammar_compile import GrammarCompiler
from llm.params import CompletionRequest, InvalidRequest, Overloaded, SamplingParams
from tests.conftest import fake_model, wait_for
from tests.test_answer_check import HOURS, chatml

SHORT = 0.05  # a deadline the blocked fake compiles below can never meet, however fast
LONG = 30.0  # a deadline nothing below waits out


@dataclass
class SlowCompile:
    """A compile that runs until ``release`` is set; records what it made and freed."""

    release: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    made: list[object] = field(default_factory=list)
    freed: list[object] = field(default_factory=list)

    def build(self) -> object:
        self.started.set()
        assert self.release.wait(LONG), "the test never released the compile"
        value = object()
        self.made.append(value)
        return value

    def discard(self, value: object) -> None:
        self.freed.append(value)


def test_n1_a_compile_past_its_deadline_is_a_400_and_what_it_makes_is_freed_later() -> None:
    compiler = GrammarCompiler(timeout_s=SHORT, slots=1)
    slow = SlowCompile()
    with pytest.raises(InvalidRequest, match="did not compile within") as refused:
        compiler.compile(slow.build, slow.discard)
    assert refused.value.status == 400
    assert slow.started.wait(LONG) and not slow.made  # refused while it still ran
    assert compiler.running == 1  # the runaway holds its slot
    slow.release.set()
    wait_for(lambda: compiler.running == 0)
    assert slow.freed == slow.made and len(slow.made) == 1  # nobody took it: freed


def test_n1_while_every_slot_is_held_a_new_grammar_gets_503_and_never_compiles() -> None:
    compiler = GrammarCompiler(timeout_s=SHORT, slots=1)
    runaway = SlowCompile()
    with pytest.raises(InvalidRequest):
        compiler.compile(runaway.build, runaway.discard)
    second = SlowCompile()
    second.release.set()
    with pytest.raises(Overloaded, match="grammar compile slots are busy") as busy:
        compiler.compile(second.build, second.discard)
    assert busy.value.status == 503 and busy.value.retry_after_s >= 1
    assert not second.started.is_set()  # refused before any work
    runaway.release.set()
    wait_for(lambda: compiler.running == 0)
    compiler.timeout_s = LONG  # what follows must succeed, however loaded the machine
    assert compiler.compile(second.build, second.discard) is second.made[0]
    assert second.freed == []  # taken by its caller, not freed


def test_n1_compiles_never_run_more_at_once_than_the_slots() -> None:
    compiler = GrammarCompiler(timeout_s=LONG, slots=2)
    lock = threading.Lock()
    running, most = [0], [0]
    gate = threading.Event()

    def build() -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        gate.wait(LONG)
        with lock:
            running[0] -= 1
        return 1

    results: list[int] = []
    callers = [
        threading.Thread(target=lambda: results.append(compiler.compile(build, print)))
        for _ in range(6)
    ]
    for caller in callers:
        caller.start()
    wait_for(lambda: running[0] == 2)  # two run; the other four wait for a slot
    assert compiler.running == 2
    gate.set()
    for caller in callers:
        caller.join(LONG)
    assert results == [1] * 6 and most[0] == 2  # every one compiled, two at a time at most


def test_a_compile_that_fails_hands_its_error_over_and_frees_its_slot() -> None:
    compiler = GrammarCompiler(timeout_s=LONG, slots=1)

    def build() -> object:
        raise RuntimeError("invalid grammar: parse error")

    for _ in range(3):  # the slot came back each time
        with pytest.raises(RuntimeError, match="parse error"):
            compiler.compile(build, print)
    assert compiler.running == 0


# --- the engine: a stub model whose grammar compile blocks -------------------------------


@dataclass
class _Config:
    n_seq_max: int = 2
    n_batch: int = 64


@dataclass
class _Sampler:
    freed: bool = False

    def free(self) -> None:
        self.freed = True


@dataclass
class StubNative:
    """What ``Engine`` touches of a model before a request runs; a grammar's sampler
    compiles until ``slow.release`` is set."""

    slow: SlowCompile = field(default_factory=SlowCompile)
    config: _Config = field(default_factory=_Config)
    kv_cells: int = 4096
    samplers: list[_Sampler] = field(default_factory=list)
    closed: int = 0

    def tokenize(self, text: str) -> list[int]:
        return [1] * len(text.split())

    def sampler(self, params: SamplingParams, grammar: str | None) -> _Sampler:
        if grammar is not None:
            self.slow.build()
        sampler = _Sampler()
        self.samplers.append(sampler)
        return sampler

    def close(self) -> None:
        self.closed += 1


def _grammar_request() -> CompletionRequest:
    return CompletionRequest("a prompt", SamplingParams(max_tokens=4), grammar='root ::= "a"')


def test_n1_the_engine_refuses_a_slow_grammar_and_frees_the_model_only_after_it() -> None:
    native = StubNative()
    grammars = GrammarCompiler(timeout_s=SHORT, slots=1)
    engine = Engine(native, EngineConfig(name="stub"), grammars=grammars)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="did not compile within"):
        engine.submit(_grammar_request())
    with pytest.raises(Overloaded):  # its one slot is still held by the runaway
        engine.submit(_grammar_request())
    assert engine.stats().waiting == 0  # neither was queued
    engine.close()  # unloaded meanwhile: the running compile still uses the model
    assert native.closed == 0
    native.slow.release.set()
    wait_for(lambda: native.closed == 1)  # the last compile to end frees it, once
    assert [s.freed for s in native.samplers] == [True]  # the abandoned sampler, freed
    assert grammars.running == 0


def test_the_answer_checks_own_grammar_never_waits_for_a_slot_runaways_hold() -> None:
    """Runaway client grammars in every slot cannot switch the second look off: the
    server's own grammar compiles at once, in the caller's thread."""
    native = StubNative()
    grammars = GrammarCompiler(timeout_s=SHORT, slots=1)
    engine = Engine(native, EngineConfig(name="stub"), grammars=grammars)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        engine.submit(_grammar_request())  # the runaway holds the one slot
    with pytest.raises(Overloaded):
        engine.submit(_grammar_request())
    runaway, native.slow = native.slow, SlowCompile()
    native.slow.release.set()  # the check's own grammar compiles at once
    check = check_request(chatml(), "When does the office open?", [HOURS])
    assert check is not None and check.own_grammar
    engine.submit(check)  # no Overloaded: it never asked for the slot
    assert len(native.samplers) == 1 and grammars.running == 1  # the runaway still runs
    engine.close()
    runaway.release.set()
    wait_for(lambda: grammars.running == 0)


def test_a_grammar_compiled_while_the_model_unloads_is_refused_not_queued() -> None:
    native = StubNative()
    engine = Engine(native, EngineConfig(name="stub"), grammars=GrammarCompiler(LONG, 1))  # type: ignore[arg-type]
    outcome: list[BaseException] = []

    def submit() -> None:
        try:
            engine.submit(_grammar_request())
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=submit)
    caller.start()
    native.slow.started.wait(LONG)
    closing = threading.Thread(target=engine.close)
    closing.start()
    wait_for(lambda: engine._closing)
    native.slow.release.set()
    caller.join(LONG)
    closing.join(LONG)
    assert [type(e) for e in outcome] == [Overloaded]
    assert [s.freed for s in native.samplers] == [True] and native.closed == 1


# --- over HTTP: the statuses, and nobody else waits ----------------------------------------


def test_n1_over_http_slow_grammars_get_400_then_503_and_other_requests_go_on(
    client: TestClient[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake model compiles nothing: its submit is given the engine's compiler."""
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    backend = fake_model(client)
    compiler = GrammarCompiler(timeout_s=SHORT, slots=1)
    slow = SlowCompile()
    real_submit = backend.submit

    def submit(request: CompletionRequest) -> Any:
        if request.grammar is not None:
            compiler.compile(slow.build, slow.discard)
        return real_submit(request)

    monkeypatch.setattr(backend, "submit", submit)
    grammar = {"prompt": "x", "max_tokens": 3, "grammar": 'root ::= "a"'}
    first = client.post("/api/completions", json=grammar)
    assert first.status_code == 400, first.text
    assert "did not compile within" in first.json()["error"]["detail"]
    busy = client.post(
        "/v1/chat/completions",
        json={
            "model": "default",
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_object"},
        },
    )
    assert busy.status_code == 503, busy.text
    assert busy.headers["retry-after"] == "1" and "slots are busy" in busy.text
    plain = client.post("/api/completions", json={"prompt": "x", "max_tokens": 3})
    assert plain.status_code == 200  # no grammar: never waits for the compile slots
    assert not slow.made  # all of that while the runaway compile still ran
    slow.release.set()
    wait_for(lambda: compiler.running == 0)
    compiler.timeout_s = LONG  # what follows must succeed, however loaded the machine
    again = client.post("/api/completions", json=grammar)  # the slot is back
    assert again.status_code == 200, again.text
