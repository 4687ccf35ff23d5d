"""The root ``Settings``: the sections, where values come from, and the paths derived
from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, overload

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from app.config.settings.auth import AuthSettings
from app.config.settings.embedder import EmbedderSettings
from app.config.settings.flat import SECTIONS, FlatEnvSource, route_flat_names
from app.config.settings.generation import GenerationSettings
from app.config.settings.index import IndexSettings
from app.config.settings.ingest import IngestSettings
from app.config.settings.search import SearchSettings
from app.config.settings.section import Section
from app.config.settings.server import ServerSettings

REPO_ROOT = Path(__file__).resolve().parents[3]


class _InDataDir:
    """A read-only ``Path`` attribute of a ``Settings``: ``name`` in its data directory."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, settings: None, owner: type[Settings]) -> _InDataDir: ...
    @overload
    def __get__(self, settings: Settings, owner: type[Settings]) -> Path: ...
    def __get__(self, settings: Settings | None, owner: type[Settings]) -> _InDataDir | Path:
        return self if settings is None else settings.server.data_dir / self.name


class Settings(BaseSettings):
    """Runtime configuration in sections; docs/configuration.md lists every field with its default.

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

    sections: ClassVar[dict[str, type[Section]]] = SECTIONS

    kv_dir: ClassVar[_InDataDir] = _InDataDir("kv")
    db_path: ClassVar[_InDataDir] = _InDataDir("ragdesk.db")
    index_dir: ClassVar[_InDataDir] = _InDataDir("index")
    uploads_dir: ClassVar[_InDataDir] = _InDataDir("uploads")
    models_dir: ClassVar[_InDataDir] = _InDataDir("models")
    samples_dir: ClassVar[Path] = REPO_ROOT / "data" / "samples"
    templates_dir: ClassVar[Path] = REPO_ROOT / "templates"
    static_dir: ClassVar[Path] = REPO_ROOT / "static"

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
        return route_flat_names(data) if isinstance(data, dict) else data

    @property
    def served_hosts(self) -> list[str]:
        """``allowed_hosts`` plus the address the server binds to (unless it is 'any')."""
        host = self.server.host
        bind = f"[{host}]" if ":" in host else host
        extra = [] if host in ("0.0.0.0", "::") else [bind]  # noqa: S104
        return list(dict.fromkeys([*self.server.allowed_hosts, *extra]))
