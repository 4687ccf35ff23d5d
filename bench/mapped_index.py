"""A large FAISS checkpoint searched memory-mapped against the same one loaded into memory.

    python -m bench.mapped_index [--vectors 300000] [--queries 300]

One checkpoint of ``--vectors`` synthetic 384-dim unit vectors (exact, then IVF) is written
once; each mode then runs in its own fresh process, so memory figures are that process's:

* *load*: ``FaissIndex.load`` (in memory it checks the file's SHA-256 and reads it; a
  mapped base is checked by its size);
* *memory*: anonymous resident memory after loading (``RssAnon``: what the index costs in
  RAM the kernel cannot reclaim; a mapped file's pages count as ``RssFile`` and are evicted
  under pressure);
* *search*: p50 / p95 of unfiltered and collection-scoped (10 % of ids) searches, k = 50;
* *cold*: load and first search again, after the files were evicted from the page cache
  (``posix_fadvise(DONTNEED)``), as after a reboot: what start-up reads from disk;
* *checkpoint*: one ``save`` after a document's worth of writes (50 added, 50 deleted):
  the whole index in memory, only the layers over a mapped base;
* *layer*: unfiltered search p50 after 10,000 and 50,000 more vectors are added: over a
  mapped base they form the exact layer, merged at 50,000 (``max_layer_vectors``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.query import percentile
from retrieval.index import FaissIndex
from retrieval.index_types import IndexSpec, new_ivf

DIM = 384
MODES = {"in-memory": 1e9, "mapped": 0.0}  # IndexSpec.mmap_above_mb
LAYERS = (10_000, 50_000)  # vectors added after the checkpoint, for the layer's search cost
LAYER_IDS = 10**9  # where their ids start


def build(directory: Path, count: int, kind: str) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    raw = new_ivf(DIM, vectors, count) if kind == "ivf" else None
    index = FaissIndex(DIM, "m", _index=raw, spec=IndexSpec(mmap_above_mb=1e9))
    index.add(np.arange(count, dtype=np.int64), vectors)
    index.save(directory)


def rss_kb() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssFile"):
            fields[name] = int(value.split()[0])
    return fields


def evict(directory: Path) -> None:
    """Drop the checkpoint's files from the page cache: the next read goes to the disk."""
    for path in directory.glob("chunks*"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cold_start(directory: Path, spec: IndexSpec) -> dict[str, float]:
    """Load and one search with nothing of the index in the page cache."""
    evict(directory)
    started = time.perf_counter()
    index = FaissIndex.load(directory, model_id="m", dimension=DIM, spec=spec)
    loaded = time.perf_counter()
    index.search(np.random.default_rng(2).normal(size=DIM).astype(np.float32), 50)
    searched = time.perf_counter()
    return {
        "cold_load_s": round(loaded - started, 3),
        "cold_first_search_s": round(searched - loaded, 3),
    }


def child(directory: Path, mode: str, queries: int) -> dict[str, Any]:
    """One mode in this (fresh) process, the files in the page cache."""
    spec = IndexSpec(mmap_above_mb=MODES[mode], use_gpu=False)
    before = rss_kb()
    started = time.perf_counter()
    index = FaissIndex.load(directory, model_id="m", dimension=DIM, spec=spec)
    load_s = time.perf_counter() - started
    after = rss_kb()
    rng = np.random.default_rng(1)
    allowed = np.sort(rng.choice(index.count, index.count // 10, replace=False))
    timings: dict[str, list[float]] = {"unfiltered": [], "scoped": []}
    for query in rng.normal(size=(queries, DIM)).astype(np.float32):
        for name, only in (("unfiltered", None), ("scoped", allowed)):
            started = time.perf_counter()
            index.search(query, 50, allowed=only)
            timings[name].append((time.perf_counter() - started) * 1000)
    added = np.arange(index.count, index.count + 50, dtype=np.int64)
    index.add(added, rng.normal(size=(50, DIM)).astype(np.float32))
    index.remove(np.arange(50, dtype=np.int64))
    existing = {path.name for path in directory.glob("chunks*")}
    started = time.perf_counter()
    manifest = index.save(directory)
    checkpoint_s = time.perf_counter() - started
    written = sorted(name for name, _ in manifest.files() if name not in existing)
    grown = grow(index, rng)
    return {
        "mode": mode,
        "kind": index.kind,
        "mapped": index.mapped,
        "load_s": round(load_s, 3),
        "anon_mb": round((after["RssAnon"] - before["RssAnon"]) / 1024, 1),
        "file_mb_after_searches": round(rss_kb()["RssFile"] / 1024, 1),
        **{f"{name}_p50_ms": round(statistics.median(ms), 3) for name, ms in timings.items()},
        **{f"{name}_p95_ms": round(percentile(ms, 0.95), 3) for name, ms in timings.items()},
        "checkpoint_s": round(checkpoint_s, 3),
        "files_written": written,  # the new files of the checkpoint
        **grown,
    }


def grow(index: FaissIndex, rng: np.random.Generator) -> dict[str, float]:
    """Unfiltered search p50 once ``LAYERS`` vectors were added since the checkpoint (over a
    mapped base: a layer of that size, searched exactly; nothing saved, so no merge)."""
    result, added = {}, 0
    for total in LAYERS:
        ids = np.arange(LAYER_IDS + added, LAYER_IDS + total, dtype=np.int64)
        index.add(ids, rng.normal(size=(len(ids), DIM)).astype(np.float32))
        added = total
        seconds = []
        for query in rng.normal(size=(100, DIM)).astype(np.float32):
            started = time.perf_counter()
            index.search(query, 50)
            seconds.append((time.perf_counter() - started) * 1000)
        result[f"unfiltered_p50_ms_after_{total}_added"] = round(statistics.median(seconds), 3)
    return result


def run_mode(directory: Path, mode: str, queries: int) -> dict[str, Any]:
    """``mode`` in fresh processes, each on a private copy of the checkpoint (saves change
    it): warm (the copy was just written, so it is in the page cache), then cold."""
    result: dict[str, Any] = {}
    for phase in ("warm", "cold"):
        copy = directory.parent / f"{directory.name}-{mode}-{phase}"
        subprocess.run(["cp", "-r", str(directory), str(copy)], check=True)
        command = [sys.executable, "-m", "bench.mapped_index", "--child", mode, str(copy)]
        command += ["--queries", str(queries), *(["--cold"] if phase == "cold" else [])]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        result.update(json.loads(output.strip().splitlines()[-1]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vectors", type=int, default=300_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, directory = args.child[0], Path(args.child[1])
        if args.cold:
            spec = IndexSpec(mmap_above_mb=MODES[mode], use_gpu=False)
            print(json.dumps(cold_start(directory, spec)))
        else:
            print(json.dumps(child(directory, mode, args.queries)))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="ragdesk-mmap-") as tmp:
        for kind in ("flat", "ivf"):
            directory = Path(tmp) / kind
            build(directory, args.vectors, kind)
            size_mb = sum(p.stat().st_size for p in directory.glob("chunks*")) / 2**20
            print(f"{kind}: {args.vectors} vectors, {size_mb:.0f} MB on disk", flush=True)
            for mode in MODES:
                row = run_mode(directory, mode, args.queries)
                rows.append(row)
                print(json.dumps(row), flush=True)
    by = {(row["kind"], row["mode"]): row for row in rows}
    for kind in ("flat", "ivf"):
        memory, mapped = by[(kind, "in-memory")], by[(kind, "mapped")]
        keys = ("load_s", "cold_load_s", "cold_first_search_s", "unfiltered_p50_ms")
        for key in (*keys, "scoped_p50_ms", "checkpoint_s"):
            print(f"{kind} {key}: mapped / in-memory = {mapped[key] / memory[key]:.2f}")


if __name__ == "__main__":
    main()
