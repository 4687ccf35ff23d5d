"""The sampler guard: llama.cpp calls that can throw C++ exceptions, behind a try/catch.

An exception thrown inside llama.cpp and not caught before it reaches ctypes ends the
process (``std::terminate``): one request with an unsatisfiable grammar used to kill the
server. ``guard.cpp`` wraps sampling, grammar compilation and tokenisation; it is compiled
once per llama.cpp build with the C++ compiler that built llama-cpp-python, and cached.

Without a compiler the guard is missing: plain sampling and tokenisation still work (they
do not throw on input Python can produce), but grammars and JSON schemas are refused.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("guard.cpp")
ERROR_BYTES = 512
TOKENIZE_FAILED = -(2**31)


class GuardUnavailable(RuntimeError):
    pass


class SamplingFailed(RuntimeError):
    """llama.cpp could not produce the next token (a grammar that allows nothing more)."""


@dataclass(frozen=True)
class Guard:
    """The guard's functions: ``keeping`` calls hold the GIL (microsecond calls on the
    engine thread), ``releasing`` ones drop it (grammar steps, tokenising long prompts)."""

    keeping: Any
    releasing: Any
    path: Path

    def interrupt_callback(self) -> Any:
        """``ragdesk_interrupted`` as a ``ggml_abort_callback`` for
        ``llama_set_abort_callback``; its data is a ``ctypes.c_int32`` flag."""
        import llama_cpp  # heavy: on use

        address = ctypes.cast(self.releasing.ragdesk_interrupted, ctypes.c_void_p).value
        assert address is not None  # a symbol of a loaded library
        return llama_cpp.ggml_abort_callback(address)


_lock = threading.Lock()
_loaded: Guard | GuardUnavailable | None = None


def load_guard() -> Guard:
    """The guard for the loaded llama.cpp, built on first use; ``GuardUnavailable`` when it
    cannot be built here (the reason is kept, and not retried, for this process)."""
    global _loaded
    with _lock:
        if _loaded is None:
            try:
                _loaded = _open(build_guard())
            except (GuardUnavailable, OSError) as exc:
                log.warning("sampler guard unavailable: %s", exc)
                _loaded = GuardUnavailable(str(exc))
        if isinstance(_loaded, GuardUnavailable):
            raise _loaded
        return _loaded


def build_guard(cache_dir: Path | None = None) -> Path:
    """Compile ``guard.cpp`` against the loaded ``libllama`` (or reuse a cached build)."""
    library = _libllama()
    cache = cache_dir or _cache_dir()
    stat = library.stat()
    key = hashlib.sha256(
        SOURCE.read_bytes() + f"{library}:{stat.st_size}:{stat.st_mtime_ns}".encode()
    ).hexdigest()[:16]
    target = cache / f"ragdesk-guard-{key}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise GuardUnavailable("no C++ compiler (c++, g++ or $CXX) to build it with")
    cache.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=cache, prefix=".guard-", suffix=".so")
    os.close(fd)
    command = [
        compiler,
        *("-std=c++17", "-O2", "-shared", "-fPIC", "-Wall"),
        str(SOURCE),
        str(library),
        f"-Wl,-rpath,{library.parent}",
        "-o",
        temporary,
    ]
    try:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GuardUnavailable(f"{compiler} could not run: {exc}") from exc
        if done.returncode != 0:
            raise GuardUnavailable(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
        Path(temporary).replace(target)  # concurrent builders race to the same, whole file
    finally:
        Path(temporary).unlink(missing_ok=True)
    return target


def error_buffer() -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(ERROR_BYTES)


def _open(path: Path) -> Guard:
    import llama_cpp  # heavy: on use

    releasing, keeping = ctypes.CDLL(str(path)), ctypes.PyDLL(str(path))
    p, i32, size = ctypes.c_void_p, ctypes.c_int32, ctypes.c_size_t
    sampler = llama_cpp.llama_sampler_p_ctypes  # what llama_sampler_free and the rest take
    text, flag = ctypes.c_char_p, ctypes.c_bool  # error buffers are char* too
    signatures: dict[str, tuple[list[Any], Any]] = {
        "ragdesk_sample": ([sampler, sampler, p, i32, text, size], i32),
        "ragdesk_init_grammar": ([p, text, text, text, size], sampler),
        "ragdesk_tokenize": ([p, text, i32, p, i32, flag, flag, text, size], i32),
    }
    for library in (releasing, keeping):
        for name, (argtypes, restype) in signatures.items():
            function = getattr(library, name)
            function.argtypes, function.restype = argtypes, restype
    return Guard(keeping, releasing, path)


def _libllama() -> Path:
    import llama_cpp  # heavy: on use

    return Path(llama_cpp.llama_cpp._lib._name).resolve()


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragdesk"
