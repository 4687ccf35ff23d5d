"""The one typed Settings object, in sections; each field is read from ``RAGDESK_<NAME>``.

Sections map onto one library config or one app feature. Where a library config object
exists, the section's field names are the config's own (``IndexSettings.nprobe`` is
``IndexSpec.nprobe``), so the config is built from the section's fields at once
(``settings.index.spec()``), never copied field by field. The environment names stay flat
and unchanged: a field whose name differs from its variable (``RAGDESK_IVF_NPROBE``) takes
that name as its first validation alias, and that alias is also the flat keyword
``Settings(ivf_nprobe=...)`` accepts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from retrieval.index_types import IndexSpec
from retrieval.ingest import IngestConfig
from retrieval.search import SearchConfig

if TYPE_CHECKING:
    from llm.local import LocalModelConfig

REPO_ROOT = Path(__file__).resolve().parents[2]

KvType = Literal["f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0"]


class ModelEntry(BaseModel):
    """A local GGUF file (``path``) or a remote OpenAI-compatible server (``url``)."""

    model_config = {"extra": "forbid", "frozen": True}

    path: Path | None = None
    url: str | None = None
    remote_model: str | None = None
    api_key: SecretStr | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        if (self.path is None) == (self.url is None):
            raise ValueError("a model needs exactly one of 'path' or 'url'")
        return self


def _flat(env_name: str, field_name: str) -> AliasChoices:
    """A field named after its library config's field, read from ``RAGDESK_<ENV_NAME>``
    (and the flat keyword ``env_name``); the field's own name is accepted too."""
    return AliasChoices(env_name, field_name)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def flat_names(cls) -> dict[str, str]:
        """Flat (``RAGDESK_``) name -> field name, for every field of the section."""
        return {flat_name(name, field): name for name, field in cls.model_fields.items()}

    def _shared_with(self, config: type[Any]) -> dict[str, Any]:
        """The section's values for the fields it shares (by name) with dataclass ``config``."""
        wanted = {field.name for field in dataclasses.fields(config)}
        return self.model_dump(include=wanted & set(type(self).model_fields))


