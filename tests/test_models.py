"""The bundled generator's assembly: what a killed one leaves is removed at the next start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llm.models import sweep_partial_models


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
