"""House rules that code review alone would let slip."""

from __future__ import annotations

import ast
import re
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


def module_imports() -> dict[str, set[str]]:
    """Each of our modules and the modules of ours it imports, wherever the import stands
    (a function-level import still ties two modules together)."""
    paths = {}
    for package in ("app", "retrieval", "llm"):
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            paths[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            graph[name].update(t for t in targets if t in paths and t != name)
    return graph


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None (depth-first search with an explicit stack)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(step) == 1:
                return [*path[path.index(step) :], step]
            elif step not in state:
                state[step] = 1
                path.append(step)
                stack.append(iter(sorted(graph[step])))
    return None


def test_no_import_loops() -> None:
    assert import_cycle(module_imports()) is None


def test_the_cycle_finder_finds_cycles() -> None:
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


# app/ in tiers: the composition root (factory, cli, asgi, lifespan) over web/, the only
# home of HTTP handlers, over the feature packages and the modules they share, over the
# libraries. Nothing imports a tier above its own.
ROOT_MODULES = {"app.factory", "app.cli", "app.asgi", "app.lifespan"}
FEATURES = ("app.config", "app.chat", "app.documents", "app.openai", "app.auth")


def tier(module: str) -> int:
    if module.startswith(("retrieval", "llm")):
        return 0
    if module in ROOT_MODULES:
        return 3
    if module == "app.web" or module.startswith("app.web."):
        return 2
    return 1  # a feature package, or a module the features share (errors, schemas, state)


def test_app_is_in_tiers_and_nothing_imports_upward() -> None:
    upward = sorted(
        (module, imported)
        for module, imports in module_imports().items()
        for imported in imports
        if tier(imported) > tier(module)
    )
    assert upward == []


def test_every_handler_is_in_the_web_tier() -> None:
    handler = re.compile(r"^\s*@(get|post|put|patch|delete|head|route)\(", re.MULTILINE)
    outside = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "app").rglob("*.py")
        if handler.search(path.read_text()) and "web" not in path.relative_to(ROOT).parts
    ]
    assert outside == []


def test_the_feature_packages_exist() -> None:
    for package in FEATURES:
        assert (ROOT / package.replace(".", "/") / "__init__.py").is_file(), package