def flat_name(name: str, field: FieldInfo) -> str:
    """The name of ``field`` in ``RAGDESK_<NAME>`` and in flat keywords."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return name


class ServerSettings(_Section):
    """The HTTP server and its data directory."""

    host: str = Field("127.0.0.1", description="Interface the HTTP server binds to.")
    port: int = Field(8000, ge=1, le=65535, description="TCP port of the HTTP server.")
    data_dir: Path = Field(
        Path("data"),
        description="Where the SQLite database, FAISS index, uploads and model files live.",
    )
    max_upload_bytes: int = Field(
        50 * 1024 * 1024, gt=0, description="Largest accepted request body; larger gets 413."
    )
    load_samples: bool = Field(
        True, description="Index the bundled user guide and FAQ on the very first start."
    )
    tls_certfile: Path | None = Field(
        None, description="PEM certificate: serve HTTPS (with tls_keyfile)."
    )
    tls_keyfile: Path | None = Field(None, description="PEM private key of tls_certfile.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses (or CIDR ranges) of reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed; empty = none.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=lambda: ["localhost", "127.0.0.1", "[::1]"],
        description="Host header values served (others get 400); the bind address is added; "
        "'*.example.org' matches subdomains. No wildcard by default.",
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Other web origins whose scripts may call the API with a key; empty = none.",
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together")
        return self


class AuthSettings(_Section):
    """Accounts and access: sessions, password hashing, throttles, rate limits (app/auth)."""

    session_lifetime_s: float = Field(
        43200.0, ge=60, le=90 * 86400, description="How long a browser session lasts."
    )
    session_idle_s: float = Field(
        7200.0,
        ge=0,
        le=90 * 86400,
        description="A browser session unused this long ends (the UI's own background polls "
        "do not count as use); 0 = no idle timeout, only session_lifetime_s.",
    )
    cookie_secure: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Mark the session cookie Secure: 'auto' when the request came over HTTPS.",
    )
    password_time_cost: int = Field(3, ge=1, le=20, description="argon2id passes per hash.")
    password_memory_kib: int = Field(
        65536, ge=8, le=4 * 1024 * 1024, description="argon2id memory per hash, in KiB."
    )
    password_parallelism: int = Field(4, ge=1, le=16, description="argon2id lanes.")
    login_max_failures_per_user: int = Field(
        5, ge=1, description="Failed logins for one user name within the window; then 429."
    )
    login_max_failures_per_address: int = Field(
        20, ge=1, description="Failed logins from one client address within the window."
    )
    login_failure_window_s: float = Field(
        900.0, gt=0, description="Window in which failed logins and API keys are counted."
    )
    key_max_failures_per_address: int = Field(
        30,
        ge=1,
        description="Wrong or unknown API keys from one client address within "
        "login_failure_window_s; then every key from it gets 429 until the window moves on.",
    )
    rate_limit_per_minute: float = Field(
        600.0, ge=0, description="Requests a minute per API key or user (0 = no limit)."
    )
    rate_limit_burst: int = Field(
        120, ge=1, description="Requests a key or user may make at once before the rate applies."
    )


class EmbedderSettings(_Section):
    """The embedding model and the batcher that shares its passes (retrieval/batching.py)."""

    embedder_backend: Literal["sentence-transformers", "onnx", "onnx-int8", "fake"] = Field(
        "sentence-transformers",
        description="'onnx' runs the same model on ONNX Runtime (exported on first use, same "
        "vectors); 'onnx-int8' quantises it (faster, re-embeds everything once); 'fake' is a "
        "deterministic hashing embedder.",
    )
    embedder_model: Path | None = Field(
        None,
        description="sentence-transformers model directory; unset = bundled all-MiniLM-L6-v2.",
    )
    embed_batch_size: int = Field(
        32, ge=1, le=1024, description="Chunks per embedding forward pass."
    )
    embed_max_wait_ms: float = Field(
        2.0,
        ge=0,
        le=1000,
        description="How long a part-full embedding batch waits for more "
        "callers (questions and ingestion share passes; questions first). 0 = no wait.",
    )
    embed_ingest_batch: int = Field(
        8,
        ge=1,
        le=1024,
        description="Chunks per ingestion forward pass: a question waits for one in flight at "
        "most, so smaller means faster answers during uploads (docs/BENCHMARKS.md).",
    )
    embed_query_threads: int = Field(
        0, ge=0, le=256, description="PyTorch threads for question batches (0 = default)."
    )
    embed_ingest_threads: int = Field(
        0,
        ge=0,
        le=256,
        description="PyTorch threads for ingestion batches (0 = default); "
        "fewer leaves cores to chat while documents are embedded.",
    )
    embed_ingest_yield_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="While a model is generating, each ingestion batch waits up to this long "
        "for it to finish, so answers do not share the CPU with ingestion (0 = never wait).",
    )


class IngestSettings(_Section):
    """Ingestion: chunking, the sandboxed parsers, checkpoints, the embedding cache
    (retrieval.ingest.IngestConfig)."""

    chunk_tokens: int = Field(200, ge=16, le=2048, description="Largest chunk, in embedder tokens.")
    chunk_overlap_tokens: int = Field(
        40, ge=0, le=512, description="Tokens repeated between neighbouring chunks."
    )
    checkpoint_seconds: float = Field(
        5.0,
        ge=0.0,
        validation_alias=_flat("index_checkpoint_seconds", "checkpoint_seconds"),
        description="Quiet period after ingestion before the FAISS file is saved.",
    )
    parse_timeout_s: float = Field(
        120.0, gt=0, le=3600, description="Time budget to parse one document; then it fails."
    )
    parse_memory_mb: int = Field(
        2048,
        ge=256,
        description="Memory cap of each parser process (bombs fail, not the server).",
    )
    parse_processes: int = Field(
        2,
        ge=1,
        le=64,
        description="Documents parsed at once, each in its own sandboxed process, taken in "
        "turn from each collection: one collection's slow file never holds up the others.",
    )
    embedding_cache_max_mb: int = Field(
        128,
        ge=0,
        description="Cached vectors that no passage needs now (deleted documents, models "
        "used before a reindex) are kept up to this size, least recently used evicted "
        "first; vectors of live passages are always kept (0 = keep none).",
    )

    @property
    def embedding_cache_max_bytes(self) -> int:
        return self.embedding_cache_max_mb << 20

    @property
    def parse_memory_bytes(self) -> int:
        return self.parse_memory_mb << 20

    def config(self) -> IngestConfig:
        """The ingest worker's config (``parse_processes``: one slot per parser process)."""
        return IngestConfig(
            **self._shared_with(IngestConfig),
            embedding_cache_max_bytes=self.embedding_cache_max_bytes,
        )


