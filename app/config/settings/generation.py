"""The ``generation`` section: the models and how they generate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, Field, SecretStr, model_validator

from app.config.settings.section import Section, flat_alias
from llm.models import BUNDLED, DEFAULT_MODEL

if TYPE_CHECKING:
    from llm.local import LocalModelConfig

BundledName = Literal["gemma-3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
SpeculativeMethod = Literal["off", "prompt-lookup", "draft-model"]
KvType = Literal["f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0"]


class ModelEntry(BaseModel):
    """A local GGUF file (``path``) or remote OpenAI-compatible servers (``url``: one, or a
    list of endpoints serving the same model, a fleet: llm/fleet.py)."""

    model_config = {"extra": "forbid", "frozen": True}

    path: Path | None = None
    url: str | None = None  # the server, or the first endpoint of a fleet
    urls: tuple[str, ...] = ()  # a fleet's endpoints (from a list given as ``url``)
    remote_model: str | None = None
    api_key: SecretStr | None = None

    @model_validator(mode="before")
    @classmethod
    def _url_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("url"), list | tuple):
            urls = list(data["url"])
            data = {**data, "url": urls[0] if urls else None, "urls": urls}
        return data

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        if self.urls and self.url is None:
            object.__setattr__(self, "url", self.urls[0])  # frozen; what lists show
        if (self.path is None) == (self.url is None):
            raise ValueError("a model needs exactly one of 'path' or 'url'")
        if self.urls and (self.url not in self.urls or len(set(self.urls)) < len(self.urls)):
            raise ValueError("a fleet's 'url' list must hold distinct URLs")
        return self

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Every server of a remote model: one, or a fleet's."""
        return self.urls or ((self.url,) if self.url is not None else ())


