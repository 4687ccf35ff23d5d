"""Load a GGUF file into a running ``Engine`` with everything the app asks of a backend."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from llm.channel import Completion
from llm.chat_format import ChatTemplate, checked_chat_template
from llm.engine.engine import Engine, EngineConfig, EngineObserver
from llm.engine.grammar_compile import DEFAULT_SLOTS, DEFAULT_TIMEOUT_S, GrammarCompiler
from llm.engine.kv_disk import KvDiskCache
from llm.engine.speculative import Speculation, SpeculativeConfig, SpeculativeMethod
from llm.inert import Neutralizer
from llm.params import BackendStats, CompletionRequest
from llm.prompt import ChatTemplateFormat, CompletionFormat, PromptFormat

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from llm.engine.native import NativeModel

log = logging.getLogger(__name__)
_Part = TypeVar("_Part", bound="DataclassInstance")


@dataclass(frozen=True)
class LocalModelConfig:
    name: str
    path: Path
    context_tokens: int = 4096
    parallel: int = 8
    kv_cells: int | None = None  # None: context_tokens * parallel / 2 (prefixes are shared)
    n_batch: int = 512
    prefill_chunk: int = 512
    n_threads: int | None = None
    n_gpu_layers: int = 0
    main_gpu: int = 0
    tensor_split: tuple[float, ...] = ()
    flash_attn: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"
    max_tokens_cap: int = 2048
    max_waiting: int = 64
    max_waiting_tokens: int = 65536
    batch_invariant: bool = False
    swa_full: bool = True
    kv_disk_dir: Path | None = None
    kv_disk_bytes: int = 0
    kv_disk_min_free_bytes: int = 0
    speculative: SpeculativeMethod = "off"
    speculative_tokens: int = 4
    speculative_max_running: int = 2
    draft_model: Path | None = None  # the GGUF that drafts for this one ("draft-model")
    # Grammar compiles (llm/engine/grammar_compile.py), when no compiler is handed in.
    grammar_compile_timeout_s: float = DEFAULT_TIMEOUT_S
    grammar_compile_slots: int = DEFAULT_SLOTS


class LocalModel:
    """A GGUF model served by Ragdesk's own continuous-batching engine."""

    prefetches = True  # prefill-only requests warm its KV cache (``CompletionRequest``)

    def __init__(
        self,
        config: LocalModelConfig,
        observer: EngineObserver | None = None,
        *,
        grammars: GrammarCompiler | None = None,
    ):
        """``grammars``: a compiler shared with the server's other models (its slots bound
        grammar compiles across all of them); else one of its own, from ``config``."""
        from llm.engine.native import NativeConfig, NativeModel  # loads llama.cpp: on use

        self.name = config.name
        kv_cells = config.kv_cells or max(
            config.context_tokens, config.context_tokens * config.parallel // 2
        )
        native = NativeModel(
            _passed_on(
                config,
                NativeConfig,
                model_path=config.path,
                kv_cells=kv_cells,
                n_seq_max=config.parallel + (1 if config.batch_invariant else 0),
                n_batch=max(config.n_batch, config.prefill_chunk, config.parallel),
                n_threads=config.n_threads or available_cpus(),
                # a windowed cache's cells depend on what else runs: not batch-invariant
                swa_full=config.swa_full or config.batch_invariant,
            )
        )
        disk = None
        if config.kv_disk_dir is not None and config.kv_disk_bytes > 0:
            fingerprint = f"{config.path.name}:{config.path.stat().st_size}:{kv_cells}"
            disk = KvDiskCache(
                config.kv_disk_dir / config.name,
                budget_bytes=config.kv_disk_bytes,
                model_fingerprint=fingerprint,
                min_free_bytes=config.kv_disk_min_free_bytes,
            )
        self._disk = disk
        try:
            speculation = _speculation(config, native)
        except Exception:
            native.close()
            raise
        self.engine = Engine(
            native,
            _passed_on(config, EngineConfig),
            observer=observer,
            disk=disk,
            speculation=speculation,
            grammars=grammars
            or GrammarCompiler(config.grammar_compile_timeout_s, config.grammar_compile_slots),
        )
        self.context_tokens = self.engine.context_tokens
        self.device = "GPU" if native.offloaded else "CPU"
        self.memory_bytes = native.model_bytes + kv_cells * _kv_bytes_per_cell(native)
        # The grounded layout, and the template for /v1/chat/completions.
        self.prompt_format, self.chat_template = _formats(native, config.name)
        self.native = native

    def submit(self, request: CompletionRequest) -> Completion:
        return self.engine.submit(request)

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    def stats(self) -> BackendStats:
        stats = self.engine.stats()
        if self._disk is None:
            return stats
        disk = self._disk.stats()
        return replace(
            stats,
            kv_disk_hits=disk.hits,
            kv_disk_misses=disk.misses,
            kv_disk_bytes_written=disk.bytes_written,
        )

    @property
    def idle(self) -> bool:
        return self.engine.idle

    @property
    def serving(self) -> bool:
        return self.engine.serving

    def close(self) -> None:
        self.engine.close()
        if self._disk is not None:
            self._disk.close()


