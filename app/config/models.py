"""Settings -> how to load each named model (a local GGUF engine or a remote server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.config.settings import ModelEntry, Settings
from llm.backend import Backend
from llm.engine.engine import EngineObserver
from llm.local import LocalModel
from llm.models import bundled_generator_model
from llm.remote import RemoteBackend


def loaders_for(
    settings: Settings, observer: EngineObserver
) -> tuple[dict[str, Callable[[], Backend]], str]:
    """Loaders by model name, and the name of the default model (``generator_model`` or
    the bundled one, registered under its file stem)."""
    default_path = settings.generation.generator_model or bundled_generator_model(
        settings.models_dir
    )
    entries: dict[str, ModelEntry] = {default_path.stem: ModelEntry(path=default_path)}
    entries.update(settings.generation.models)
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
                context_tokens=settings.generation.context_tokens,
                max_tokens_cap=settings.generation.max_tokens_cap,
                timeout_s=settings.generation.request_timeout_s,
            )

        return remote
    assert entry.path is not None
    path: Path = entry.path

    def local() -> Backend:
        return LocalModel(settings.generation.local_config(name, path, settings.kv_dir), observer)

    return local