class SearchSettings(_Section):
    """What a question retrieves: fusion, limits, the reranker (retrieval.search.SearchConfig)."""

    top_k: int = Field(4, ge=1, le=50, description="Sources retrieved for each question.")
    min_score: float = Field(
        0.25,
        ge=-1.0,
        le=1.0,
        description="Cosine similarity below which a hit is not relevant enough to cite.",
    )
    mode: Literal["hybrid", "dense", "bm25"] = Field(
        "hybrid",
        validation_alias=_flat("retrieval_mode", "mode"),
        description="hybrid fuses vector (dense) and full-text (BM25) search; or one alone.",
    )
    rrf_k: float = Field(
        60.0, gt=0, le=1000, description="Reciprocal rank fusion constant k (hybrid mode)."
    )
    dense_weight: float = Field(
        1.0, ge=0, le=10, description="Weight of the vector ranking in hybrid fusion."
    )
    bm25_weight: float = Field(
        1.0, ge=0, le=10, description="Weight of the BM25 ranking in hybrid fusion."
    )
    max_per_document: int = Field(
        2,
        ge=0,
        le=50,
        validation_alias=_flat("max_hits_per_document", "max_per_document"),
        description="Most sources from one document per question (0 = no limit).",
    )
    expand_below_chars: int = Field(
        0,
        ge=0,
        le=10_000,
        description="A source shorter than this is widened over the "
        "chunks beside it on its page (0 = off).",
    )
    reranker: Literal["none", "cross-encoder", "llm"] = Field(
        "none",
        description="Second stage reordering the fused candidates before the top k: a local "
        "cross-encoder, or 'llm' (a GGUF model's yes/no judgement of each passage).",
    )
    reranker_model: Path | None = Field(
        None,
        description="cross-encoder: its local sentence-transformers directory (never fetched); "
        "llm: a GGUF file, unset = the bundled Gemma 3 270M.",
    )
    rerank_candidates: int = Field(
        20, ge=1, le=200, description="Fused candidates the reranker reorders."
    )

    def config(self) -> SearchConfig:
        return SearchConfig(**self._shared_with(SearchConfig))


class IndexSettings(_Section):
    """The FAISS index structure (retrieval.index_types.IndexSpec)."""

    kind: Literal["auto", "flat", "ivf"] = Field(
        "auto",
        validation_alias=_flat("index_type", "kind"),
        description="FAISS structure: 'flat' is exact; 'ivf' clusters vectors and searches "
        "the nearest lists; 'auto' is flat below ivf_threshold vectors, IVF from there.",
    )
    ivf_threshold: int = Field(
        50_000, ge=1000, description="Vectors from which 'auto' builds an IVF index."
    )
    nprobe: int = Field(
        64,
        ge=1,
        le=65536,
        validation_alias=_flat("ivf_nprobe", "nprobe"),
        description="IVF lists a query visits (more: better recall, slower).",
    )
    use_gpu: bool = Field(
        True,
        validation_alias=_flat("faiss_gpu", "use_gpu"),
        description="Search on the GPUs when FAISS reports any (faiss-gpu build).",
    )
    mmap_above_mb: float = Field(
        512.0,
        ge=0,
        validation_alias=_flat("index_mmap_above_mb", "mmap_above_mb"),
        description="Search FAISS checkpoints of this size or more memory-mapped from disk "
        "instead of loading them into memory (0: always).",
    )

    def spec(self) -> IndexSpec:
        return IndexSpec(**self._shared_with(IndexSpec))


