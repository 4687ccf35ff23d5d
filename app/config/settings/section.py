"""What every settings section shares: its model config, its flat names, and building a
library config from the fields it shares with it."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict
from pydantic.fields import FieldInfo


def flat_alias(env_name: str, field_name: str) -> AliasChoices:
    """A field named after its library config's field, read from ``RAGDESK_<ENV_NAME>``
    (and the flat keyword ``env_name``); the field's own name is accepted too."""
    return AliasChoices(env_name, field_name)


def flat_name(name: str, field: FieldInfo) -> str:
    """The name of ``field`` in ``RAGDESK_<NAME>`` and in flat keywords."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return name


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def flat_names(cls) -> dict[str, str]:
        """Flat (``RAGDESK_``) name -> field name, for every field of the section."""
        return {flat_name(name, field): name for name, field in cls.model_fields.items()}

    def _shared_with(self, config: type[Any]) -> dict[str, Any]:
        """The section's values for the fields it shares (by name) with dataclass ``config``."""
        wanted = {field.name for field in dataclasses.fields(config)}
        return self.model_dump(include=wanted & set(type(self).model_fields))
