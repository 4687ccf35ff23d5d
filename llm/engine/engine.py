"""Continuous batching over one llama.cpp context: the engine thread and its scheduler.

One thread per loaded model owns a ``NativeModel``. Each step decodes the next token of
every generating sequence in a single ``llama_decode``, then prefills up to
``prefill_chunk`` prompt tokens, oldest request first, one chunk per call: a burst of new
prompts gets its first tokens out quickly, and a long prompt never stalls the running
streams for two chunks or more. New requests join between steps and between chunks.
Prefill-only requests (prefetches) run only while no real request does; one arriving stops
a prefetch's chunk mid-decode when its prompt does not hold that chunk.
Callers only touch ``submit`` (tokenise, admission checks, enqueue) and their ``Completion``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llm.channel import Completion
from llm.engine.grammar_compile import GrammarCompiler
from llm.engine.guard import SamplingFailed
from llm.engine.kv_disk import KvDiskCache, SavedState
from llm.engine.prefix_cache import PrefixCache
from llm.engine.sequence import Seq
from llm.engine.slots import Checkpoint, common_prefix
from llm.engine.speculative import Speculation, verify
from llm.params import (
    BackendStats,
    CompletionRequest,
    ContextOverflow,
    Finished,
    FinishReason,
    InvalidRequest,
    Overloaded,
    TextDelta,
    Usage,
    token_budget,
)

if TYPE_CHECKING:  # llama.cpp loads only when a model does
    from llm.engine.native import NativeModel, TokenSampler

log = logging.getLogger(__name__)

# A prefill-only request (prefetch) prefills in chunks this small (measured as fast as
# 512-token chunks: docs/BENCHMARKS.md, round three). A real request that arrives while one
# is read stops it mid-decode when the chunk is no use to it (``NativeModel.interrupt``);
# where that cannot be done (no guard, or a GPU), it waits for that chunk: 1-4 s for a 1.5B
# model on 2 cores.
BACKGROUND_CHUNK = 128
# With windowed sliding-window caches, a prompt's prefill stops this many tokens before its
# end for a checkpoint of the window (llm/engine/prefix_cache.py): the next turn of a chat
# re-renders the end of this one, and a prefetched prefix may retokenise at its end.
CHECKPOINT_BEFORE_END = 4


@dataclass(frozen=True)
class EngineConfig:
    name: str
    context_tokens: int = 4096  # per request: prompt + max_tokens
    max_tokens_cap: int = 2048
    prefill_chunk: int = 512
    max_waiting: int = 64
    max_waiting_tokens: int = 65536
    # llama.cpp's CPU kernels round differently with the number of rows in a batch; padding
    # every decode step to a fixed row count makes greedy output independent of load, at a
    # cost in single-stream speed (docs/BENCHMARKS.md). Needs one spare sequence id.
    batch_invariant: bool = False


class EngineObserver(Protocol):
    def first_token(self, model: str, seconds: float) -> None: ...
    def token_gap(self, model: str, seconds: float) -> None: ...
    def finished(self, model: str, usage: Usage, reason: FinishReason) -> None: ...
    def rejected(self, model: str, reason: str) -> None: ...


@runtime_checkable
class SpeculationObserver(Protocol):
    """An observer that also counts a finished request's drafted and accepted tokens."""

    def speculated(self, model: str, method: str, drafted: int, accepted: int) -> None: ...


