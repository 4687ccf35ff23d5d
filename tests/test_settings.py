"""Settings come from RAGDESK_* variables, are validated, sectioned, and all documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.config.settings import FLAT, ModelEntry, SearchSettings, Settings, flat_fields
from llm.local import LocalModelConfig
from retrieval.index_types import IndexSpec
from retrieval.ingest import IngestConfig
from retrieval.search import SearchConfig

README = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGDESK_PORT", "9123")
    monkeypatch.setenv("RAGDESK_N_GPU_LAYERS", "-1")
    monkeypatch.setenv("RAGDESK_GENERATOR_MODEL", "/models/other.gguf")
    settings = Settings()
    assert settings.server.port == 9123
    assert settings.generation.n_gpu_layers == -1
    assert settings.generation.generator_model == Path("/models/other.gguf")


def test_flat_environment_names_reach_their_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every name keeps its pre-section spelling, also where the field is named after its
    library config's field, and lists and dicts are still JSON."""
    env = {
        "TOP_K": "7",
        "RETRIEVAL_MODE": "bm25",
        "MAX_HITS_PER_DOCUMENT": "0",
        "INDEX_TYPE": "ivf",
        "IVF_NPROBE": "8",
        "FAISS_GPU": "false",
        "INDEX_MMAP_ABOVE_MB": "0",
        "INDEX_CHECKPOINT_SECONDS": "0.5",
        "N_CTX": "1024",
        "KV_CACHE_TOKENS": "2048",
        "PREFILL_CHUNK_TOKENS": "128",
        "KV_TYPE_K": "q8_0",
        "KV_TYPE_V": "q4_0",
        "MAX_WAITING_REQUESTS": "3",
        "EMBEDDING_CACHE_MAX_MB": "2",
        "SESSION_IDLE_S": "0",
        "EMBED_INGEST_BATCH": "4",
        "MODELS": '{"qwen": {"path": "/models/qwen.gguf"}}',
        "MODEL_ALIASES": '{"assistant": {"qwen": 90, "gemma": 10}}',
        "TENSOR_SPLIT": "[3, 1]",
        "ALLOWED_HOSTS": '["rag.example.org"]',
    }
    for name, value in env.items():
        monkeypatch.setenv(f"RAGDESK_{name}", value)
    settings = Settings()
    assert settings.search.top_k == 7
    assert settings.search.mode == "bm25"
    assert settings.search.max_per_document == 0
    assert settings.index.kind == "ivf"
    assert settings.index.nprobe == 8
    assert settings.index.use_gpu is False
    assert settings.index.mmap_above_mb == 0.0
    assert settings.ingest.checkpoint_seconds == 0.5
    assert settings.ingest.embedding_cache_max_mb == 2
    assert settings.auth.session_idle_s == 0.0
    assert settings.embedder.embed_ingest_batch == 4
    generation = settings.generation
    assert (generation.context_tokens, generation.kv_cells, generation.prefill_chunk) == (
        1024,
        2048,
        128,
    )
    assert (generation.type_k, generation.type_v, generation.max_waiting) == ("q8_0", "q4_0", 3)
    assert generation.models == {"qwen": ModelEntry(path=Path("/models/qwen.gguf"))}
    assert generation.model_aliases == {"assistant": {"qwen": 90.0, "gemma": 10.0}}
    assert generation.tensor_split == (3.0, 1.0)
    assert settings.server.allowed_hosts == ["rag.example.org"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RAGDESK_PORT", "0"),
        ("RAGDESK_TOP_K", "1000"),
        ("RAGDESK_EMBEDDER_BACKEND", "magic"),
        ("RAGDESK_IVF_NPROBE", "0"),
        ("RAGDESK_KV_TYPE_K", "q3"),
    ],
)
def test_absurd_values_are_rejected(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_a_list_that_is_not_json_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGDESK_ALLOWED_HOSTS", "rag.example.org")
    with pytest.raises(SettingsError, match="allowed_hosts"):
        Settings()


def test_flat_and_nested_keywords_are_the_same_settings(tmp_path: Path) -> None:
    flat = Settings(top_k=3, data_dir=tmp_path, embedder_backend="fake", ivf_nprobe=8, n_ctx=512)
    nested = Settings(
        search={"top_k": 3},
        server={"data_dir": tmp_path},
        embedder={"embedder_backend": "fake"},
        index={"nprobe": 8},
        generation={"context_tokens": 512},
    )
    assert flat == nested
    assert flat.search.top_k == 3 and flat.server.data_dir == tmp_path
    assert flat.index.nprobe == 8 and flat.generation.context_tokens == 512
    assert Settings(search=SearchSettings(top_k=3)).search.top_k == 3
    assert Settings(index={"ivf_nprobe": 8}).index.nprobe == 8  # the flat name, nested
    assert flat.db_path == tmp_path / "ragdesk.db" and flat.kv_dir == tmp_path / "kv"


def test_keywords_beat_the_environment_field_by_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGDESK_TOP_K", "7")
    monkeypatch.setenv("RAGDESK_MIN_SCORE", "0.5")
    assert Settings(top_k=3).search.top_k == 3
    nested = Settings(search={"top_k": 3})
    assert (nested.search.top_k, nested.search.min_score) == (3, 0.5)
    assert Settings(search={"top_k": 2}, top_k=3).search.top_k == 3  # flat beats nested


@pytest.mark.parametrize(
    "values",
    [
        {"bogus": 1},
        {"search": {"bogus": 1}},
        {"top_k": 0},
        {"search": {"top_k": 51}},
        {"tls_certfile": "cert.pem"},  # without its key file
    ],
)
def test_unknown_or_invalid_keywords_are_errors(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(**values)  # type: ignore[arg-type]


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.search.top_k = 3  # type: ignore[misc]


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = README.read_text()
    seen = 0
    for flat, section, name, field in flat_fields():
        assert f"`RAGDESK_{flat.upper()}`" in readme, (section, name)
        assert field.description, (section, name)
        seen += 1
    assert seen == len(FLAT) == sum(len(model.model_fields) for model in Settings.sections.values())
    assert set(Settings.model_fields) == set(Settings.sections)


def test_the_readme_lists_no_variable_that_does_not_exist() -> None:
    mentioned = set(re.findall(r"RAGDESK_([A-Z][A-Z0-9_]*)", README.read_text()))
    assert mentioned, "the README's table is gone"
    assert sorted(name for name in mentioned if name.lower() not in FLAT) == []


# What app/config/retrieval.py and app/config/models.py built, field by field, before the
# sections: the configs built from the sections must be the same objects.


def test_the_index_spec_is_the_index_section() -> None:
    assert Settings().index.spec() == IndexSpec(
        kind="auto", ivf_threshold=50_000, nprobe=64, use_gpu=True, mmap_above_mb=512.0
    )
    changed = Settings(
        index_type="ivf", ivf_threshold=2000, ivf_nprobe=8, faiss_gpu=False, index_mmap_above_mb=0
    )
    assert changed.index.spec() == IndexSpec(
        kind="ivf", ivf_threshold=2000, nprobe=8, use_gpu=False, mmap_above_mb=0.0
    )


def test_the_ingest_config_is_the_ingest_section() -> None:
    assert Settings().ingest.config() == IngestConfig(
        chunk_tokens=200,
        chunk_overlap_tokens=40,
        checkpoint_seconds=5.0,
        embedding_cache_max_bytes=128 << 20,
        parse_processes=2,
    )
    changed = Settings(
        chunk_tokens=100,
        chunk_overlap_tokens=10,
        index_checkpoint_seconds=0.5,
        embedding_cache_max_mb=3,
        parse_processes=4,
        parse_memory_mb=512,
    )
    assert changed.ingest.config() == IngestConfig(
        chunk_tokens=100,
        chunk_overlap_tokens=10,
        checkpoint_seconds=0.5,
        embedding_cache_max_bytes=3 << 20,
        parse_processes=4,
    )
    assert changed.ingest.parse_memory_bytes == 512 << 20
    assert Settings(embedding_cache_max_mb=0).ingest.config().embedding_cache_max_bytes == 0


def test_the_search_config_is_the_search_section() -> None:
    assert Settings().search.config() == SearchConfig(
        mode="hybrid",
        rrf_k=60.0,
        dense_weight=1.0,
        bm25_weight=1.0,
        max_per_document=0,
        mmr_lambda=0.85,
        expand_below_chars=0,
        rerank_candidates=20,
    )
    changed = Settings(
        retrieval_mode="dense",
        rrf_k=10,
        dense_weight=0.5,
        bm25_weight=2,
        max_hits_per_document=0,
        expand_below_chars=300,
        rerank_candidates=40,
        top_k=9,  # not the config's: the chat and API pass k per search
    )
    assert changed.search.config() == SearchConfig(
        mode="dense",
        rrf_k=10.0,
        dense_weight=0.5,
        bm25_weight=2.0,
        max_per_document=0,
        mmr_lambda=0.85,
        expand_below_chars=300,
        rerank_candidates=40,
    )


def test_the_local_model_config_is_the_generation_section(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    defaults = Settings(data_dir=tmp_path)
    assert defaults.generation.local_config("m", gguf, defaults.kv_dir) == LocalModelConfig(
        name="m",
        path=gguf,
        context_tokens=4096,
        parallel=8,
        kv_cells=None,
        n_batch=512,
        prefill_chunk=512,
        n_threads=None,
        n_gpu_layers=0,
        main_gpu=0,
        tensor_split=(),
        flash_attn="auto",
        type_k="f16",
        type_v="f16",
        max_tokens_cap=2048,
        max_waiting=64,
        max_waiting_tokens=65536,
        batch_invariant=False,
        kv_disk_dir=tmp_path / "kv",
        kv_disk_bytes=1024 << 20,
        kv_disk_min_free_bytes=512 << 20,
    )
    changed = Settings(
        data_dir=tmp_path,
        n_ctx=2048,
        parallel=2,
        kv_cache_tokens=3000,
        n_batch=256,
        prefill_chunk_tokens=128,
        n_threads=3,
        n_gpu_layers=-1,
        main_gpu=1,
        tensor_split=[3, 1],
        flash_attn="on",
        kv_type_k="q8_0",
        kv_type_v="q4_0",
        max_tokens_cap=512,
        max_waiting_requests=5,
        max_waiting_tokens=1000,
        batch_invariant=True,
        kv_disk_mb=0,
        model_memory_mb=100,
        temperature=1.0,  # the chat's, not the engine's
    )
    assert changed.generation.local_config("m", gguf, changed.kv_dir) == LocalModelConfig(
        name="m",
        path=gguf,
        context_tokens=2048,
        parallel=2,
        kv_cells=3000,
        n_batch=256,
        prefill_chunk=128,
        n_threads=3,
        n_gpu_layers=-1,
        main_gpu=1,
        tensor_split=(3.0, 1.0),
        flash_attn="on",
        type_k="q8_0",
        type_v="q4_0",
        max_tokens_cap=512,
        max_waiting=5,
        max_waiting_tokens=1000,
        batch_invariant=True,
        kv_disk_dir=tmp_path / "kv",
        kv_disk_bytes=0,
        kv_disk_min_free_bytes=512 << 20,
    )
    assert changed.generation.model_memory_bytes == 100 << 20
    assert Settings().generation.model_memory_bytes is None
