"""KvDiskCache: conversation KV state on disk, per model, under a byte budget."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from llm.engine import kv_disk
from llm.engine.kv_disk import MAGIC, KvDiskCache, KvDiskStats, SavedState, sweep_kv_leftovers
from llm.engine.kv_policy import WritePolicy

MODEL = "model-a"
ROOT = Path(__file__).resolve().parent.parent
# The budget and eviction tests write their small budgets many times over in a second: far
# faster than the turnover cap allows (test_kv_policy.py tests the cap).
UNCAPPED = WritePolicy(turnover_s=0)


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[KvDiskCache]:
    kv = KvDiskCache(tmp_path / "kv", budget_bytes=1_000_000, model_fingerprint=MODEL)
    yield kv
    kv.close()


def open_cache(
    directory: Path, budget_bytes: int, model: str = MODEL, policy: WritePolicy = UNCAPPED
) -> KvDiskCache:
    return KvDiskCache(directory, budget_bytes=budget_bytes, model_fingerprint=model, policy=policy)


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


# --- failed writes and what a kill leaves --------------------------------------------------


class FullDisk:
    """A file on a disk that fills up: the first write lands in part, then ENOSPC."""

    def __init__(self, handle: IO[bytes]):
        self.handle = handle

    def write(self, data: bytes) -> int:
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


def test_a_full_disk_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kv = open_cache(tmp_path, budget_bytes=1_000_000)
    try:
        kv.save("conv", SavedState([1], b"saved before the disk filled"))
        kv.flush()
        real_open = Path.open

        def open_on_full_disk(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            handle = real_open(path, mode, *args, **kwargs)
            return FullDisk(handle) if path.parent == tmp_path and "w" in mode else handle

        monkeypatch.setattr(Path, "open", open_on_full_disk)
        kv.save("conv", SavedState([1, 2, 3], b"x" * 10_000))
        kv.save("other", SavedState([4], b"y" * 10_000))
        kv.flush()
        assert sorted(p.name for p in tmp_path.iterdir()) == [kv._path("conv").name]
        assert kv.stats().write_errors == 2
        monkeypatch.undo()  # space again: the cache still works
        assert kv.load("conv") == SavedState([1], b"saved before the disk filled")
        kv.save("conv", SavedState([1, 2, 3], b"z" * 100))
        kv.flush()
        assert kv.load("conv") == SavedState([1, 2, 3], b"z" * 100)
    finally:
        kv.close()


def test_opening_the_cache_removes_temporary_files_a_kill_left(tmp_path: Path) -> None:
    first = open_cache(tmp_path, 100_000)
    first.save("conv", SavedState([1, 2], b"live"))
    first.close()
    live = first._path("conv")
    leftover = live.with_suffix(".tmp140245")  # as _write names them: killed before rename
    leftover.write_bytes(live.read_bytes()[:7])
    other = tmp_path / "notes.tmp1"  # not a name the cache writes
    other.write_bytes(b"keep")
    second = open_cache(tmp_path, 100_000)
    try:
        assert not leftover.exists()
        assert other.exists()
        assert second.load("conv") == SavedState([1, 2], b"live")
    finally:
        second.close()


def test_the_start_up_sweep_covers_every_models_directory(tmp_path: Path) -> None:
    leftovers = [tmp_path / "gemma" / f"{'a' * 32}.tmp1", tmp_path / "qwen" / f"{'b' * 32}.tmp2"]
    kept = [tmp_path / "gemma" / f"{'a' * 32}.kv", tmp_path / "qwen" / "README.tmp"]
    for path in leftovers + kept:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x")
    assert sorted(sweep_kv_leftovers(tmp_path)) == sorted(leftovers)
    assert [p.exists() for p in leftovers + kept] == [False, False, True, True]
    assert sweep_kv_leftovers(tmp_path / "absent") == []


# A cache killed (SIGKILL) between writing a state and renaming it into place.
KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from llm.engine.kv_disk import KvDiskCache, SavedState
kv = KvDiskCache(Path(sys.argv[1]), budget_bytes=1_000_000, model_fingerprint="model-a")
kv.save("live", SavedState([1], b"live"))
kv.flush()
Path.replace = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
kv.save("conv", SavedState([1, 2, 3], b"s" * 100_000))
kv.flush()
"""


def test_a_writer_killed_mid_write_leaves_a_temporary_file_the_next_start_removes(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path)], cwd=ROOT, timeout=60
    )
    assert done.returncode == -signal.SIGKILL
    (leftover,) = (p for p in tmp_path.iterdir() if p.suffix != ".kv")
    assert leftover.stat().st_size > 100_000
    kv = open_cache(tmp_path, 1_000_000)
    try:
        assert sorted(p.suffix for p in tmp_path.iterdir()) == [".kv"]
        assert kv.load("live") == SavedState([1], b"live")
        assert kv.load("conv") is None
    finally:
        kv.close()


# --- what is written, and the counters ------------------------------------------------------


def test_counters_say_what_the_cache_buys_and_costs(cache: KvDiskCache) -> None:
    assert cache.stats() == KvDiskStats()
    assert cache.load("conv") is None
    cache.save("conv", SavedState([1, 2, 3], b"x" * 500))
    cache.flush()
    assert cache.load("conv") is not None
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.restored_tokens) == (1, 1, 3)
    assert stats.writes == 1
    assert stats.bytes_written == cache._path("conv").stat().st_size
    assert (cache.hits, cache.misses, cache.writes) == (1, 1, 1)  # the same, as attributes


