"""Conversation KV state kept on disk under a byte budget, least recently used evicted.

A file holds one sequence's llama.cpp state and the tokens it encodes, so a conversation
resumed after its cells were evicted, or after a restart, starts from the cached prefix
instead of prefilling everything. Files are written off the engine thread, atomically;
anything unreadable or made by another model is ignored and removed. A write that fails
(a full disk included) removes its temporary file, and opening the cache removes those a
kill left (:func:`sweep_kv_leftovers`).

What is written (``llm/engine/kv_policy.py``). The engine offers a conversation's whole
state after every answer. Writing each one costs the whole state per turn: a conversation
of n turns wrote about n/2 times its final size, and a mixed load wrote ~100 MB/min. A
saved state is worth only the prefill it saves when the conversation resumes, i.e. the
prefix it shares with the next prompt, so:

1. Geometric rewrites. A key's state is written again only once it is ``growth`` (2)
   times the prefix its saved state already covers: each rewrite gains (newly covered
   tokens) at least half of what it costs (tokens written); an unchanged state, or one a
   few tokens longer, is never rewritten; a conversation's writes total at most
   growth/(growth-1) = 2 times its largest state, however many turns it has; and a resume
   still finds at least 1/growth of what it could. A state that left the saved prefix
   early (the oldest turns dropped to fit the context) is written at once.
2. A turnover cap. On average at most the budget is written per ``turnover_s`` (an hour),
   at most a quarter of it at once. Writing faster only replaces states before they could
   be resumed (at 100 MB/min a 1 GB cache keeps a state ~10 minutes, a gap the in-memory
   prefix cache mostly covers anyway).

States larger than the budget, and states offered while the writer is behind, are not
written. The tokens of each saved state are known from writing or loading it (every turn
loads before it runs), so rule 1 holds across restarts too.

Counters (also as one snapshot from :meth:`KvDiskCache.stats`): ``hits``, ``misses`` and
``restored_tokens`` (the most prefill the hits can save: the engine uses a loaded state
only when it covers more than memory holds) say what the cache buys; ``writes``,
``bytes_written`` and ``write_errors`` what it costs; ``skipped_covered``,
``skipped_rate``, ``skipped_too_large`` and ``dropped_busy`` what was not written, and why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import re
import shutil
import struct
import threading
import time
from array import array
from dataclasses import dataclass, fields
from pathlib import Path

from llm.engine.kv_policy import WritePolicy, WriteRate, worth_rewriting
from llm.leftovers import remove_leftovers

log = logging.getLogger(__name__)

MAGIC = b"RDKV1\n"
_HEADER = struct.Struct("<I")
_TEMP = re.compile(r"[0-9a-f]{32}\.tmp\d+")  # ``_write``'s temporary files


@dataclass(frozen=True)
class SavedState:
    tokens: list[int]
    state: bytes


@dataclass(frozen=True)
class KvDiskStats:
    hits: int = 0
    misses: int = 0
    restored_tokens: int = 0
    writes: int = 0
    bytes_written: int = 0
    write_errors: int = 0
    skipped_covered: int = 0
    skipped_rate: int = 0
    skipped_too_large: int = 0
    skipped_low_disk: int = 0
    dropped_busy: int = 0


class KvDiskCache:
    def __init__(
        self,
        directory: Path,
        *,
        budget_bytes: int,
        model_fingerprint: str,
        policy: WritePolicy | None = None,
        min_free_bytes: int = 0,
    ):
        self.directory = directory
        self.budget_bytes = budget_bytes
        self.min_free_bytes = min_free_bytes  # left free on the disk for users' data
        self.model = model_fingerprint
        self.policy = policy or WritePolicy()
        directory.mkdir(parents=True, exist_ok=True)
        sweep_kv_leftovers(directory)
        self._lock = threading.Lock()  # the counters, the rate and what is known saved
        self._rate = WriteRate(budget_bytes, self.policy, time.monotonic())
        self._saved: dict[str, array[int]] = {}  # file name -> the tokens it holds
        self.hits = self.misses = self.restored_tokens = 0
        self.writes = self.bytes_written = self.write_errors = 0
        self.skipped_covered = self.skipped_rate = self.skipped_too_large = 0
        self.skipped_low_disk = 0
        self.dropped_busy = 0
        self._writes: queue.Queue[tuple[str, SavedState] | None] = queue.Queue(maxsize=4)
        self._writer = threading.Thread(
            target=self._write_loop, name="ragdesk-kv-disk", daemon=True
        )
        self._writer.start()

    def stats(self) -> KvDiskStats:
        with self._lock:
            return KvDiskStats(**{f.name: getattr(self, f.name) for f in fields(KvDiskStats)})

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(f"{self.model}\0{key}".encode()).hexdigest()[:32]
        return self.directory / f"{digest}.kv"

    def load(self, key: str) -> SavedState | None:
        path = self._path(key)
        saved = self._read(path)
        with self._lock:
            if saved is None:
                self.misses += 1
                self._saved.pop(path.name, None)
            else:
                self.hits += 1
                self.restored_tokens += len(saved.tokens)
                self._saved[path.name] = array("i", saved.tokens)
        return saved

    def _read(self, path: Path) -> SavedState | None:
        try:
            data = path.read_bytes()
            if not data.startswith(MAGIC):
                raise ValueError("not a Ragdesk KV file")
            start = len(MAGIC) + _HEADER.size
            (length,) = _HEADER.unpack_from(data, len(MAGIC))
            header = json.loads(data[start : start + length])
            if not isinstance(header, dict) or header.get("model") != self.model:
                raise ValueError("made by another model")
            tokens = [int(t) for t in header["tokens"]]
            state = data[start + length :]
            if len(state) != header["state_bytes"]:
                raise ValueError("torn: the state is shorter than recorded")
            os.utime(path)  # recently used
            return SavedState(tokens, state)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            log.warning("dropping unreadable KV file %s: %s", path.name, exc)
            path.unlink(missing_ok=True)
            return None

    def save(self, key: str, saved: SavedState) -> None:
        """Queue a write when the policy (module docstring) finds it worth it; never
        blocks the engine (dropped when the writer is behind)."""
        name = self._path(key).name
        size = _file_size(self.model, saved)
        with self._lock:
            if size > self.budget_bytes:
                self.skipped_too_large += 1
            elif not worth_rewriting(self._saved.get(name), saved.tokens, self.policy.growth):
                self.skipped_covered += 1
            elif not self._rate.allows(time.monotonic()):
                self.skipped_rate += 1
            else:
                try:
                    self._writes.put_nowait((key, saved))
                except queue.Full:
                    self.dropped_busy += 1
                    log.debug("KV disk writer busy; not saving %s", key)
                    return
                self._rate.charge(size)
                self._saved[name] = array("i", saved.tokens)  # as good as saved, for rule 1

    def flush(self) -> None:
        self._writes.join()

    def close(self) -> None:
        self._writes.put(None)
        self._writer.join(timeout=10)

    def _write_loop(self) -> None:
        while (item := self._writes.get()) is not None:
            key, saved = item
            try:
                if not self._room_for(_file_size(self.model, saved)):
                    with self._lock:
                        self.skipped_low_disk += 1
                        self._saved.pop(self._path(key).name, None)
                    continue
                size = self._write(key, saved)
                with self._lock:
                    self.writes += 1
                    self.bytes_written += size
                self._evict()
            except Exception:
                with self._lock:
                    self.write_errors += 1
                    self._saved.pop(self._path(key).name, None)  # not known any more
                log.exception("could not save KV state")
            finally:
                self._writes.task_done()
        self._writes.task_done()

    def _write(self, key: str, saved: SavedState) -> int:
        """Write the file under a temporary name, then rename it; the temporary file is
        removed if anything fails (ENOSPC included). Returns the bytes written."""
        header = _header(self.model, saved)
        path = self._path(key)
        temp = path.with_suffix(f".tmp{threading.get_ident()}")
        try:
            with temp.open("wb") as out:
                out.write(MAGIC + _HEADER.pack(len(header)) + header)
                out.write(saved.state)
            temp.replace(path)  # a cache: no fsync, a torn file is detected and dropped
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return len(MAGIC) + _HEADER.size + len(header) + len(saved.state)

    def _room_for(self, size: int) -> bool:
        """Whether ``size`` more bytes leave ``min_free_bytes`` free on the disk, after
        evicting this cache's oldest states if that is what it takes."""
        if not self.min_free_bytes:
            return True
        needed = self.min_free_bytes + size
        free = _free_bytes(self.directory)
        if free >= needed:
            return True
        held = sum(size for _, size, _ in _saved_files(self.directory, "*.kv"))
        if free + held < needed:  # not even with the cache empty
            return False
        give_back_space(self.directory, needed)
        return _free_bytes(self.directory) >= needed

    def _evict(self) -> None:
        files = _saved_files(self.directory, "*.kv")
        total = sum(size for _, size, _ in files)
        for _, size, path in files:
            if total <= self.budget_bytes:
                break
            path.unlink(missing_ok=True)
            with self._lock:
                self._saved.pop(path.name, None)
            total -= size


