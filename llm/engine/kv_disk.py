"""Conversation KV state kept on disk under a byte budget, least recently used evicted.

A file holds one sequence's llama.cpp state and the tokens it encodes, so a conversation
resumed after its cells were evicted, or after a restart, starts from the cached prefix
instead of prefilling everything. Files are written off the engine thread, atomically;
anything unreadable or made by another model is ignored and removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"RDKV1\n"
_HEADER = struct.Struct("<I")


@dataclass(frozen=True)
class SavedState:
    tokens: list[int]
    state: bytes


class KvDiskCache:
    def __init__(self, directory: Path, *, budget_bytes: int, model_fingerprint: str):
        self.directory = directory
        self.budget_bytes = budget_bytes
        self.model = model_fingerprint
        directory.mkdir(parents=True, exist_ok=True)
        self._writes: queue.Queue[tuple[str, SavedState] | None] = queue.Queue(maxsize=4)
        self._writer = threading.Thread(
            target=self._write_loop, name="ragdesk-kv-disk", daemon=True
        )
        self._writer.start()

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(f"{self.model}\0{key}".encode()).hexdigest()[:32]
        return self.directory / f"{digest}.kv"

    def load(self, key: str) -> SavedState | None:
        path = self._path(key)
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
        """Queue a write; dropped (not blocking the engine) when the writer is behind."""
        if _file_size(self.model, saved) > self.budget_bytes:
            return
        try:
            self._writes.put_nowait((key, saved))
        except queue.Full:
            log.debug("KV disk writer busy; not saving %s", key)

    def flush(self) -> None:
        self._writes.join()

    def close(self) -> None:
        self._writes.put(None)
        self._writer.join(timeout=10)

    def _write_loop(self) -> None:
        while (item := self._writes.get()) is not None:
            try:
                self._write(*item)
                self._evict()
            except OSError:
                log.exception("could not save KV state")
            finally:
                self._writes.task_done()
        self._writes.task_done()

    def _write(self, key: str, saved: SavedState) -> None:
        header = _header(self.model, saved)
        path = self._path(key)
        temp = path.with_suffix(f".tmp{threading.get_ident()}")
        with temp.open("wb") as out:
            out.write(MAGIC + _HEADER.pack(len(header)) + header)
            out.write(saved.state)
        temp.replace(path)  # a cache: no fsync, a torn file is detected and dropped

    def _evict(self) -> None:
        files = []
        for path in self.directory.glob("*.kv"):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.budget_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def _header(model: str, saved: SavedState) -> bytes:
    fields = {"model": model, "tokens": saved.tokens, "state_bytes": len(saved.state)}
    return json.dumps(fields).encode()


def _file_size(model: str, saved: SavedState) -> int:
    return len(MAGIC) + _HEADER.size + len(_header(model, saved)) + len(saved.state)