def _passed_on(config: LocalModelConfig, target: type[_Part], **derived: Any) -> _Part:
    """The part of ``config`` that ``target`` (``NativeConfig``, ``EngineConfig``) takes:
    each of its fields that ``config`` has by the same name passes on as it is, and
    ``derived`` gives the rest (and overrides, where the value is worked out)."""
    own = {f.name for f in fields(config)}
    passed = {f.name: getattr(config, f.name) for f in fields(target) if f.name in own}
    return target(**{**passed, **derived})


def _speculation(config: LocalModelConfig, native: NativeModel) -> Speculation | None:
    """The drafter the config asks for; a draft model must share the target's vocabulary
    (``VocabularyMismatch`` otherwise)."""
    from llm.engine.drafting import Drafter, DraftModel, PromptLookup, check_same_vocabulary
    from llm.engine.native import NativeModel

    if config.speculative == "off":
        return None
    drafter: Drafter
    if config.speculative == "prompt-lookup":
        drafter = PromptLookup()
    elif config.draft_model is None:
        log.warning("model %s: speculative decoding by draft model, but none is set", config.name)
        return None
    else:
        # full windows: the drafter reuses and cuts its prefixes without checkpoints
        draft = NativeModel(replace(native.config, model_path=config.draft_model, swa_full=True))
        try:
            check_same_vocabulary(native, draft)
        except Exception:
            draft.close()
            raise
        drafter = DraftModel(draft)
    settings = SpeculativeConfig(
        config.speculative, config.speculative_tokens, config.speculative_max_running
    )
    return Speculation(settings, drafter, min(config.context_tokens, native.kv_cells))


def _formats(native: object, name: str) -> tuple[PromptFormat, ChatTemplate | None]:
    """The grounded prompt format and the ``/v1/chat/completions`` template of a loaded
    model (see :func:`formats_for`)."""
    from llm.engine.native import NativeModel

    assert isinstance(native, NativeModel)
    return formats_for(
        native.metadata("tokenizer.chat_template"),
        bos_token=native.token_text(native.bos),
        eos_token=native.token_text(native.eos),
        inert=Neutralizer(native.control_tokens()),
        name=name,
    )


def formats_for(
    template: str | None, *, bos_token: str, eos_token: str, inert: Neutralizer, name: str
) -> tuple[PromptFormat, ChatTemplate | None]:
    """A model's grounded prompt format and its chat template, checked once at load: the
    model's own template when it has a usable one, else the plain completion layout (and
    no template: ``/v1/chat/completions`` then uses a transcript). A template that is
    refused (too long, not valid Jinja2) is logged, and the model is served without it
    rather than not at all."""
    checked = checked_chat_template(template, bos_token=bos_token, eos_token=eos_token)
    if checked is None:
        if template:
            log.warning(
                "model %s: its chat template was refused; it is served with the plain "
                "completion layout instead",
                name,
            )
        return CompletionFormat(inert), None
    prompt_format = ChatTemplateFormat(
        checked.template, bos_token=bos_token, eos_token=eos_token, inert=inert
    )
    return prompt_format, checked


def _kv_bytes_per_cell(native: object) -> int:
    """A rough figure for the memory budget: f16 K and V for every layer."""
    from llama_cpp import llama_model_n_embd, llama_model_n_layer

    model = native.model  # type: ignore[attr-defined]
    return 2 * 2 * int(llama_model_n_layer(model)) * int(llama_model_n_embd(model)) // 2


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects taskset and container CPU sets
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