class GenerationSettings(_Section):
    """Models and how they generate (llm.local.LocalModelConfig, the registry, chat)."""

    generator_backend: Literal["llama-cpp", "fake"] = Field(
        "llama-cpp", description="'fake' streams a canned grounded answer."
    )
    fake_token_delay_s: float = Field(
        0.0, ge=0.0, le=5.0, description="Pause per token of the 'fake' generator (demos, tests)."
    )
    generator_model: Path | None = Field(
        None, description="GGUF file; unset = the bundled Gemma 3 270M (Q4_K_M)."
    )
    models: dict[str, ModelEntry] = Field(
        default_factory=dict,
        description='Extra models by name, as JSON: {"name": {"path": "x.gguf"}} or '
        '{"name": {"url": "http://host:8080", "remote_model": "..."}}.',
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
        validation_alias=_flat("n_ctx", "context_tokens"),
        description="Context of one request, in tokens.",
    )
    parallel: int = Field(8, ge=1, le=64, description="Sequences decoded together per model.")
    kv_cells: int | None = Field(
        None,
        ge=256,
        validation_alias=_flat("kv_cache_tokens", "kv_cells"),
        description="KV cells shared by all sequences; unset = n_ctx * parallel / 2.",
    )
    n_batch: int = Field(512, ge=32, le=8192, description="Most tokens in one llama_decode.")
    prefill_chunk: int = Field(
        512,
        ge=16,
        le=8192,
        validation_alias=_flat("prefill_chunk_tokens", "prefill_chunk"),
        description="Prompt tokens prefilled between two decode steps.",
    )
    max_waiting: int = Field(
        64,
        ge=1,
        validation_alias=_flat("max_waiting_requests", "max_waiting"),
        description="Queued requests per model; beyond it 503 with Retry-After.",
    )
    max_waiting_tokens: int = Field(
        65536, ge=1, description="Queued prompt tokens per model; beyond it 503."
    )
    request_timeout_s: float = Field(
        300.0, gt=0, description="Deadline of one generation request, queueing included."
    )
    max_tokens_cap: int = Field(2048, ge=1, description="Largest max_tokens a request may get.")
    batch_invariant: bool = Field(
        False,
        description="Pad decode batches so greedy output never depends on load (slower alone).",
    )
    kv_disk_mb: int = Field(
        1024, ge=0, description="Disk budget for saved conversation KV state (0 = off)."
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
        validation_alias=_flat("kv_type_k", "type_k"),
        description="KV cache type of keys (f16, q8_0, q4_0 ...).",
    )
    type_v: KvType = Field(
        "f16",
        validation_alias=_flat("kv_type_v", "type_v"),
        description="KV cache type of values (quantised V needs FA).",
    )
    n_threads: int | None = Field(
        None, ge=1, description="CPU threads for llama.cpp; unset = every CPU Ragdesk may use."
    )
    max_answer_tokens: int = Field(256, ge=1, le=8192, description="Cap on chat answer tokens.")
    temperature: float = Field(0.2, ge=0.0, le=2.0, description="Chat sampling temperature.")

    @property
    def kv_disk_bytes(self) -> int:
        return self.kv_disk_mb << 20

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
            **self._shared_with(LocalModelConfig),
        )


SECTIONS: dict[str, type[_Section]] = {
    "server": ServerSettings,
    "auth": AuthSettings,
    "embedder": EmbedderSettings,
    "ingest": IngestSettings,
    "search": SearchSettings,
    "index": IndexSettings,
    "generation": GenerationSettings,
}


