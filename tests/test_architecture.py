"""House rules that code review alone would let slip."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(package: str) -> set[str]:
    modules: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module)
    return modules


def test_retrieval_and_llm_never_import_litestar_or_the_app() -> None:
    for package in ("retrieval", "llm"):
        offending = {m for m in imported_modules(package) if m.split(".")[0] in ("litestar", "app")}
        assert offending == set(), (package, offending)


def test_nothing_heavy_happens_at_import_time() -> None:
    heavy = ["torch", "faiss", "llama_cpp", "sentence_transformers", "transformers"]
    code = f"import sys, app.asgi\nprint([m for m in {heavy!r} if m in sys.modules])"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_no_pickle_anywhere() -> None:
    for package in ("app", "retrieval", "llm"):
        assert not {m for m in imported_modules(package) if m in ("pickle", "cPickle", "dill")}