def test_a_growing_conversation_is_rewritten_only_when_it_has_doubled(
    cache: KvDiskCache,
) -> None:
    tokens: list[int] = []
    saved: tuple[list[int], bytes] = ([], b"")
    for turn in range(12):
        assert cache.load("conv") == (SavedState(*saved) if turn else None)
        tokens = tokens + list(range(turn * 100, turn * 100 + 100))
        state = bytes([turn]) * (10 * len(tokens))  # a state's size follows its tokens
        cache.save("conv", SavedState(tokens, state))
        cache.flush()
        if turn in (0, 1, 3, 7):  # 100, 200, 400, 800 tokens
            saved = (list(tokens), state)
    stats = cache.stats()
    assert (stats.writes, stats.skipped_covered) == (4, 8)
    assert stats.bytes_written < 2 * cache._path("conv").stat().st_size + 4 * 2_000
    assert cache.load("conv") == SavedState(*saved)  # 800 of 1200 tokens


def test_an_unchanged_state_is_not_rewritten(cache: KvDiskCache) -> None:
    for _ in range(3):
        cache.save("conv", SavedState([1, 2, 3], b"x" * 100))
        cache.flush()
    assert (cache.writes, cache.skipped_covered) == (1, 2)


def test_a_state_that_left_the_saved_prefix_is_written(cache: KvDiskCache) -> None:
    cache.save("conv", SavedState(list(range(1000)), b"old"))
    cache.flush()
    dropped_a_turn = [*range(10), *range(600, 1100)]  # the oldest turns dropped to fit
    cache.save("conv", SavedState(dropped_a_turn, b"new"))
    cache.flush()
    assert cache.load("conv") == SavedState(dropped_a_turn, b"new")


def test_the_saved_prefix_is_learned_from_disk_after_a_restart(tmp_path: Path) -> None:
    first = open_cache(tmp_path, 100_000)
    first.save("conv", SavedState(list(range(100)), b"first"))
    first.close()
    second = open_cache(tmp_path, 100_000)
    try:
        assert second.load("conv") is not None  # every turn loads before it runs
        second.save("conv", SavedState(list(range(150)), b"longer"))
        second.flush()
        assert second.load("conv") == SavedState(list(range(100)), b"first")
        assert second.skipped_covered == 1
    finally:
        second.close()


def test_writes_stop_at_the_turnover_cap(tmp_path: Path) -> None:
    budget = 100_000  # a quarter of it may go at once; then 100 kB an hour
    kv = open_cache(tmp_path, budget, policy=WritePolicy(turnover_s=3600))
    try:
        for i in range(20):
            kv.save(f"conv-{i}", SavedState([i], b"x" * 5_000))
            kv.flush()
        stats = kv.stats()
        assert stats.writes == 5  # 25 kB
        assert stats.skipped_rate == 15
        assert stats.bytes_written < budget // 4 + 5_100
    finally:
        kv.close()


def test_a_failed_write_forgets_the_saved_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kv = open_cache(tmp_path, 1_000_000)
    try:
        monkeypatch.setattr(kv, "_write", lambda *args: (_ for _ in ()).throw(OSError("EIO")))
        kv.save("conv", SavedState([1, 2], b"lost"))
        kv.flush()
        monkeypatch.undo()
        kv.save("conv", SavedState([1, 2], b"again"))  # not skipped as already saved
        kv.flush()
        assert kv.load("conv") == SavedState([1, 2], b"again")
    finally:
        kv.close()


class FakeDisk:
    """A disk of ``free`` bytes plus what the cache removes (no real disk fills up)."""

    def __init__(self, directory: Path, free: int):
        self.directory, self.free = directory, free

    def __call__(self, directory: Path) -> int:
        held = sum(p.stat().st_size for p in self.directory.glob("**/*.kv"))
        return self.free - held


def test_n_the_kv_cache_evicts_its_oldest_states_to_keep_the_free_space_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#30: the KV cache wrote with no regard for free space until uploads got 507."""
    directory = tmp_path / "kv"
    disk = FakeDisk(directory, free=30_000)
    monkeypatch.setattr(kv_disk, "_free_bytes", disk)
    cache = KvDiskCache(
        directory,
        budget_bytes=1_000_000,
        model_fingerprint=MODEL,
        policy=UNCAPPED,
        min_free_bytes=10_000,
    )
    try:
        for n in range(3):
            cache.save(f"c{n}", SavedState([n], bytes(8_000)))
            cache.flush()
            for number, path in enumerate(kv_files(directory)):
                age(path, 100 - number)
        # 30,000 - 3 x 8,000 < 10,000: the oldest state made room for the newest
        assert len(kv_files(directory)) == 2 and disk(directory) >= 10_000
        assert cache.load("c0") is None and cache.load("c2") is not None
        cache.save("huge", SavedState([9], bytes(25_000)))  # never fits above the floor
        cache.flush()
        assert cache.stats().skipped_low_disk == 1 and cache.load("huge") is None
        assert len(kv_files(directory)) == 2  # no room even empty: nothing was evicted for it
    finally:
        cache.close()


def test_n_give_back_space_removes_oldest_states_until_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "kv"
    for n, model in enumerate(["a", "a", "b"]):
        (directory / model).mkdir(parents=True, exist_ok=True)
        path = directory / model / f"{n}.kv"
        path.write_bytes(bytes(1_000))
        age(path, 100 - n)
    disk = FakeDisk(directory, free=3_500)  # 500 free now
    monkeypatch.setattr(kv_disk, "_free_bytes", disk)
    assert kv_disk.give_back_space(directory, 2_000) == 2_000
    assert [p.name for p in directory.glob("**/*.kv")] == ["2.kv"]  # the newest stays
    assert kv_disk.give_back_space(directory, 2_000) == 0  # the floor holds: nothing to do
