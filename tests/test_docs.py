"""README.md and docs/*.md hold together: every relative link (and its #anchor) resolves,
and every command in a fenced shell block is one that exists here (a Makefile target, a
``ragdesk`` subcommand, a Python module) or a known shell tool."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from unittest import mock
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

SHELL_LANGUAGES = {"sh", "bash", "shell"}
# Commands a shell block may start with besides make, ragdesk, python and bash.
SHELL_TOOLS = {
    "apt-get",
    "aws",
    "cat",
    "cd",
    "cp",
    "curl",
    "docker",
    "echo",
    "export",
    "git",
    "kubectl",
    "ln",
    "ls",
    "mkdir",
    "openssl",
    "pg_dump",
    "pip",
    "psql",
    "pytest",
    "sudo",
}
# What a shell block may run from the project's virtual environment.
VENV_COMMANDS = {"ragdesk", "python", "pip", "pytest", "ruff", "mypy"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
# Shell syntax: a command follows the first kind; the second has none to check.
KEYWORDS_BEFORE_A_COMMAND = {"do", "then", "else", "elif", "if", "while", "until", "!", "{"}
KEYWORDS_WITHOUT_A_COMMAND = {"for", "done", "fi", "esac", "}", "case"}
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}
REDIRECTS = {">", ">>", "<", "<<", ">&", "<&", ">|", "&>"}


# --- reading markdown --------------------------------------------------------------------


def split_fences(text: str) -> tuple[str, list[tuple[str, int, list[str]]]]:
    """The prose (fenced lines blanked, so line numbers stay) and the fenced blocks as
    (language, first line number, lines)."""
    prose: list[str] = []
    blocks: list[tuple[str, int, list[str]]] = []
    fence: str | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            blocks.append((match.group(2).lower(), number + 1, []))
            prose.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            else:
                blocks[-1][2].append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lower-cased, punctuation dropped, spaces to
    hyphens (letters, digits, ``_`` and ``-`` stay)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every anchor a page's headings make; a repeated heading gets -1, -2 …"""
    prose, _ = split_fences(page.read_text())
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose.split("\n"):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every inline, image and reference link outside code."""
    prose, _ = split_fences(text)
    prose = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), prose)
    for pattern in (LINK, REFERENCE):
        for match in pattern.finditer(prose):
            yield prose.count("\n", 0, match.start(1)) + 1, match.group(1)


def broken_link(page: Path, target: str) -> str | None:
    """Why a link of ``page`` does not resolve, or None when it does (or is not relative)."""
    if SCHEME.match(target) or target.startswith("//"):
        return None  # http(s), mailto: not ours to check offline
    path, _, anchor = target.partition("#")
    if path.startswith("/"):
        return f"{target}: an absolute path does not work on GitHub or in a checkout"
    destination = Path(os.path.normpath(page.parent / unquote(path))) if path else page
    if not destination.is_relative_to(ROOT):
        return f"{target}: outside the repository"
    if not destination.exists():
        return f"{target}: {destination.relative_to(ROOT)} does not exist"
    if anchor and destination.suffix == ".md" and unquote(anchor) not in anchors(destination):
        return f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}"
    return None


# --- what the repository offers ----------------------------------------------------------


@cache
def make_targets() -> frozenset[str]:
    targets: set[str] = set()
    for line in (ROOT / "Makefile").read_text().split("\n"):
        match = re.match(r"^([A-Za-z0-9][\w.\- ]*?)\s*:(?![:=])", line)
        if match:
            targets.update(match.group(1).split())
    return frozenset(targets)


class _Parsed(Exception):
    """Raised instead of parsing, carrying the parser ``ragdesk`` built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


