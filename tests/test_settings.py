"""Settings come from RAGDESK_* variables, are validated, and are all documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config.settings import Settings

README = Path(__file__).resolve().parent.parent / "README.md"


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGDESK_PORT", "9123")
    monkeypatch.setenv("RAGDESK_N_GPU_LAYERS", "-1")
    monkeypatch.setenv("RAGDESK_GENERATOR_MODEL", "/models/other.gguf")
    settings = Settings()
    assert settings.port == 9123
    assert settings.n_gpu_layers == -1
    assert settings.generator_model == Path("/models/other.gguf")


@pytest.mark.parametrize(
    ("name", "value"),
    [("RAGDESK_PORT", "0"), ("RAGDESK_TOP_K", "1000"), ("RAGDESK_EMBEDDER_BACKEND", "magic")],
)
def test_absurd_values_are_rejected(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = README.read_text()
    for name, field in Settings.model_fields.items():
        assert f"`RAGDESK_{name.upper()}`" in readme, name
        assert field.description, name
