"""KvDiskCache: conversation KV state on disk, per model, under a byte budget."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm.engine.kv_disk import MAGIC, KvDiskCache, SavedState

MODEL = "model-a"


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[KvDiskCache]:
    kv = KvDiskCache(tmp_path / "kv", budget_bytes=1_000_000, model_fingerprint=MODEL)
    yield kv
    kv.close()


def open_cache(directory: Path, budget_bytes: int, model: str = MODEL) -> KvDiskCache:
    return KvDiskCache(directory, budget_bytes=budget_bytes, model_fingerprint=model)


def kv_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.kv"))


def age(path: Path, seconds_ago: float) -> None:
    when = time.time() - seconds_ago
    os.utime(path, (when, when))


def test_save_then_load_round_trips_tokens_and_bytes(cache: KvDiskCache) -> None:
    state = bytes(range(256)) * 4
    cache.save("conversation-1", SavedState([1, 2, 3, 50_000], state))
    cache.flush()
    assert cache.load("conversation-1") == SavedState([1, 2, 3, 50_000], state)


def test_round_trip_of_empty_state_and_tokens(cache: KvDiskCache) -> None:
    cache.save("empty", SavedState([], b""))
    cache.flush()
    assert cache.load("empty") == SavedState([], b"")


def test_missing_key_loads_nothing(cache: KvDiskCache) -> None:
    assert cache.load("never saved") is None


def test_keys_are_kept_apart(cache: KvDiskCache) -> None:
    cache.save("a", SavedState([1], b"first"))
    cache.save("b", SavedState([2], b"second"))
    cache.flush()
    assert cache.load("a") == SavedState([1], b"first")
    assert cache.load("b") == SavedState([2], b"second")


def test_saving_again_replaces_the_state(cache: KvDiskCache) -> None:
    cache.save("a", SavedState([1], b"old"))
    cache.save("a", SavedState([1, 2], b"newer"))
    cache.flush()
    assert cache.load("a") == SavedState([1, 2], b"newer")
    assert len(kv_files(cache.directory)) == 1


def test_saved_state_survives_a_restart(tmp_path: Path) -> None:
    first = open_cache(tmp_path, 10_000)
    first.save("conv", SavedState([4, 5], b"state"))
    first.flush()
    first.close()
    second = open_cache(tmp_path, 10_000)
    try:
        assert second.load("conv") == SavedState([4, 5], b"state")
    finally:
        second.close()


def test_no_temporary_files_are_left_behind(cache: KvDiskCache) -> None:
    for i in range(5):
        cache.save(f"k{i}", SavedState([i], b"x" * 100))
        cache.flush()
    assert sorted(p.suffix for p in cache.directory.iterdir()) == [".kv"] * 5


def test_another_model_does_not_load_the_state(tmp_path: Path) -> None:
    a = open_cache(tmp_path, 10_000, model="model-a")
    b = open_cache(tmp_path, 10_000, model="model-b")
    try:
        a.save("conv", SavedState([1, 2], b"a's state"))
        a.flush()
        assert b.load("conv") is None
        assert a.load("conv") == SavedState([1, 2], b"a's state")
    finally:
        a.close()
        b.close()


def test_file_made_by_another_model_is_ignored_and_removed(tmp_path: Path) -> None:
    a = open_cache(tmp_path, 10_000, model="model-a")
    b = open_cache(tmp_path, 10_000, model="model-b")
    try:
        a.save("conv", SavedState([1, 2], b"a's state"))
        a.flush()
        (a_file,) = kv_files(tmp_path)
        b_path = b._path("conv")
        a_file.replace(b_path)  # as if b's name held a's contents
        assert b.load("conv") is None
        assert not b_path.exists()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "contents",
    [
        b"",
        b"garbage that is not a KV file",
        MAGIC,  # no header length
        MAGIC + b"\x05",  # a torn header length
        MAGIC + b"\x40\x00\x00\x00" + b'{"model": "mod',  # a torn header
        MAGIC + b"\x05\x00\x00\x00" + b"nope!" + b"state",  # a header that is not JSON
        MAGIC + b"\x11\x00\x00\x00" + b'{"model": "model-a"}'[:17] + b"state",
    ],
    ids=[
        "empty",
        "garbage",
        "magic-only",
        "torn-length",
        "torn-header",
        "not-json",
        "cut-json",
    ],
)
def test_unreadable_file_is_ignored_and_removed(cache: KvDiskCache, contents: bytes) -> None:
    path = cache._path("conv")
    path.write_bytes(contents)
    assert cache.load("conv") is None
    assert not path.exists()


@pytest.mark.parametrize(
    "header",
    [
        b"[]",
        b"null",
        b"7",
        b'{"model": "model-a"}',  # no tokens
        b'{"model": "model-a", "tokens": [1, "two"]}',  # tokens that are not integers
    ],
)
def test_a_header_that_is_not_a_valid_object_is_ignored_and_removed(
    cache: KvDiskCache, header: bytes
) -> None:
    path = cache._path("conv")
    path.write_bytes(MAGIC + len(header).to_bytes(4, "little") + header + b"state")
    assert cache.load("conv") is None
    assert not path.exists()


def test_file_truncated_in_its_header_is_ignored_and_removed(cache: KvDiskCache) -> None:
    cache.save("conv", SavedState(list(range(100)), b"s" * 100))
    cache.flush()
    path = cache._path("conv")
    path.write_bytes(path.read_bytes()[: len(MAGIC) + 4 + 20])
    assert cache.load("conv") is None
    assert not path.exists()


def test_file_truncated_in_its_state_is_ignored_and_removed(cache: KvDiskCache) -> None:
    cache.save("conv", SavedState([1, 2, 3], b"s" * 1000))
    cache.flush()
    path = cache._path("conv")
    path.write_bytes(path.read_bytes()[:-10])
    assert cache.load("conv") is None
    assert not path.exists()


def test_budget_evicts_least_recently_written_files(tmp_path: Path) -> None:
    kv = open_cache(tmp_path, budget_bytes=2_500)
    try:
        for name, seconds_ago in (("old", 300), ("middle", 200)):
            kv.save(name, SavedState([1], b"x" * 1000))
            kv.flush()
            age(kv._path(name), seconds_ago)
        kv.save("new", SavedState([1], b"x" * 1000))  # three ~1 KB files exceed 2.5 KB
        kv.flush()
        assert not kv._path("old").exists()
        assert kv._path("middle").exists()
        assert kv._path("new").exists()
        assert kv.load("old") is None
    finally:
        kv.close()


def test_load_marks_a_file_recently_used(tmp_path: Path) -> None:
    kv = open_cache(tmp_path, budget_bytes=2_500)
    try:
        for name, seconds_ago in (("old", 300), ("middle", 200)):
            kv.save(name, SavedState([1], b"x" * 1000))
            kv.flush()
            age(kv._path(name), seconds_ago)
        assert kv.load("old") is not None  # now the most recently used
        kv.save("new", SavedState([1], b"x" * 1000))
        kv.flush()
        assert kv._path("old").exists()
        assert not kv._path("middle").exists()
        assert kv._path("new").exists()
    finally:
        kv.close()


def test_total_size_stays_within_budget(tmp_path: Path) -> None:
    budget = 5_000
    kv = open_cache(tmp_path, budget_bytes=budget)
    try:
        for i in range(20):
            kv.save(f"conv-{i}", SavedState(list(range(i)), bytes([i]) * 700))
            kv.flush()
            age(kv._path(f"conv-{i}"), 1000 - i)  # strictly increasing mtimes
        assert sum(p.stat().st_size for p in kv_files(tmp_path)) <= budget
        assert kv.load("conv-19") == SavedState(list(range(19)), bytes([19]) * 700)
        assert kv.load("conv-0") is None
    finally:
        kv.close()


def test_state_larger_than_budget_is_not_saved(tmp_path: Path) -> None:
    kv = open_cache(tmp_path, budget_bytes=1_000)
    try:
        kv.save("small", SavedState([1], b"x" * 100))
        kv.flush()
        kv.save("huge", SavedState([1], b"x" * 1_001))
        kv.flush()
        assert kv.load("huge") is None
        assert kv.load("small") == SavedState([1], b"x" * 100)  # nothing evicted for it
    finally:
        kv.close()


def test_state_that_fits_but_whose_file_does_not_evicts_nothing(tmp_path: Path) -> None:
    kv = open_cache(tmp_path, budget_bytes=1_000)
    try:
        kv.save("small", SavedState([1], b"x" * 100))
        kv.flush()
        age(kv._path("small"), 100)
        kv.save("big", SavedState(list(range(50)), b"x" * 1_000))  # == budget, plus header
        kv.flush()
        assert kv.load("small") == SavedState([1], b"x" * 100)
    finally:
        kv.close()


def test_close_stops_the_writer_thread(tmp_path: Path) -> None:
    kv = open_cache(tmp_path, budget_bytes=1_000)
    assert kv._writer.is_alive()
    kv.save("conv", SavedState([1], b"x"))
    kv.close()
    assert not kv._writer.is_alive()
    assert kv.load("conv") == SavedState([1], b"x")  # queued writes finish first


def test_save_does_not_block_when_the_writer_is_behind(tmp_path: Path) -> None:
    kv = open_cache(tmp_path, budget_bytes=1_000_000)
    try:
        started = time.monotonic()
        for i in range(200):
            kv.save(f"conv-{i}", SavedState([i], b"x" * 1000))
        assert time.monotonic() - started < 5
        kv.flush()
        saved = kv_files(tmp_path)
        assert 1 <= len(saved) <= 200  # some may be dropped, never blocked on
    finally:
        kv.close()