@cache
def ragdesk_commands() -> dict[str, frozenset[str]]:
    """The ``ragdesk`` subcommands, each with its own subcommands (``users create``), taken
    from the parser ``app.cli.main`` builds: it is stopped before it parses or starts
    anything."""
    from app import cli

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    try:
        with mock.patch.object(argparse.ArgumentParser, "parse_args", capture):
            cli.main([])
    except _Parsed as parsed:
        parser = parsed.parser
    else:
        raise AssertionError("ragdesk's main() never parsed its arguments")
    return {
        name: frozenset(
            choice
            for action in sub._actions
            if isinstance(action, argparse._SubParsersAction)
            for choice in action.choices
        )
        for name, sub in _subparsers(parser).items()
    }


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def module_exists(module: str) -> bool:
    """A module of this repository (by its file), or one installed in the environment."""
    parts = module.split(".")
    top = ROOT / parts[0]
    if top.is_dir() or top.with_suffix(".py").is_file():
        base = ROOT.joinpath(*parts)
        return (
            base.with_suffix(".py").is_file()
            or (base / "__init__.py").is_file()
            or (base / "__main__.py").is_file()
        )
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# --- reading shell blocks ----------------------------------------------------------------


def _open_quote(text: str) -> bool:
    """Whether ``text`` ends inside a quoted string (a ``#`` comment's quotes don't count)."""
    quote: str | None = None
    escaped = False
    previous = "\n"
    for char in text:
        if escaped:
            escaped = False
        elif quote == "#":
            quote = None if char == "\n" else quote
        elif quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif quote == '"':
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and previous.isspace():
            quote = "#"  # a comment, to the end of its line
        previous = char
    return quote not in (None, "#")


