"""Settings -> how to load each named model (a local GGUF engine or a remote server)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from app.chat.local_models import added_models
from app.config.settings import ModelEntry, Settings
from llm.backend import Backend, FakeBackend
from llm.engine.engine import EngineObserver
from llm.engine.grammar_compile import GrammarCompiler
from llm.fleet import Fleet
from llm.local import LocalModel
from llm.models import BUNDLED, bundled_model, installed
from llm.registry import Alias, Registry
from llm.remote import RemoteBackend


def build_registry(settings: Settings, observer: EngineObserver) -> Registry:
    """The configured models plus the default one, the installed bundled ones and those
    added with ``ragdesk models add``, and their aliases."""
    generation = settings.generation
    if generation.generator_backend == "fake":
        return _fake_registry(settings, observer)
    loaders, default_name = loaders_for(settings, observer)
    aliases = {name: Alias(weights) for name, weights in generation.model_aliases.items()}
    aliases.setdefault("default", Alias({default_name: 1}))
    if generation.generator_model is None and generation.bundled_model not in loaders:
        aliases.setdefault(generation.bundled_model, Alias({default_name: 1}))  # its UI name
    return Registry(loaders, aliases, memory_budget_bytes=generation.model_memory_bytes)


def _fake_registry(settings: Settings, observer: EngineObserver) -> Registry:
    """The 'fake' generator as the default, and one more fake under the name of each
    configured or added model (so choosing among models can be tried without any)."""
    generation = settings.generation

    def fake(name: str = "fake") -> FakeBackend:
        return FakeBackend(
            name=name,
            context_tokens=generation.context_tokens,
            token_delay_s=generation.fake_token_delay_s,
            observer=observer,
        )

    default = fake()
    others = sorted((set(generation.models) | set(added_models(settings))) - {default.name})
    if not others:
        return Registry.single(default, "default")
    loaders: dict[str, Callable[[], Backend]] = {default.name: lambda: default}
    loaders.update({name: functools.partial(fake, name) for name in others})
    return Registry(loaders, {"default": Alias({default.name: 1})})


def loaders_for(
    settings: Settings, observer: EngineObserver
) -> tuple[dict[str, Callable[[], Backend]], str]:
    """Loaders by model name, and the name of the default model (``generator_model`` or
    the bundled one, registered under its file stem). The other bundled models whose
    packages are installed come under their own names (assembled on first load), then
    the added models, then the configured ones (a later one wins a name). Every local
    model compiles grammars in one ``GrammarCompiler``: its slots bound them all."""
    generation = settings.generation
    grammars = GrammarCompiler(
        generation.grammar_compile_timeout_s, generation.grammar_compile_slots
    )
    default_path = generation.generator_model or bundled_model(
        settings.models_dir, generation.bundled_model
    )
    loaders = {
        model.name: _bundled_loader(settings, model.name, observer, grammars)
        for model in BUNDLED.values()
        if model.file_name != default_path.name and installed(model)
    }
    entries: dict[str, ModelEntry] = {
        name: ModelEntry(path=path) for name, path in added_models(settings).items()
    }
    entries[default_path.stem] = ModelEntry(path=default_path)
    entries.update(settings.generation.models)
    loaders.update(
        {
            name: _loader(settings, name, entry, observer, grammars)
            for name, entry in entries.items()
        }
    )
    return loaders, default_path.stem


def _bundled_loader(
    settings: Settings, name: str, observer: EngineObserver, grammars: GrammarCompiler
) -> Callable[[], Backend]:
    def local() -> Backend:
        path = bundled_model(settings.models_dir, name)  # assembled and verified once
        config = settings.generation.local_config(name, path, settings.kv_dir)
        return LocalModel(config, observer, grammars=grammars)

    return local


def _loader(
    settings: Settings,
    name: str,
    entry: ModelEntry,
    observer: EngineObserver,
    grammars: GrammarCompiler | None = None,
) -> Callable[[], Backend]:
    """``grammars``: the server's one compiler (a local model alone makes its own)."""
    if entry.url is not None:
        url = entry.url
        key = entry.api_key.get_secret_value() if entry.api_key else None

        def remote() -> Backend:
            if len(entry.endpoints) > 1:
                return Fleet(
                    name,
                    entry.endpoints,
                    remote_model=entry.remote_model,
                    api_key=key,
                    context_tokens=settings.generation.context_tokens,
                    max_tokens_cap=settings.generation.max_tokens_cap,
                    timeout_s=settings.generation.request_timeout_s,
                    health_interval_s=settings.generation.fleet_health_interval_s,
                    backoff_max_s=settings.generation.fleet_backoff_max_s,
                )
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
        config = settings.generation.local_config(name, path, settings.kv_dir)
        return LocalModel(config, observer, grammars=grammars)

    return local
