"""The flat names: every field of every section read from ``RAGDESK_<NAME>``, and given as
the flat keyword ``Settings(<name>=...)``, as before there were sections."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import EnvSettingsSource, SettingsError

from app.config.settings.auth import AuthSettings
from app.config.settings.embedder import EmbedderSettings
from app.config.settings.generation import GenerationSettings
from app.config.settings.index import IndexSettings
from app.config.settings.ingest import IngestSettings
from app.config.settings.search import SearchSettings
from app.config.settings.section import Section
from app.config.settings.server import ServerSettings

# Each section under its name in Settings, in order.
SECTIONS: dict[str, type[Section]] = {
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


def route_flat_names(data: dict[str, Any]) -> dict[str, Any]:
    """Flat keys (``top_k``) into their section, under the section's field name; a flat
    key beats a nested one for the same field."""
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