class Engine:
    def __init__(
        self,
        native: NativeModel,
        config: EngineConfig,
        *,
        observer: EngineObserver | None = None,
        disk: KvDiskCache | None = None,
        speculation: Speculation | None = None,
        grammars: GrammarCompiler | None = None,
    ):
        """``grammars``: where grammar samplers compile, under a deadline and in a bounded
        number of threads (one shared by every model of a server; else one of its own)."""
        self.native = native
        self.config = config
        self.name = config.name
        self.context_tokens = min(config.context_tokens, native.kv_cells)
        self._observer = observer
        self._disk = disk
        self._spec_observer = observer if isinstance(observer, SpeculationObserver) else None
        self._speculation = speculation
        sequences = native.config.n_seq_max - (1 if config.batch_invariant else 0)
        aligned = config.prefill_chunk if config.batch_invariant else 0
        self._cache: PrefixCache[Seq] = PrefixCache(native, sequences, aligned_to=aligned)
        self._scratch = sequences  # the spare sequence id that padding rows use
        self._waiting: deque[Seq] = deque()
        self._waiting_tokens = 0
        self._wake = threading.Condition()
        # A prefetch's chunk being decoded, and where it ends (under _wake): what a new
        # request may interrupt (``_interrupt_for``).
        self._reading: tuple[Seq, int] | None = None
        self._interrupts = 0  # prefetch chunks stopped mid-decode
        self._closing = False
        self._grammars = grammars or GrammarCompiler()
        self._compiling = 0  # grammar compiles of this engine still running (under _wake)
        self._native_done = False  # close() has stopped the thread: the model may be freed
        self._native_closed = False  # and has been (by close() or by the last compile)
        self._thread = threading.Thread(target=self._run, name=f"ragdesk-engine-{self.name}")
        self._thread.start()

    # --- caller side ------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self.native.tokenize(text))

    def submit(self, request: CompletionRequest) -> Completion:
        """Admit a request or refuse it at once (``Overloaded``, ``ContextOverflow``)."""
        params = request.params
        if params.max_tokens is not None and params.max_tokens < 1:
            raise InvalidRequest("max_tokens must be at least 1")
        prompt = self.native.tokenize(request.prompt)
        cap = self.config.max_tokens_cap
        max_tokens = token_budget(params.max_tokens, len(prompt), self.context_tokens, cap)
        if len(prompt) + max_tokens > self.context_tokens:
            if not request.prefill_only:  # a prefetch is nobody's refused request
                self._reject("context")
            raise ContextOverflow(len(prompt), max_tokens, self.context_tokens)
        with self._wake:
            if self._closing:
                raise Overloaded("the model is being unloaded")
            if request.prefill_only and (self._waiting or self._foreground()):
                raise Overloaded("busy: a prefetch runs only on an idle engine")
            if (
                len(self._waiting) >= self.config.max_waiting
                or self._waiting_tokens + len(prompt) > self.config.max_waiting_tokens
            ):
                self._reject("queue_full")
                busy = len(self._waiting) / max(1, len(self._cache.slots))
                raise Overloaded("too many requests are waiting", max(1, math.ceil(busy)))
        saved = self._disk.load(request.cache_key) if self._disk and request.cache_key else None
        try:
            sampler = self._sampler(request)
        except RuntimeError as exc:
            raise InvalidRequest(str(exc)) from exc
        seq = Seq(request, Completion(), prompt, sampler, saved, time.monotonic(), max_tokens)
        with self._wake:
            if self._closing:  # unloaded while the grammar compiled: nobody would serve it
                sampler.free()
                raise Overloaded("the model is being unloaded")
            self._waiting.append(seq)
            self._waiting_tokens += len(prompt)
            self._interrupt_for(seq)
            self._wake.notify()
        return seq.completion

    def _interrupt_for(self, seq: Seq) -> None:
        """Stop the prefetch chunk being read (under ``_wake``) when it stands in the way of
        ``seq``: a real request, or a prefetch replacing a cancelled one (its asker's next
        draft), whose prompt does not hold that chunk. One it holds is left to finish:
        ``seq`` is seated on it."""
        if self._reading is None:
            return
        reading, end = self._reading
        if seq.request.prefill_only and not reading.completion.cancelled:
            return
        if common_prefix(seq.prompt, reading.prompt, end) < end:
            self.native.interrupt()

    def _sampler(self, request: CompletionRequest) -> TokenSampler:
        """The request's sampler; with a grammar, compiled by ``grammars`` (a deadline and a
        bounded number of threads: a pathological grammar can take minutes in C). A
        compile abandoned at its deadline frees its sampler itself when it ends."""
        params, grammar = request.params, request.grammar
        if grammar is None or request.own_grammar:  # none, or the server's own: at once
            return self.native.sampler(params, grammar)
        with self._wake:
            if self._closing:
                raise Overloaded("the model is being unloaded")
            self._compiling += 1  # the model is not freed under a running compile
        return self._grammars.compile(
            lambda: self.native.sampler(params, grammar),
            lambda sampler: sampler.free(),
            done=self._compiled,
        )

    def _compiled(self) -> None:
        """A grammar compile ended: the last one frees the model when close() came first."""
        with self._wake:
            self._compiling -= 1
            free = self._native_done and self._compiling == 0 and not self._native_closed
            self._native_closed = self._native_closed or free
        if free:
            self.native.close()

    def stats(self) -> BackendStats:
        with self._wake:
            running = len(self._cache.busy())
            return BackendStats(
                running=running,
                waiting=len(self._waiting),
                sequences=len(self._cache.slots),
                kv_cells_used=self._cache.cells_used(),
                kv_cells=self.native.kv_cells,
                kv_window_resumes=self._cache.window_resumes,
                kv_window_prefills=self._cache.window_prefills,
                prefetch_interrupts=self._interrupts,
            )

    @property
    def idle(self) -> bool:
        stats = self.stats()
        return stats.running == 0 and stats.waiting == 0

    @property
    def serving(self) -> bool:
        """Whether a real request runs or waits: prefetches then yield and new ones are
        refused. Prefetches alone do not count: a new draft's prefetch replaces its asker's
        last one (and goes on from what that one read), and other askers' ones take turns."""
        with self._wake:
            return self._serving()

    def close(self) -> None:
        """Finish nothing new: cancel what runs and waits, stop the thread, free llama.cpp."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()
        if self._speculation is not None:
            self._speculation.close()
        with self._wake:  # a compile abandoned at its deadline may still run on the model
            self._native_done = True
            free = self._compiling == 0 and not self._native_closed
            self._native_closed = self._native_closed or free
        if free:
            self.native.close()

    def _reject(self, reason: str) -> None:
        if self._observer:
            self._observer.rejected(self.name, reason)

    # --- engine thread ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while self._next_round():
                self._step()
        except Exception:
            log.exception("engine %s failed", self.name)
            self._fail_everything("the inference engine failed; see the server log")
        finally:
            self._fail_everything("the model was unloaded")

    def _next_round(self) -> bool:
        """Block while there is nothing to do; then admit what waits."""
        with self._wake:
            while not self._closing and not self._waiting and not self._running():
                self._wake.wait()
            if self._closing:
                return False
        self._admit()
        return True

    def _admit(self) -> None:
        """Seat waiting requests in free slots (between steps and between prefill chunks)."""
        with self._wake:
            while self._waiting and self._cache.has_free_slot():
                seq = self._waiting.popleft()
                self._waiting_tokens -= len(seq.prompt)
                if seq.completion.cancelled or seq.request.expired():
                    reason: FinishReason = "cancelled" if seq.completion.cancelled else "deadline"
                    self._finish(seq, reason, "the request expired before it started")
                    continue
                seq.slot, seq.done = self._cache.seat(seq, seq.prompt, seq.saved)
                seq.cached, seq.saved = seq.done, None

    def _running(self) -> list[Seq]:
        return self._cache.busy()

    def _foreground(self) -> list[Seq]:
        return [s for s in self._running() if not s.request.prefill_only]

    def _serving(self) -> bool:
        waiting = any(not s.request.prefill_only for s in self._waiting)
        return waiting or bool(self._foreground())

    def _step(self) -> None:
        now = time.monotonic()
        with self._wake:
            yielding = self._serving()  # a real request comes first
        for seq in self._running():
            if seq.completion.cancelled or (yielding and seq.request.prefill_only):
                self._finish(seq, "cancelled")
            elif seq.request.expired(now):
                self._finish(seq, "deadline", "the request ran past its deadline")
        decoding = [s for s in self._running() if s.next_token is not None]
        if decoding:
            self._decode_step(decoding)
        self._prefill_round()

    def _prefill_round(self) -> None:
        """Prefill up to ``prefill_chunk`` tokens before the next decode step, oldest prompt
        first, one chunk per ``llama_decode`` so each prompt's first token leaves as soon as
        its own prefill ends. Requests that arrive meanwhile join the round."""
        spent = 0
        while spent < self.config.prefill_chunk:
            prefilling = [s for s in self._running() if s.prefilling]
            if not prefilling:
                return
            first = min(prefilling, key=lambda s: (s.request.prefill_only, s.submitted))
            if first.request.prefill_only and (spent or self.serving):
                return  # only on an otherwise idle engine, one short chunk between checks
            spent += self._prefill_chunk(first)
            self._admit()

    def _decode_step(self, seqs: list[Seq]) -> None:
        """One token for every generating sequence, in one ``llama_decode``; with speculation,
        also each sequence's drafted tokens, every one with its logits."""
        n = self.native
        drafts = self._drafts(seqs)
        n.clear_batch()
        rows = []
        for seq, draft in zip(seqs, drafts, strict=True):
            assert seq.slot is not None and seq.next_token is not None
            base, seq_id = len(seq.slot.tokens), seq.slot.seq_id
            rows.append(n.add(seq.next_token, base, seq_id, True))
            for i, token in enumerate(draft):
                n.add(token, base + 1 + i, seq_id, True)
        if self.config.batch_invariant:
            for pos in range(len(self._cache.slots) - n.batch_size):
                n.add(0, pos, self._scratch, False)
        decoded = self._decode(seqs)
        if self.config.batch_invariant:
            n.seq_remove(self._scratch)
        if not decoded:
            return
        for seq, row, draft in zip(seqs, rows, drafts, strict=True):
            assert seq.slot is not None and seq.next_token is not None
            seq.slot.tokens.append(seq.next_token)
            if draft:
                self._verify(seq, row, draft)
            else:
                self._sample(seq, row)

    def _drafts(self, seqs: list[Seq]) -> list[list[int]]:
        if self._speculation is None:
            return [[] for _ in seqs]
        # batch-invariant: drafts take the place of padding rows, the batch keeps its size
        rows = len(self._cache.slots) if self.config.batch_invariant else self.native.config.n_batch
        room = rows - len(seqs)
        return self._speculation.drafts(seqs, len(self._running()), room)

    def _verify(self, seq: Seq, row: int, draft: list[int]) -> None:
        """Accept the longest matching prefix of ``draft`` (see ``llm/engine/speculative.py``),
        drop the rejected drafts' KV cells, and pass every emitted token through ``_accept``
        as if it had been decoded alone."""
        assert self._speculation is not None and seq.slot is not None
        slot = seq.slot
        try:
            tokens, accepted = verify(draft, lambda i: seq.sampler.sample(row + i))
        except SamplingFailed as exc:
            self._finish(seq, "error", str(exc), status=400)
            return
        self._speculation.record(seq, len(draft), accepted)
        self.native.seq_remove(slot.seq_id, len(slot.tokens) + accepted)
        for i, token in enumerate(tokens):
            if i:  # the previous token was an accepted draft: its KV cell is already there
                slot.tokens.append(tokens[i - 1])
            self._accept(seq, token)
            if seq.slot is None:
                return

    def _prefill_chunk(self, seq: Seq) -> int:
        """The next chunk of one prompt, in its own ``llama_decode``; returns its length.

        Prompts are never mixed in one batch, and chunks start at fixed offsets: llama.cpp's
        CPU kernels round differently depending on a row's place in the batch, and this
        keeps a prompt's KV (hence greedy output) the same whatever else is running.
        """
        assert seq.slot is not None
        n = self.native
        n.clear_batch()
        chunk = self.config.prefill_chunk
        if seq.request.prefill_only and not self.config.batch_invariant:  # there: as cold
            chunk = min(chunk, BACKGROUND_CHUNK)
        end = min(len(seq.prompt), (seq.done // chunk + 1) * chunk)
        mark = len(seq.prompt) - CHECKPOINT_BEFORE_END if n.windowed else 0
        if seq.done < mark < end:
            end = mark
        for i in range(seq.done, end):
            n.add(seq.prompt[i], i, seq.slot.seq_id, i == len(seq.prompt) - 1)
        size = end - seq.done
        if not self._decode([seq]):
            return size
        seq.slot.tokens.extend(seq.prompt[seq.done : end])
        seq.done = end
        seq.slot.prefilled = end
        if end == mark:
            seq.slot.checkpoint = Checkpoint(end, n.window_state(seq.slot.seq_id))
        if not seq.prefilling:
            if seq.request.prefill_only:  # its cells are the point; nothing to generate
                self._finish(seq, "stop")
            else:
                self._sample(seq, n.batch_size - 1)
        return size

    def _decode(self, batch: list[Seq]) -> bool:
        """Run the batch; when the KV cache is full, drop idle caches, then the newest
        request, and let the next step rebuild the batch. A prefetch's chunk may be
        interrupted (``_interrupt_for``): then the prefetch ends, its chunk's cells removed."""
        while (rc := self._llama_decode(batch)) == 1:
            if not self._cache.evict_idle():
                victim = max(batch, key=lambda s: s.submitted)
                self._finish(victim, "error", "the KV cache is full; retry shortly", status=503)
                return False
        if rc == 2:  # interrupted (NativeModel.decode): only a prefetch's chunk is
            self._interrupts += 1
            for seq in batch:
                self._finish(seq, "cancelled")
            return False
        if rc != 0:
            for seq in batch:
                self._finish(seq, "error", f"llama_decode failed ({rc})")
            return False
        return True

    def _llama_decode(self, batch: list[Seq]) -> int:
        """``llama_decode`` of the batch; a prefetch's chunk is read interruptibly."""
        n = self.native
        if not (len(batch) == 1 and batch[0].request.prefill_only and n.interruptible):
            return n.decode()
        with self._wake:
            n.clear_interrupt()
            self._reading = (batch[0], batch[0].done + n.batch_size)
            for waiting in self._waiting:  # submitted since the check before this chunk
                self._interrupt_for(waiting)
        try:
            return n.decode()
        finally:
            with self._wake:
                self._reading = None
                n.clear_interrupt()

    def _sample(self, seq: Seq, row: int) -> None:
        try:
            token = seq.sampler.sample(row)
        except SamplingFailed as exc:  # this request's grammar, not the engine: only it ends
            self._finish(seq, "error", str(exc), status=400)
            return
        self._accept(seq, token)

    def _accept(self, seq: Seq, token: int) -> None:
        now = time.monotonic()
        if self._observer:
            if seq.generated == 0:
                self._observer.first_token(self.name, now - seq.submitted)
            else:
                self._observer.token_gap(self.name, now - seq.last_emit)
        seq.last_emit = now
        seq.generated += 1
        if self.native.is_end(token):
            self._finish(seq, "stop")
            return
        text = seq.text(self.native.piece(token))
        if text:
            seq.completion.push(TextDelta(text))
        assert seq.slot is not None
        if seq.stops.stopped:
            self._finish(seq, "stop")
        elif seq.generated >= seq.max_tokens or len(seq.slot.tokens) + 1 >= self.context_tokens:
            self._finish(seq, "length")
        else:
            seq.next_token = token

    def _finish(
        self, seq: Seq, reason: FinishReason, error: str | None = None, *, status: int = 500
    ) -> None:
        tail = seq.tail()
        if tail and reason in ("stop", "length"):
            seq.completion.push(TextDelta(tail))
        seq.sampler.free()
        slot, seq.slot = seq.slot, None
        if slot is not None:
            slot.busy = None
            slot.last_used = time.monotonic()
            if reason == "error":  # a failed decode may have left cells its tokens don't name
                self.native.seq_remove(slot.seq_id)
                slot.forget()
            else:  # drafts checked past a stop: their cells go
                self.native.seq_remove(slot.seq_id, len(slot.tokens))
            if self._disk and seq.request.cache_key and reason in ("stop", "length"):
                state = self.native.seq_state(slot.seq_id)
                self._disk.save(seq.request.cache_key, SavedState(list(slot.tokens), state))
        usage = seq.usage()
        seq.completion.push(Finished(reason, usage, self.name, error, status))
        if self._observer and not seq.request.prefill_only:  # requests people wait for
            self._observer.finished(self.name, usage, reason)
        if self._spec_observer and self._speculation and seq.spec.drafted:
            method, spec = self._speculation.method, seq.spec
            self._spec_observer.speculated(self.name, method, spec.drafted, spec.accepted)

    def _fail_everything(self, why: str) -> None:
        with self._wake:
            waiting, self._waiting = list(self._waiting), deque()
            self._waiting_tokens = 0
        for seq in [*waiting, *self._running()]:
            self._finish(seq, "error", why)
