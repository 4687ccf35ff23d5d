"""The slice of llama.cpp's C API the engine uses, behind a small typed class.

Everything ctypes lives here: the model and a multi-sequence context (unified KV cache,
``n_seq_max`` sequences), a reusable ``llama_batch``, tokenisation, sequence memory
operations, C-side sampler chains and per-sequence state snapshots. Only the engine
thread calls into a ``NativeModel`` once it is built.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import llama_cpp as C
import numpy as np

from llm.engine.guard import (
    TOKENIZE_FAILED,
    Guard,
    GuardUnavailable,
    SamplingFailed,
    error_buffer,
    load_guard,
)
from llm.params import SamplingParams

FLASH_ATTN = {
    "auto": C.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": C.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": C.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}
KV_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q5_1": 7, "q5_0": 6, "q4_1": 3, "q4_0": 2}


class NativeError(RuntimeError):
    pass


GGML_LOG_ERROR, GGML_LOG_CONT = 4, 5  # ggml.h's levels (llama-cpp-python's map predates them)
INTERRUPTED = 2  # what llama_decode returns when its abort callback said stop
_log_state = {"error": False}
_decoding = threading.local()  # .held: the errors of the decode under way on this thread


@C.llama_log_callback  # type: ignore[untyped-decorator]
def _errors_only(level: int, text: bytes, _: ctypes.c_void_p) -> None:
    """llama.cpp's log, errors only (its info and warnings print pages at load). Those of
    a decode are held until it returns: an interrupted one logs three, and is no error."""
    if level != GGML_LOG_CONT:
        _log_state["error"] = level == GGML_LOG_ERROR
    if _log_state["error"]:
        held = getattr(_decoding, "held", None)
        if held is None:
            sys.stderr.write(text.decode("utf-8", "replace"))
        else:
            held.append(text)


def _keeping_gil(*names: str) -> Any:
    """The given llama.cpp functions, called without releasing the GIL.

    ctypes drops the GIL around every call into a ``CDLL`` and takes it back afterwards.
    The engine thread makes a few short calls per token (sample, piece, end-of-generation
    check); each time it waits for the GIL behind the event loop thread, up to the
    interpreter's switch interval (5 ms), which cost the engine ~10 % of its throughput
    under HTTP load. These calls take microseconds to a fraction of a millisecond, so they
    keep the GIL; ``llama_decode`` (milliseconds to seconds) and tokenisation release it.
    """
    released = C.llama_cpp._lib
    keeping = ctypes.PyDLL(released._name, handle=released._handle)
    for name in names:
        function, original = getattr(keeping, name), getattr(released, name)
        function.argtypes, function.restype = original.argtypes, original.restype
    return keeping


_fast = _keeping_gil(
    "llama_sampler_sample",
    "llama_token_to_piece",
    "llama_vocab_is_eog",
    "llama_memory_seq_rm",
    "llama_memory_seq_cp",
    "llama_get_logits_ith",
)


@dataclass(frozen=True)
class NativeConfig:
    model_path: Path
    kv_cells: int = 16384
    n_seq_max: int = 8
    n_batch: int = 512
    n_threads: int = 1
    n_gpu_layers: int = 0
    main_gpu: int = 0
    tensor_split: tuple[float, ...] = ()
    flash_attn: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"
    # Sliding-window models (Gemma 2/3, gpt-oss): True keeps every token's cells in their
    # window layers too (llama.cpp's --swa-full); False keeps only the window, as
    # llama-server does, and a prefix is reusable only where its window is still there.
    swa_full: bool = True


class NativeModel:
    def __init__(self, config: NativeConfig):
        C.llama_backend_init()
        C.llama_log_set(_errors_only, ctypes.c_void_p(0))
        self.config = config
        mparams = C.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if config.n_gpu_layers < 0 else config.n_gpu_layers
        mparams.main_gpu = config.main_gpu
        self._tensor_split: Any = None
        if config.tensor_split:
            if len(config.tensor_split) > C.LLAMA_MAX_DEVICES:
                raise NativeError(f"tensor_split names more than {C.LLAMA_MAX_DEVICES} devices")
            self._tensor_split = (ctypes.c_float * C.LLAMA_MAX_DEVICES)(*config.tensor_split)
            mparams.tensor_split = self._tensor_split
        model = C.llama_model_load_from_file(str(config.model_path).encode(), mparams)
        if not model:
            raise NativeError(f"llama.cpp could not load {config.model_path}")
        self.model = model
        self.vocab = C.llama_model_get_vocab(model)
        self.n_vocab = int(C.llama_vocab_n_tokens(self.vocab))

        cparams = C.llama_context_default_params()
        cparams.n_ctx = config.kv_cells
        cparams.n_batch = config.n_batch
        cparams.n_ubatch = config.n_batch
        cparams.n_seq_max = config.n_seq_max
        cparams.n_threads = config.n_threads
        cparams.n_threads_batch = config.n_threads
        cparams.kv_unified = True  # one pool of cells: shared prefixes are stored once
        cparams.swa_full = config.swa_full
        cparams.flash_attn_type = FLASH_ATTN[config.flash_attn]
        cparams.type_k = KV_TYPES[config.type_k]
        cparams.type_v = KV_TYPES[config.type_v]
        cparams.no_perf = True
        ctx = C.llama_init_from_model(model, cparams)
        if not ctx:
            C.llama_model_free(model)
            raise NativeError("llama.cpp could not create a context (out of memory?)")
        self.ctx = ctx
        self.memory = C.llama_get_memory(ctx)
        self.kv_cells = int(C.llama_n_ctx(ctx))
        self.n_ctx_train = int(C.llama_model_n_ctx_train(model))
        self.model_bytes = int(C.llama_model_size(model))
        # Tokens a sliding-window layer attends to (0: none); with ``windowed`` caches its
        # cells past the window are overwritten as the sequence goes on.
        self.n_swa = max(0, int(C.llama_model_n_swa(model)))
        self.windowed = self.n_swa > 0 and not config.swa_full
        self._batch = C.llama_batch_init(config.n_batch, 0, 1)
        self._piece = ctypes.create_string_buffer(256)
        try:
            self._guard: Guard | None = load_guard()
            self._guard_missing = ""
        except GuardUnavailable as exc:
            self._guard, self._guard_missing = None, str(exc)
        # Raised by ``interrupt`` from any thread; the guard's callback reads it in C.
        self._interrupt = ctypes.c_int32(0)
        self._interrupt_callback: Any = None
        if self._guard is not None:
            self._interrupt_callback = self._guard.interrupt_callback()
            data = ctypes.c_void_p(ctypes.addressof(self._interrupt))
            C.llama_set_abort_callback(ctx, self._interrupt_callback, data)

    # --- tokens -----------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buffer = (C.llama_token * capacity)()
        if self._guard is None:
            n = C.llama_tokenize(self.vocab, data, len(data), buffer, capacity, add_bos, special)
        else:
            error = error_buffer()
            n = self._guard.releasing.ragdesk_tokenize(
                self.vocab, data, len(data), buffer, capacity, add_bos, special, error, len(error)
            )
            if n == TOKENIZE_FAILED:
                raise NativeError(f"tokenisation failed: {error.value.decode(errors='replace')}")
        if n < 0:
            raise NativeError("tokenisation failed")
        return list(buffer[:n])

    def piece(self, token: int) -> bytes:
        n = _fast.llama_token_to_piece(self.vocab, token, self._piece, len(self._piece), 0, False)
        if n < 0:  # never for real vocabularies (pieces are short), but do not read garbage
            return b""
        return self._piece.raw[:n]

    def token_text(self, token: int) -> str:
        return (C.llama_vocab_get_text(self.vocab, token) or b"").decode("utf-8", "replace")

    def control_tokens(self) -> list[str]:
        """The texts of the vocabulary's control tokens (Gemma 3 has ~6,000)."""
        control = C.LLAMA_TOKEN_ATTR_CONTROL
        return [
            self.token_text(t)
            for t in range(self.n_vocab)
            if C.llama_vocab_get_attr(self.vocab, t) & control
        ]

    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(1 << 16)
        n = C.llama_model_meta_val_str(self.model, key.encode(), buffer, len(buffer))
        if n < 0:
            return None
        if n >= len(buffer):  # long chat templates
            buffer = ctypes.create_string_buffer(n + 1)
            C.llama_model_meta_val_str(self.model, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", "replace")

    @property
    def bos(self) -> int:
        return int(C.llama_vocab_bos(self.vocab))

    @property
    def eos(self) -> int:
        return int(C.llama_vocab_eos(self.vocab))

    @property
    def offloaded(self) -> bool:
        return self.config.n_gpu_layers != 0 and bool(C.llama_supports_gpu_offload())

    def is_end(self, token: int) -> bool:
        return bool(_fast.llama_vocab_is_eog(self.vocab, token))

    # --- batches ----------------------------------------------------------------------------
    def clear_batch(self) -> None:
        self._batch.n_tokens = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Append one token to the batch; returns its index (where its logits will be)."""
        b = self._batch
        i = int(b.n_tokens)
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq
        b.logits[i] = logits
        b.n_tokens = i + 1
        return i

    @property
    def batch_size(self) -> int:
        return int(self._batch.n_tokens)

    def decode(self) -> int:
        """0 on success, 1 when the KV cache has no room, 2 when interrupted (the batch's
        cells are removed again), <0 on error."""
        held: list[bytes] = []
        _decoding.held = held
        try:
            rc = int(C.llama_decode(self.ctx, self._batch))
        finally:
            _decoding.held = None
        if held and rc != INTERRUPTED:
            sys.stderr.write(b"".join(held).decode("utf-8", "replace"))
        return rc

    @property
    def interruptible(self) -> bool:
        """Whether ``interrupt`` stops a decode under way: the guard holds its callback,
        which llama.cpp's CPU backend asks between the nodes of a graph (GPUs do not)."""
        return self._interrupt_callback is not None and not self.offloaded

    def interrupt(self) -> None:
        """End the decode under way, or the next one, with 2 (from any thread)."""
        self._interrupt.value = 1

    def clear_interrupt(self) -> None:
        self._interrupt.value = 0

    # --- sequence memory --------------------------------------------------------------------
    def seq_remove(self, seq: int, start: int = 0, end: int = -1) -> None:
        _fast.llama_memory_seq_rm(self.memory, seq, start, end)

    def seq_copy(self, source: int, target: int, end: int) -> None:
        _fast.llama_memory_seq_cp(self.memory, source, target, 0, end)

    def seq_pos_min(self, seq: int) -> int:
        """The first position ``seq`` still holds in every layer (-1: none); with windowed
        caches, positions a window has moved past are gone from its layers."""
        return int(C.llama_memory_seq_pos_min(self.memory, seq))

    def window_state(self, seq: int) -> bytes:
        """The window layers' cells of ``seq`` (what truncating it cannot give back)."""
        return self._state(seq, C.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)

    def set_window_state(self, seq: int, state: bytes) -> bool:
        """Replace the window layers' cells of ``seq``; on False they are gone."""
        return self._set_state(seq, state, C.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)

    def seq_state(self, seq: int) -> bytes:
        return self._state(seq, 0)

    def set_seq_state(self, seq: int, state: bytes) -> bool:
        return self._set_state(seq, state, 0)

    def _state(self, seq: int, flags: int) -> bytes:
        size = int(C.llama_state_seq_get_size_ext(self.ctx, seq, flags))
        buffer = (ctypes.c_uint8 * size)()
        written = int(C.llama_state_seq_get_data_ext(self.ctx, buffer, size, seq, flags))
        return ctypes.string_at(buffer, written)  # one copy (slicing makes a list of ints)

    def _set_state(self, seq: int, state: bytes, flags: int) -> bool:
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        return int(C.llama_state_seq_set_data_ext(self.ctx, buffer, len(state), seq, flags)) > 0

    # --- sampling ---------------------------------------------------------------------------
    def sampler(self, params: SamplingParams, grammar: str | None) -> TokenSampler:
        """The sampler of one sequence; ``NativeError`` for a grammar that cannot run.

        Plain greedy decoding (no grammar, no penalties) is an argmax over the logits row.
        llama.cpp's greedy sampler first copies the whole vocabulary into a candidates
        array: ~1.1 ms per token for Gemma 3's 262k entries on this CPU, against ~0.2 ms
        for the argmax (13 % of an eight-stream decode step; docs/BENCHMARKS.md). Both
        pick the first of equal maxima, so the tokens are the same.
        """
        if grammar is None and params.temperature <= 0 and not params.has_penalties:
            return Argmax(self.ctx, self.n_vocab)
        constraint = None if grammar is None else self._grammar(grammar)
        chain = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())

        def add(sampler: Any) -> None:
            C.llama_sampler_chain_add(chain, sampler)

        if params.has_penalties:
            add(
                C.llama_sampler_init_penalties(
                    self.n_vocab,
                    params.penalty_last_n,
                    params.repeat_penalty,
                    params.frequency_penalty,
                    params.presence_penalty,
                )
            )
        if params.temperature <= 0:
            add(C.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(C.llama_sampler_init_top_k(params.top_k))
            if params.top_p < 1:
                add(C.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0:
                add(C.llama_sampler_init_min_p(params.min_p, 1))
            add(C.llama_sampler_init_temp(params.temperature))
            seed = 0xFFFFFFFF if params.seed is None else params.seed & 0xFFFFFFFF
            add(C.llama_sampler_init_dist(seed))
        return Sampler(chain, constraint, self.ctx, self._guard)

    def greedy_sampler(self) -> Any:
        """A stateless argmax sampler (a draft model's), for ``sample_with``."""
        return C.llama_sampler_init_greedy()

    def sample_with(self, sampler: Any, index: int) -> int:
        return int(_fast.llama_sampler_sample(sampler, self.ctx, index))

    def free_sampler(self, sampler: Any) -> None:
        C.llama_sampler_free(sampler)

    def _grammar(self, grammar: str) -> Any:
        """A grammar sampler, compiled behind the guard: llama.cpp throws on some inputs."""
        if self._guard is None:
            raise NativeError(
                f"grammars and JSON schemas are unavailable on this server: {self._guard_missing}"
            )
        error = error_buffer()
        sampler = self._guard.releasing.ragdesk_init_grammar(
            self.vocab, grammar.encode(), b"root", error, len(error)
        )
        if not sampler:
            reason = error.value.decode(errors="replace") or "it could not be compiled"
            raise NativeError(f"invalid grammar: {reason}")
        return sampler

    def close(self) -> None:
        if self.ctx:
            C.llama_batch_free(self._batch)
            C.llama_free(self.ctx)
            C.llama_model_free(self.model)
            self.ctx = None


class TokenSampler(Protocol):
    def sample(self, index: int) -> int: ...
    def free(self) -> None: ...


class Argmax:
    """Greedy sampling as an argmax over the logits at a batch index (see ``sampler``)."""

    def __init__(self, ctx: Any, n_vocab: int):
        self._ctx = ctx
        self._shape = (n_vocab,)

    def sample(self, index: int) -> int:
        logits = _fast.llama_get_logits_ith(self._ctx, index)
        if not logits:  # an index without logits: an engine bug, not the request's
            raise SamplingFailed(f"no logits at batch index {index}")
        return int(np.ctypeslib.as_array(logits, shape=self._shape).argmax())

    def free(self) -> None:
        pass


class Sampler:
    """The samplers of one sequence; ``sample`` reads the logits at a batch index, picks a
    token and accepts it, or raises ``SamplingFailed`` (a grammar that allows nothing more)."""

    def __init__(self, chain: Any, grammar: Any, ctx: Any, guard: Guard | None):
        self._chain = chain
        self._grammar = grammar
        self._ctx = ctx
        self._guard = guard
        self._error = error_buffer()

    def sample(self, index: int) -> int:
        if self._guard is None:  # no grammar then: plain samplers do not throw
            return int(_fast.llama_sampler_sample(self._chain, self._ctx, index))
        # A grammar can take milliseconds per token over a large vocabulary: that call
        # releases the GIL like any long one.
        guard = self._guard.keeping if self._grammar is None else self._guard.releasing
        token = int(
            guard.ragdesk_sample(
                self._chain, self._grammar, self._ctx, index, self._error, len(self._error)
            )
        )
        if token < 0:
            raise SamplingFailed(self._error.value.decode(errors="replace") or "sampling failed")
        return token

    def free(self) -> None:
        for sampler in (self._chain, self._grammar):
            if sampler:
                C.llama_sampler_free(sampler)
        self._chain = self._grammar = None
