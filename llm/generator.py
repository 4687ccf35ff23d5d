"""Text generation backends. One required method, ``stream``; it blocks, so callers run it
in a worker thread and pass a ``cancel`` event that stops it within one token."""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from llm.inert import Neutralizer
from llm.prompt import ChatTemplateFormat, CompletionFormat, PromptFormat


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str
    max_tokens: int
    temperature: float = 0.2
    stop: tuple[str, ...] = ()


class Generator(Protocol):
    model_id: str
    device: str
    context_tokens: int
    prompt_format: PromptFormat

    def stream(self, request: GenerationRequest, cancel: threading.Event) -> Iterator[str]: ...

    def count_tokens(self, text: str) -> int: ...


@dataclass(frozen=True)
class LlamaConfig:
    model_path: Path
    n_ctx: int = 4096
    n_gpu_layers: int = 0
    n_threads: int | None = None
    seed: int = 0


class LlamaGenerator:
    """A GGUF model through llama-cpp-python's ``Llama``.

    ``Llama`` serves one sequence at a time, so streams take turns behind a lock; it keeps
    the KV cache of the previous prompt and reuses the longest shared prefix, which is
    why prompts put the stable parts first. ``swa_full`` keeps that reuse working for
    sliding-window models such as Gemma 3.
    """

    def __init__(self, config: LlamaConfig):
        from llama_cpp import Llama, llama_supports_gpu_offload  # heavy: imported on use

        self._llama = Llama(
            model_path=str(config.model_path),
            n_ctx=config.n_ctx,
            n_gpu_layers=config.n_gpu_layers,
            # llama-cpp-python's default is half the CPUs; all of them decode ~15 % faster
            # on the 2-core machines we measure on (docs/BENCHMARKS.md).
            n_threads=config.n_threads or _available_cpus(),
            seed=config.seed,
            swa_full=True,
            verbose=False,
        )
        self._lock = threading.Lock()
        self.model_id = config.model_path.stem
        offloaded = config.n_gpu_layers != 0 and bool(llama_supports_gpu_offload())
        self.device = "GPU" if offloaded else "CPU"
        self.context_tokens = int(self._llama.n_ctx())
        self.prompt_format = _prompt_format_for(self._llama)

    def count_tokens(self, text: str) -> int:
        return len(self._llama.tokenize(text.encode("utf-8"), add_bos=True, special=True))

    def stream(self, request: GenerationRequest, cancel: threading.Event) -> Iterator[str]:
        with self._lock:
            if cancel.is_set():
                return
            chunks: Any = self._llama.create_completion(
                request.prompt,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                stop=list(request.stop),
                stream=True,
            )
            try:
                for chunk in chunks:
                    text = chunk["choices"][0]["text"]
                    if text:
                        yield text
                    if cancel.is_set():
                        break
            finally:
                chunks.close()  # stops llama.cpp decoding at once


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects taskset and container CPU sets
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _prompt_format_for(llama: Any) -> PromptFormat:
    model = llama._model  # the vocabulary has no public accessor
    inert = Neutralizer(_control_tokens(model))
    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        return CompletionFormat(inert)
    return ChatTemplateFormat(
        template,
        bos_token=model.token_get_text(llama.token_bos()),
        eos_token=model.token_get_text(llama.token_eos()),
        inert=inert,
    )


def _control_tokens(model: Any) -> list[str]:
    """The texts of the vocabulary's control tokens (Gemma 3 has ~6,000: 0.1 s to list)."""
    from llama_cpp import LLAMA_TOKEN_ATTR_CONTROL

    return [
        model.token_get_text(token)
        for token in range(model.n_vocab())
        if model.token_get_attr(token) & LLAMA_TOKEN_ATTR_CONTROL
    ]


_SOURCE_LINE = re.compile(r"^\[1\] [^\n]*?\(page \d+\): ([^\n]+)$", re.MULTILINE)


@dataclass
class FakeGenerator:
    """Deterministic stand-in: quotes the last prompt's first source, one word per token.

    ``enqueue`` scripts the next responses (a list of tokens each); ``history`` records
    every request, as simonw/llm's MockModel does. Like ``LlamaGenerator`` it serves one
    stream at a time, so tests see the same queueing and cancellation behaviour.
    """

    model_id: str = "fake"
    device: str = "CPU"
    context_tokens: int = 4096
    token_delay_s: float = 0.0
    prompt_format: PromptFormat = field(default_factory=CompletionFormat)
    history: list[GenerationRequest] = field(default_factory=list)
    _scripted: deque[list[str]] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enqueue(self, tokens: Sequence[str]) -> None:
        self._scripted.append(list(tokens))

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def stream(self, request: GenerationRequest, cancel: threading.Event) -> Iterator[str]:
        with self._lock:
            self.history.append(request)
            tokens = self._scripted.popleft() if self._scripted else self._default(request.prompt)
            for token in tokens[: request.max_tokens]:
                if cancel.wait(self.token_delay_s) if self.token_delay_s else cancel.is_set():
                    return
                yield token

    @staticmethod
    def _default(prompt: str) -> list[str]:
        sources = _SOURCE_LINE.findall(prompt)
        if len(sources) < 2:  # the first is the worked example in the instructions
            return ["The", " documents", " do", " not", " cover", " that."]
        words = sources[-1].split()[:30]
        return [" " + w if i else w for i, w in enumerate(["According", "to", "[1],", *words])]