def give_back_space(directory: Path, min_free_bytes: int) -> int:
    """Remove saved states under ``directory`` (every model's), least recently used first,
    until its disk has ``min_free_bytes`` free or none is left; the bytes removed. A state
    removed here is a cache miss later, never an error: loads find the file gone."""
    if _free_bytes(directory) >= min_free_bytes:
        return 0
    freed = 0
    for _, size, path in _saved_files(directory, "**/*.kv"):
        path.unlink(missing_ok=True)
        freed += size
        if _free_bytes(directory) >= min_free_bytes:
            break
    return freed


def _saved_files(directory: Path, pattern: str) -> list[tuple[float, int, Path]]:
    """(modified, size, path) of the saved states ``pattern`` finds, oldest first."""
    files = []
    for path in directory.glob(pattern):
        try:
            stat = path.stat()
        except FileNotFoundError:  # evicted meanwhile
            continue
        files.append((stat.st_mtime, stat.st_size, path))
    return sorted(files)


def _free_bytes(directory: Path) -> int:
    try:
        return shutil.disk_usage(directory).free
    except OSError:  # not there (yet): nothing of ours to give back
        return 1 << 62


def sweep_kv_leftovers(directory: Path) -> list[Path]:
    """Remove the temporary files of KV writes a kill interrupted, in ``directory`` and
    below (the KV directory of every model: those not loaded this run too); returns them."""
    if not directory.is_dir():
        return []
    temporary = (p for p in sorted(directory.rglob("*.tmp*")) if _TEMP.fullmatch(p.name))
    return remove_leftovers((p for p in temporary if p.is_file()), "KV cache write")


def _header(model: str, saved: SavedState) -> bytes:
    header = {"model": model, "tokens": saved.tokens, "state_bytes": len(saved.state)}
    return json.dumps(header).encode()


def _file_size(model: str, saved: SavedState) -> int:
    return len(MAGIC) + _HEADER.size + len(_header(model, saved)) + len(saved.state)
