"""Settings -> how to load each named model (a local GGUF engine or a remote server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.config.settings import ModelEntry, Settings
from llm.backend import Backend
from llm.engine.engine import EngineObserver
from llm.local import LocalModel, LocalModelConfig
from llm.models import bundled_generator_model
from llm.remote import RemoteBackend


def loaders_for(
    settings: Settings, observer: EngineObserver
) -> tuple[dict[str, Callable[[], Backend]], str]:
    """Loaders by model name, and the name of the default model (``generator_model`` or
    the bundled one, registered under its file stem)."""
    default_path = settings.generator_model or bundled_generator_model(settings.models_dir)
    entries: dict[str, ModelEntry] = {default_path.stem: ModelEntry(path=default_path)}
    entries.update(settings.models)
    loaders = {name: _loader(settings, name, entry, observer) for name, entry in entries.items()}
    return loaders, default_path.stem


def _loader(
    settings: Settings, name: str, entry: ModelEntry, observer: EngineObserver
) -> Callable[[], Backend]:
    if entry.url is not None:
        url = entry.url
        key = entry.api_key.get_secret_value() if entry.api_key else None

        def remote() -> Backend:
            return RemoteBackend(
                name,
                url,
                remote_model=entry.remote_model,
                api_key=key,
                context_tokens=settings.n_ctx,
                max_tokens_cap=settings.max_tokens_cap,
                timeout_s=settings.request_timeout_s,
            )

        return remote
    assert entry.path is not None
    path: Path = entry.path

    def local() -> Backend:
        return LocalModel(_local_config(settings, name, path), observer)

    return local


def _local_config(settings: Settings, name: str, path: Path) -> LocalModelConfig:
    return LocalModelConfig(
        name=name,
        path=path,
        context_tokens=settings.n_ctx,
        parallel=settings.parallel,
        kv_cells=settings.kv_cache_tokens,
        n_batch=settings.n_batch,
        prefill_chunk=settings.prefill_chunk_tokens,
        n_threads=settings.n_threads,
        n_gpu_layers=settings.n_gpu_layers,
        main_gpu=settings.main_gpu,
        tensor_split=tuple(settings.tensor_split),
        flash_attn=settings.flash_attn,
        type_k=settings.kv_type_k,
        type_v=settings.kv_type_v,
        max_tokens_cap=settings.max_tokens_cap,
        max_waiting=settings.max_waiting_requests,
        max_waiting_tokens=settings.max_waiting_tokens,
        batch_invariant=settings.batch_invariant,
        kv_disk_dir=settings.kv_dir,
        kv_disk_bytes=settings.kv_disk_mb << 20,
    )