class GenerationSettings(Section):
    """Models and how they generate (llm.local.LocalModelConfig, the registry, chat)."""

    generator_backend: Literal["llama-cpp", "fake"] = Field(
        "llama-cpp", description="'fake' streams a canned grounded answer."
    )
    fake_token_delay_s: float = Field(
        0.0, ge=0.0, le=30.0, description="Pause per token of the 'fake' generator (demos, tests)."
    )
    generator_model: Path | None = Field(
        None, description="GGUF file of the default model; unset = the bundled model below."
    )
    bundled_model: BundledName = Field(
        DEFAULT_MODEL,
        description="Bundled model used when generator_model is unset: assembled from its "
        "pinned packages and checked against its SHA-256 (ragdesk prepare).",
    )
    models: dict[str, ModelEntry] = Field(
        default_factory=dict,
        description='Extra models by name, as JSON: {"name": {"path": "x.gguf"}} or '
        '{"name": {"url": "http://host:8080", "remote_model": "..."}}; a list of URLs '
        "makes a fleet.",
    )
    fleet_health_interval_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="How often each endpoint of a fleet (a model with a list of URLs) is "
        "health-checked (/health/ready, else /v1/models).",
    )
    fleet_backoff_max_s: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="Longest wait before a failed fleet endpoint is checked again (the wait "
        "doubles from 1 s).",
    )
    model_aliases: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Alias -> {model: weight}, as JSON; 'default' is what chat uses. Weights "
        "split traffic (canary); one conversation always gets the same model.",
    )
    chat_model: str = Field("default", description="Model or alias that answers chat questions.")
    model_memory_mb: int | None = Field(
        None, ge=1, description="Memory budget for loaded models; least recently used unload."
    )
    context_tokens: int = Field(
        4096,
        ge=256,
        le=131072,
        validation_alias=flat_alias("n_ctx", "context_tokens"),
        description="Context of one request, in tokens.",
    )
    parallel: int = Field(8, ge=1, le=64, description="Sequences decoded together per model.")
    kv_cells: int | None = Field(
        None,
        ge=256,
        validation_alias=flat_alias("kv_cache_tokens", "kv_cells"),
        description="KV cells shared by all sequences; unset = n_ctx * parallel / 2.",
    )
    n_batch: int = Field(512, ge=32, le=8192, description="Most tokens in one llama_decode.")
    prefill_chunk: int = Field(
        512,
        ge=16,
        le=8192,
        validation_alias=flat_alias("prefill_chunk_tokens", "prefill_chunk"),
        description="Prompt tokens prefilled between two decode steps.",
    )
    max_waiting: int = Field(
        64,
        ge=1,
        validation_alias=flat_alias("max_waiting_requests", "max_waiting"),
        description="Queued requests per model; beyond it 503 with Retry-After.",
    )
    max_waiting_tokens: int = Field(
        65536, ge=1, description="Queued prompt tokens per model; beyond it 503."
    )
    request_timeout_s: float = Field(
        300.0, gt=0, description="Deadline of one generation request, queueing included."
    )
    max_tokens_cap: int = Field(2048, ge=1, description="Largest max_tokens a request may get.")
    grammar_compile_timeout_s: float = Field(
        5.0,
        gt=0,
        le=600,
        description="Longest a request's grammar (GBNF, JSON schema) may take to compile for "
        "a local model; longer is refused with 400, and the compile finishes in the "
        "background holding one of grammar_compile_slots.",
    )
    grammar_compile_slots: int = Field(
        2,
        ge=1,
        le=64,
        description="Grammar compiles at once, across all local models; while all are busy, "
        "a new grammar waits up to grammar_compile_timeout_s for one, then 503 with "
        "Retry-After. Requests without a grammar never wait for them.",
    )
    batch_invariant: bool = Field(
        False,
        description="Pad decode batches so greedy output never depends on load (slower alone).",
    )
    swa_full: bool = Field(
        True,
        description="Sliding-window models (Gemma 2/3, gpt-oss) keep every token's cells in "
        "their window layers too (llama.cpp's --swa-full); off: only the window, as "
        "llama-server keeps it (less memory; on 2 CPU cores measured a few % slower), with "
        "a checkpoint of it before each prompt's last tokens so a prompt that repeats or "
        "extends the last one still reuses its prefix.",
    )
    speculative: SpeculativeMethod = Field(
        "off",
        description="Speculative decoding: 'prompt-lookup' drafts by copying from the prompt, "
        "'draft-model' with the model's entry in draft_models; checked in one decode step.",
    )
    speculative_tokens: int = Field(
        4, ge=1, le=16, description="Most drafted tokens checked per sequence and step."
    )
    speculative_max_running: int = Field(
        2, ge=1, le=64, description="Speculate only while this many requests or fewer run."
    )
    draft_models: dict[str, Path] = Field(
        default_factory=dict,
        description='Model name -> the GGUF drafting for it, as JSON: {"qwen": "q-0.5b.gguf"}; '
        "it must have the same vocabulary.",
    )
    kv_disk_mb: int = Field(
        1024, ge=0, description="Disk budget for saved conversation KV state (0 = off)."
    )
    kv_disk_min_free_mb: int = Field(
        512,
        ge=0,
        description="Free space the KV state cache leaves on its disk: it evicts its oldest "
        "states (or skips a write) rather than go below, and gives space back down to this "
        "when a write of users' data fails for space.",
    )
    n_gpu_layers: int = Field(
        0, ge=-1, description="Layers offloaded to the GPU (-1 = all; 0 = CPU only)."
    )
    main_gpu: int = Field(0, ge=0, description="GPU that holds the model (or small tensors).")
    tensor_split: tuple[float, ...] = Field(
        (), description="Share of the model per GPU, e.g. [3, 1]; empty = auto."
    )
    flash_attn: Literal["auto", "on", "off"] = Field("auto", description="Flash attention.")
    type_k: KvType = Field(
        "f16",
        validation_alias=flat_alias("kv_type_k", "type_k"),
        description="KV cache type of keys (f16, q8_0, q4_0 ...).",
    )
    type_v: KvType = Field(
        "f16",
        validation_alias=flat_alias("kv_type_v", "type_v"),
        description="KV cache type of values (quantised V needs FA).",
    )
    n_threads: int | None = Field(
        None, ge=1, description="CPU threads for llama.cpp; unset = every CPU Ragdesk may use."
    )
    max_answer_tokens: int = Field(256, ge=1, le=8192, description="Cap on chat answer tokens.")
    temperature: float = Field(
        0.0, ge=0.0, le=2.0, description="Chat sampling temperature (0 = greedy)."
    )
    withhold_unsupported: bool = Field(
        True,
        description="Replace an answer that no cited passage supports anywhere with "
        "'The documents do not cover this' (it is almost always invented).",
    )
    prefetch: bool = Field(
        True,
        description="While a question is typed in the web chat (or sent to POST "
        "/api/prefetch), retrieve for the draft and prefill its grounded prompt up to the "
        "question at the lowest priority (only on a loaded model that no real request "
        "uses; a real request that arrives stops the chunk being read unless its prompt "
        "holds it, or where that cannot be done (a GPU) waits for one 128-token chunk at "
        "most), so the answer starts sooner; the answer reads its own passages either way "
        "(one more at most: prefetch_keeps_passages); drafts are not stored.",
    )
    prefetch_keeps_order: bool = Field(
        True,
        description="An answer's passages (found by its own search, as without a "
        "prefetch) are listed in the order its asker's last prefetched draft listed those "
        "of them it had, the rest after, best first, so the draft's prefill is reused when "
        "the finished question moves a passage; off: always best first, and the answer's "
        "prompt never depends on a prefetch.",
    )
    prefetch_keeps_passages: bool = Field(
        True,
        description="With prefetch_keeps_order: when the asker's last prefetched draft was "
        "read in full and listed a passage the finished question ranks below its top k "
        "but still within its top 2k above the relevance floor, the answer keeps that "
        "passage (one at most) where the draft listed it, so only the question's new "
        "passages are left to prefill; off: an answer reads its own top k only.",
    )
    check_answers: bool = Field(
        True,
        description="After a cited answer, ask the chat model (one token) whether the "
        "passages it cites state the answer to the question; when it says no, the answer "
        "is withheld as not covered. Models with a chat template only; not asked about a "
        "follow-up (a question that names its subject only through the conversation).",
    )

    @property
    def kv_disk_bytes(self) -> int:
        return self.kv_disk_mb << 20

    @property
    def kv_disk_min_free_bytes(self) -> int:
        return self.kv_disk_min_free_mb << 20

    @property
    def model_memory_bytes(self) -> int | None:
        return self.model_memory_mb << 20 if self.model_memory_mb else None

    def local_config(self, name: str, path: Path, kv_dir: Path) -> LocalModelConfig:
        """How to run the local GGUF model ``name``; its saved KV states go under ``kv_dir``."""
        from llm.local import LocalModelConfig  # the engine's module: imported on use

        return LocalModelConfig(
            name=name,
            path=path,
            kv_disk_dir=kv_dir,
            kv_disk_bytes=self.kv_disk_bytes,
            kv_disk_min_free_bytes=self.kv_disk_min_free_bytes,
            draft_model=self.draft_models.get(name) or self.draft_models.get(path.stem),
            **self._shared_with(LocalModelConfig),
        )


assert set(BUNDLED) == set(get_args(BundledName)), "BundledName lists llm.models.BUNDLED"
