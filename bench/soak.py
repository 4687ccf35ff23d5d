"""Soak: thousands of mixed requests against a real server, and what the process holds
before and after.

    python -m bench.soak [--requests 3000] [--workers 6] [--rounds 3]

A real server (bundled models) takes a mix of requests from ``--workers`` threads: grounded
chat (``/api/chat``, streamed), raw completions, searches, uploads of small distinct
documents, deletes of earlier uploads, ``/v1`` chat, and clients that leave mid-stream.
The run is split into ``--rounds`` equal rounds; after each, the server's resident memory,
open file descriptors, threads and files under its data directory's temp patterns are
read from /proc. The bar: from the end of the first round (warm) to the end of the last,
memory, descriptors and threads stay within 10 %, and no temp file is left over; the
first round is warm-up (model caches, SQLite page cache, allocator arenas), which is how
a leak is told from warm-up: a leak keeps growing after it.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx

FLAT_BAR = 1.10
TEMP_PATTERNS = ("**/*.tmp", "**/.guard-*", "**/*.partial")
QUESTIONS = [
    "Which file formats can I upload?",
    "How do I stop an answer?",
    "What is the boiling point of water in the soak notes?",
    "Who wrote the soak memo?",
]


@dataclass(frozen=True)
class Snapshot:
    rss_mb: float
    fds: int
    threads: int
    temp_files: int

    @staticmethod
    def of(pid: int, data_dir: Path) -> Snapshot:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        temps = sum(1 for pattern in TEMP_PATTERNS for _ in data_dir.glob(pattern))
        return Snapshot(
            rss_mb=int(fields["VmRSS"].split()[0]) / 1024,
            fds=len(os.listdir(f"/proc/{pid}/fd")),
            threads=int(fields["Threads"].strip()),
            temp_files=temps,
        )


class Mix:
    """One request of the mix at a time, chosen at random; records statuses."""

    def __init__(self, url: str, headers: dict[str, str], seed: int):
        self.client = httpx.Client(base_url=url, headers=headers, timeout=120)
        self.random = random.Random(seed)
        self.statuses: Counter[str] = Counter()
        self.uploaded: list[int] = []
        self.conversations: list[int] = []
        self.lock = threading.Lock()

    def one(self, n: int) -> None:
        kind = self.random.choices(
            ["chat", "complete", "search", "upload", "delete", "v1", "leave"],
            weights=[3, 3, 6, 3, 2, 2, 1],
        )[0]
        try:
            status = getattr(self, kind)(n)
        except httpx.TransportError as exc:
            status = f"transport:{type(exc).__name__}"
        with self.lock:
            self.statuses[f"{kind}:{status}"] += 1

    def chat(self, n: int) -> int:
        """A question; half of them follow up an earlier conversation (the KV disk
        cache's case: its state may have been evicted from the context since)."""
        body: dict[str, Any] = {"message": self.random.choice(QUESTIONS)}
        with self.lock:
            if self.conversations and self.random.random() < 0.5:
                body["conversation_id"] = self.random.choice(self.conversations)
        with self.client.stream("POST", "/api/chat", json=body) as reply:
            text = reply.read().decode(errors="replace")
        if match := re.search(r'"conversation_id":\s*(\d+)', text):
            with self.lock:
                self.conversations.append(int(match.group(1)))
                del self.conversations[:-50]
        return reply.status_code

    def complete(self, n: int) -> int:
        body = {"prompt": f"Note {n}: the weather", "max_tokens": 8, "temperature": 0.7}
        return self.client.post("/api/completions", json=body).status_code

    def search(self, n: int) -> int:
        query = self.random.choice(QUESTIONS)
        return self.client.post("/api/search", json={"query": query}).status_code

    def upload(self, n: int) -> int:
        text = f"# Soak note {n}\n\nWater boils at {n % 50 + 80} degrees in note {n}.\n"
        files = [("file", (f"soak-{n}.md", text.encode()))]
        reply = self.client.post("/api/documents", files=files)
        if reply.status_code == 201:
            with self.lock:
                self.uploaded.append(reply.json()["documents"][0]["id"])
        return reply.status_code

    def delete(self, n: int) -> int | str:
        with self.lock:
            if not self.uploaded:
                return "none"
            document_id = self.uploaded.pop(self.random.randrange(len(self.uploaded)))
        return self.client.delete(f"/api/documents/{document_id}").status_code

    def v1(self, n: int) -> int:
        body = {
            "model": "default",
            "messages": [{"role": "user", "content": f"Say hello {n}."}],
            "max_tokens": 8,
        }
        return self.client.post("/v1/chat/completions", json=body).status_code

    def leave(self, n: int) -> int:
        """A client that reads the first event of a long stream and hangs up."""
        body = {"prompt": "Count to one hundred:", "max_tokens": 200, "stream": True}
        with self.client.stream("POST", "/api/completions", json=body) as reply:
            for _ in reply.iter_bytes():
                break
            return reply.status_code


def kv_disk_counters(client: httpx.Client) -> dict[str, float]:
    """The on-disk KV cache's hits, misses and bytes written, from /metrics."""
    totals: Counter[str] = Counter()
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("ragdesk_kv_disk_"):
            name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[1]
            totals[name.removeprefix("ragdesk_kv_disk_")] += float(value)
    return dict(totals)


def run(requests: int, workers: int, rounds: int) -> dict[str, Any]:
    from tests.server import ServerProcess  # the e2e tests' real-process harness

    root = Path(tempfile.mkdtemp(prefix="ragdesk-soak-"))
    server = ServerProcess(root / "data", root / "server.log", rate_limit_per_minute=0)
    server.start()
    assert server.process is not None
    pid = server.process.pid
    mix = Mix(server.url, server.headers, seed=7)
    snapshots = [Snapshot.of(pid, server.data_dir)]
    per_round = requests // rounds
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(workers) as pool:
            for r in range(rounds):
                numbers = range(r * per_round, (r + 1) * per_round)
                list(pool.map(mix.one, numbers))
                time.sleep(3)  # let checkpoints and idle work settle before reading /proc
                snapshots.append(Snapshot.of(pid, server.data_dir))
                print(f"round {r + 1}/{rounds}: {snapshots[-1]}", flush=True)
        kv = kv_disk_counters(mix.client)
    finally:
        elapsed = time.monotonic() - started
        alive = server.process.poll() is None
        server.stop()
    warm, last = snapshots[1], snapshots[-1]
    ratios = {
        "rss": last.rss_mb / warm.rss_mb,
        "fds": last.fds / max(1, warm.fds),
        "threads": last.threads / max(1, warm.threads),
    }
    failures = {k: v for k, v in mix.statuses.items() if k.split(":", 1)[1].startswith("5")}
    return {
        "requests": per_round * rounds,
        "seconds": elapsed,
        "alive": alive,
        "snapshots": snapshots,
        "ratios": ratios,
        "statuses": dict(sorted(mix.statuses.items())),
        "server_errors": failures,
        "kv_disk": kv,
        "passed": alive
        and not failures
        and all(v <= FLAT_BAR for v in ratios.values())
        and last.temp_files == 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = run(args.requests, args.workers, args.rounds)
    print(f"\n{result['requests']} requests in {result['seconds']:.0f} s; alive: {result['alive']}")
    print("| after | RSS MB | fds | threads | temp files |\n| --- | --- | --- | --- | --- |")
    for i, s in enumerate(result["snapshots"]):
        label = "start" if i == 0 else f"round {i}"
        print(f"| {label} | {s.rss_mb:.0f} | {s.fds} | {s.threads} | {s.temp_files} |")
    ratios = ", ".join(f"{k} {v:.3f}×" for k, v in result["ratios"].items())
    print(f"\nlast round / first round: {ratios} (bar ≤ {FLAT_BAR}×)")
    print(f"statuses: {result['statuses']}")
    kv = result["kv_disk"]
    looked = kv.get("hits_total", 0) + kv.get("misses_total", 0)
    print(
        f"KV disk cache: {kv.get('hits_total', 0):.0f} hits / {looked:.0f} lookups, "
        f"{kv.get('written_bytes_total', 0) / 2**20:.1f} MiB written"
    )
    print(f"5xx: {result['server_errors'] or 'none'}")
    print("PASS" if result["passed"] else "FAIL")


if __name__ == "__main__":
    main()