def logical_lines(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(offset, command) for each command of a block: comment lines (and ``# →`` output)
    skipped, continuation lines and multi-line quoted strings joined to their command."""
    buffer = ""
    start = 0
    for offset, line in enumerate(lines):
        if not buffer:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = offset
        buffer += line + "\n"
        if line.rstrip().endswith("\\") or _open_quote(buffer):
            continue
        yield start, buffer
        buffer = ""
    if buffer:
        yield start, buffer


def simple_commands(command: str) -> Iterator[list[str]]:
    """The words of each simple command in a logical line (``$(…)`` ones included), with
    leading ``A=b`` assignments, redirections and ``sudo`` taken off."""
    command = command.replace("\\\n", " ")
    for inner in SUBSTITUTION.findall(command):
        yield from simple_commands(inner)
    lexer = shlex.shlex(
        SUBSTITUTION.sub("SUBSTITUTED", command), posix=True, punctuation_chars=True
    )
    lexer.whitespace_split = True
    words: list[str] = []
    redirect = False
    for token in lexer:
        if token in SEPARATORS:
            yield from _stripped(words)
            words = []
        elif token in REDIRECTS:
            redirect = True
        elif redirect:
            redirect = False  # the redirection's file
        else:
            words.append(token)
    yield from _stripped(words)


def _stripped(words: list[str]) -> Iterator[list[str]]:
    while words and (ASSIGNMENT.match(words[0]) or words[0] in KEYWORDS_BEFORE_A_COMMAND):
        words = words[1:]
    if words and words[0] in KEYWORDS_WITHOUT_A_COMMAND:
        return
    if words and words[0] == "sudo":
        words = [word for word in words[1:] if not word.startswith("-")]
    if words:
        yield words


def unknown_command(words: list[str]) -> str | None:
    """Why a simple command does not exist here, or None when it does."""
    program, args = words[0], words[1:]
    if program.startswith(".venv/bin/") or "/.venv/bin/" in program:
        program = program.rpartition(".venv/bin/")[2]
        if program not in VENV_COMMANDS:
            return f"{words[0]}: not a command the project installs"
    plain = [arg for arg in args if not arg.startswith("-")]
    if program == "make":
        missing = [arg for arg in plain if "=" not in arg and arg not in make_targets()]
        return f"make: no target {missing} in Makefile" if missing else None
    if program == "ragdesk":
        commands = ragdesk_commands()
        if not plain or plain[0] not in commands:
            return f"ragdesk {plain[:1]}: not a subcommand ({sorted(commands)})"
        subcommands = commands[plain[0]]
        if subcommands and (len(plain) < 2 or plain[1] not in subcommands):
            return f"ragdesk {plain[0]} {plain[1:2]}: not one of {sorted(subcommands)}"
        return None
    if program in ("python", "python3"):
        if "-m" in args:
            module = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else ""
            return None if module_exists(module) else f"python -m {module}: no such module"
        scripts = [arg for arg in plain if arg.endswith(".py")]
        missing = [script for script in scripts if not (ROOT / script).is_file()]
        return f"python: no file {missing}" if missing else None
    if program in ("bash", "sh"):
        script = plain[0] if plain else ""
        return None if (ROOT / script).is_file() else f"{program} {script}: no such script"
    if program in SHELL_TOOLS or program in VENV_COMMANDS:
        return None
    return f"{program}: not a Makefile target, ragdesk subcommand, module or known tool"


def shell_problems(page: Path) -> list[str]:
    _, blocks = split_fences(page.read_text())
    problems = []
    for language, first_line, lines in blocks:
        if language not in SHELL_LANGUAGES:
            continue
        for offset, command in logical_lines(lines):
            for words in simple_commands(command):
                why = unknown_command(words)
                if why:
                    problems.append(f"{_name(page)}:{first_line + offset}: {why}")
    return problems


# --- the tests ---------------------------------------------------------------------------


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_pages_are_there() -> None:
    names = {_name(page) for page in PAGES}
    assert {"README.md", "docs/configuration.md", "docs/api.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_resolves(page: Path) -> None:
    problems = [
        f"{_name(page)}:{line}: {why}"
        for line, target in links(page.read_text())
        if (why := broken_link(page, target))
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_shell_command_exists(page: Path) -> None:
    problems = shell_problems(page)
    assert not problems, "\n".join(problems)


def test_the_readme_is_a_front_door() -> None:
    """The guides live in docs/: the README stays short and links to each of them."""
    readme = (ROOT / "README.md").read_text()
    assert readme.count("\n") <= 300
    targets = {target.partition("#")[0] for _, target in links(readme)}
    for guide in ("using", "administering", "api", "scaling", "configuration"):
        assert f"docs/{guide}.md" in targets, guide


# The checks themselves: each catches what it is there to catch.


def test_slugs_follow_github() -> None:
    assert slug("Scanned PDFs (OCR)") == "scanned-pdfs-ocr"
    assert slug("Large indexes: memory-mapped") == "large-indexes-memory-mapped"
    assert slug("MCP server (for agents and internal tools)") == (
        "mcp-server-for-agents-and-internal-tools"
    )
    assert slug("`RAGDESK_OCR` and [OCR](x.md)") == "ragdesk_ocr-and-ocr"


def test_a_broken_link_or_anchor_is_caught() -> None:
    readme = ROOT / "README.md"
    assert broken_link(readme, "docs/using.md#using-it") is None
    assert broken_link(readme, "https://example.org/nowhere") is None
    assert "does not exist" in (broken_link(readme, "docs/nowhere.md") or "")
    assert "no heading" in (broken_link(readme, "docs/using.md#no-such-heading") or "")
    assert "no heading" in (broken_link(readme, "#no-such-heading") or "")
    text = "See [x](docs/a.md), `[not](a-link.md)`, ![img](docs/screenshots/chat.png).\n"
    assert [target for _, target in links(text)] == ["docs/a.md", "docs/screenshots/chat.png"]


def test_a_command_that_does_not_exist_is_caught() -> None:
    def problems(block: str) -> list[str]:
        return [
            why
            for _, command in logical_lines(block.split("\n"))
            for words in simple_commands(command)
            if (why := unknown_command(words))
        ]

    assert (
        problems(
            "make run    # a comment's apostrophe: it's fine\n"
            "# → output\n"
            "KEY=$(.venv/bin/ragdesk keys create --user admin)\n"
            "A=b .venv/bin/ragdesk collections describe HR --ocr on\n"
            "curl -d '{\"a\":\n  1}' \\\n  http://x\n"
            ".venv/bin/python -m bench.answers --limit 3\n"
            "python -m json.tool\n"
            "sudo apt-get install chromium && docker ps | cat > out.txt\n"
            "for turn in 1 2; do\n  (cd /tmp && make bench)\ndone\n"
        )
        == []
    )
    assert len(problems("make no-such-target")) == 1
    assert len(problems("ragdesk no-such-command")) == 1
    assert len(problems("ragdesk users no-such-subcommand")) == 1
    assert len(problems("KEY=$(ragdesk nope) && echo $KEY")) == 1
    assert len(problems(".venv/bin/python -m bench.no_such_bench")) == 1
    assert len(problems("python -m no_such_module_anywhere")) == 1
    assert len(problems("rm -rf data")) == 1
    assert len(problems("for turn in 1 2; do\n  make benchmarks\ndone")) == 1