def flat_fields() -> Iterator[tuple[str, str, str, FieldInfo]]:
    """(flat name, section, field name, field) of every setting, in section order."""
    for section, model in SECTIONS.items():
        for flat, name in model.flat_names().items():
            yield flat, section, name, model.model_fields[name]


FLAT: dict[str, tuple[str, str]] = {
    flat: (section, name) for flat, section, name, _ in flat_fields()
}
assert len(FLAT) == sum(len(model.model_fields) for model in SECTIONS.values()), "a name twice"


class FlatEnvSource(EnvSettingsSource):
    """Reads ``RAGDESK_<NAME>`` for every field of every section (the names are flat,
    as before sections); complex values (lists, dicts) are JSON, as pydantic-settings reads
    them. Returns ``{section: {field: value}}``."""

    def __call__(self) -> dict[str, Any]:
        values: dict[str, dict[str, Any]] = {}
        for flat, section, name, field in flat_fields():
            raw = self.env_vars.get(self._apply_case_sensitive(self.env_prefix + flat))
            if raw is None:
                continue
            try:
                value = self.prepare_field_value(name, field, raw, False)
            except ValueError as exc:
                raise SettingsError(
                    f'error parsing value for field "{flat}" from source "{type(self).__name__}"'
                ) from exc
            if value is not None:
                values.setdefault(section, {})[name] = value
        return values


class Settings(BaseSettings):
    """Runtime configuration in sections; README.md lists every field with its default.

    Flat keywords still work and go to their section (``Settings(top_k=3)`` is
    ``Settings(search={"top_k": 3})``); a flat keyword beats a nested one for the same field.
    """

    model_config = SettingsConfigDict(env_prefix="RAGDESK_", extra="forbid", frozen=True)

    server: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    generation: GenerationSettings = Field(default_factory=GenerationSettings)

    sections: ClassVar[dict[str, type[_Section]]] = SECTIONS

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, FlatEnvSource(settings_cls))

    @model_validator(mode="before")
    @classmethod
    def _route_flat_names(cls, data: Any) -> Any:
        """Flat keys (``top_k``) into their section, under the section's field name."""
        if not isinstance(data, dict):
            return data
        routed: dict[str, Any] = {}
        flat: list[tuple[str, str, Any]] = []
        for key, value in data.items():
            if key in FLAT:
                section, name = FLAT[key]
                flat.append((section, name, value))
            elif key in SECTIONS and isinstance(value, BaseModel):
                routed[key] = value.model_dump(exclude_unset=True)
            elif key in SECTIONS and isinstance(value, dict):
                routed[key] = dict(value)
            else:
                routed[key] = value  # an unknown key: extra="forbid" reports it
        for section, name, value in flat:
            target = routed.setdefault(section, {})
            if not isinstance(target, dict):
                raise ValueError(f"{section} must be a mapping of its fields")
            target[name] = value
        return routed

    @property
    def served_hosts(self) -> list[str]:
        """``allowed_hosts`` plus the address the server binds to (unless it is 'any')."""
        host = self.server.host
        bind = f"[{host}]" if ":" in host else host
        extra = [] if host in ("0.0.0.0", "::") else [bind]  # noqa: S104
        return list(dict.fromkeys([*self.server.allowed_hosts, *extra]))

    @property
    def kv_dir(self) -> Path:
        return self.server.data_dir / "kv"

    @property
    def db_path(self) -> Path:
        return self.server.data_dir / "ragdesk.db"

    @property
    def index_dir(self) -> Path:
        return self.server.data_dir / "index"

    @property
    def uploads_dir(self) -> Path:
        return self.server.data_dir / "uploads"

    @property
    def models_dir(self) -> Path:
        return self.server.data_dir / "models"

    @property
    def samples_dir(self) -> Path:
        return REPO_ROOT / "data" / "samples"

    @property
    def templates_dir(self) -> Path:
        return REPO_ROOT / "templates"

    @property
    def static_dir(self) -> Path:
        return REPO_ROOT / "static"
