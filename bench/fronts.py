"""Fronts on one PostgreSQL: search + grounded chat requests/s of two fronts vs one.

    python -m bench.fronts [--clients 16] [--seconds 30] [--warmup 5] [--json results.json]

Each front is a real Ragdesk process (``RAGDESK_DATABASE_URL``: retrieval/pg.py, pgvector,
BM25 in SQL; ``RAGDESK_BLOB_URL``: one originals directory) pinned to one CPU core (the
affinity it inherits at start, one PyTorch thread), with the real bundled embedder
(embedding the question is a front's own CPU work) and the fake generator with no delay
(a canned grounded answer: the model's time is not what fronts scale). One PostgreSQL 16
with pgvector (pgserver, tests/pg_kit.py; not pinned) holds one database, loaded once:
the 32 World Factbook profiles (bench/data/factbook/corpus) uploaded through the first
front and indexed before anything is timed.

``--clients`` threads alternate ``POST /api/search`` (k=4) and a grounded
``POST /api/chat`` (a new conversation each time; the whole event stream is read, and it
must end with ``done``), asking the Factbook golden set's questions, their requests spread
round-robin over the fronts (each client sends both kinds to every front in turn), for
``--seconds`` after ``--warmup`` seconds whose requests are not counted. Requests/s =
requests completed / wall time. Round 1: one front (core 0); round 2: the same front and
a second one (core 1), same database, same run. Bar: two ≥ 1.6× one, with no errors
(issue #29).

The CPU columns say where the time went (CPU-seconds per wall second): a pinned front can
use at most 1.0. On a 2-core machine PostgreSQL and the client threads share the cores
with the fronts, with one front idle core to spare in round 1 and none in round 2, so the
ratio there is a floor of what separate machines would show.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx

from retrieval.evaluation import load_golden, percentile
from tests.pg_kit import PgServer  # PostgreSQL 16 + pgvector in a wheel, as the tests use it
from tests.server import ServerProcess, start_on_core  # the e2e tests' real processes

DATA = Path(__file__).parent / "data" / "factbook"
BAR = 1.6
K = 4


def start_front(root: Path, core: int, database_url: str, blobs: Path) -> ServerProcess:
    front = ServerProcess(
        root,
        root / "server.log",
        database_url=database_url,
        blob_url=str(blobs),
        generator_backend="fake",  # no delay: the canned answer streams at once
        embed_query_threads=1,
        embed_ingest_threads=1,
    )
    return start_on_core(front, core)


def load_corpus(front: ServerProcess, files: list[Path], timeout: float = 600) -> int:
    """Upload ``files`` through ``front`` in one request and wait until every one is
    indexed; returns the number of documents."""
    parts = [("file", (path.name, path.read_bytes())) for path in files]
    with httpx.Client(base_url=front.url, headers=front.headers, timeout=300) as http:
        response = http.post("/api/documents", files=parts)
        response.raise_for_status()
        pending = {d["id"] for d in response.json()["documents"]}
        count = len(pending)
        deadline = time.monotonic() + timeout
        while pending:  # one list request a poll
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} documents not indexed; see {front.log_path}")
            time.sleep(0.5)
            for document in http.get("/api/documents").json()["documents"]:
                if document["id"] in pending and document["status"] == "failed":
                    raise RuntimeError(f"document {document['id']} failed; see {front.log_path}")
                if document["status"] == "indexed":
                    pending.discard(document["id"])
    return count


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``); with
    ``children``, also that of its children it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds(postmaster: int) -> float:
    """CPU time of the PostgreSQL server: the postmaster, its live backends and helpers, and
    those that have exited (counted in the postmaster's children's time)."""
    total = cpu_seconds(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:  # its parent
                total += cpu_seconds(int(entry.name))
        except (OSError, ValueError, IndexError):  # it exited meanwhile
            continue
    return total


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"search": [], "chat": []})
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, seconds: float, error: str | None) -> None:
        with self.lock:
            if error is None:
                self.latencies[kind].append(seconds)
            else:
                self.errors.append(f"{kind}: {error}")


def one_request(
    http: httpx.Client,
    front: ServerProcess,
    kind: str,
    question: str,
    accepted: Callable[[], None] | None = None,
) -> str | None:
    """Send one request; None when it succeeded, else what went wrong. ``accepted`` is
    called when a chat's answer starts (its response's 200 arrived: the front took it)."""
    try:
        if kind == "search":
            response = http.post(f"{front.url}/api/search", json={"query": question, "k": K})
            if response.status_code != 200:
                return f"{response.status_code} {response.text[:200]}"
            if not response.json()["hits"]:
                return "no hits"
            return None
        with http.stream("POST", f"{front.url}/api/chat", json={"message": question}) as response:
            if response.status_code == 200 and accepted is not None:
                accepted()
            text = response.read().decode(errors="replace")
        if response.status_code != 200:
            return f"{response.status_code} {text[:200]}"
        events = [line for line in text.splitlines() if line.startswith("event:")]
        if "event: error" in events or not events or events[-1] != "event: done":
            return f"stream ended with {events[-1:] or 'nothing'}: {text[-200:]}"
        return None
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"


def drive(
    fronts: list[ServerProcess],
    headers: dict[str, str],
    questions: list[str],
    clients: int,
    seconds: float,
) -> tuple[Tally, float]:
    """``clients`` threads sending until ``seconds`` have passed; the tally and the wall
    time until the last request ended. Client ``i``'s request ``n`` is a search when
    ``i + n`` is even, else a chat, and goes to front ``i + n // 2``: every client sends
    both kinds to every front in turn."""
    tally = Tally()
    end = time.monotonic() + seconds

    def client(i: int) -> None:
        n = 0
        with httpx.Client(headers=headers, timeout=120) as http:
            while time.monotonic() < end:
                kind = "search" if (i + n) % 2 == 0 else "chat"
                front = fronts[(i + n // 2) % len(fronts)]
                question = questions[(7 * i + n) % len(questions)]
                started = time.monotonic()
                error = one_request(http, front, kind, question)
                tally.record(kind, time.monotonic() - started, error)
                n += 1

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally, time.monotonic() - start


def run_round(
    fronts: list[ServerProcess],
    questions: list[str],
    args: argparse.Namespace,
    postmaster: int,
) -> dict[str, Any]:
    headers = fronts[0].headers  # an API key works on every front: one database
    warm, _ = drive(fronts, headers, questions, args.clients, args.warmup)
    if warm.errors:
        print(f"  warm-up errors: {len(warm.errors)}, first: {warm.errors[0]}")
    pids = [front.process.pid for front in fronts if front.process is not None]
    fronts_cpu = [cpu_seconds(pid) for pid in pids]
    pg_cpu = postgres_cpu_seconds(postmaster)
    own = os.times()
    tally, wall = drive(fronts, headers, questions, args.clients, args.seconds)
    own_after = os.times()
    fronts_cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, fronts_cpu, strict=True)]
    pg_cpu = postgres_cpu_seconds(postmaster) - pg_cpu
    clients_cpu = (own_after.user + own_after.system) - (own.user + own.system)
    done = sum(len(v) for v in tally.latencies.values())
    result: dict[str, Any] = {
        "fronts": len(fronts),
        "requests": done,
        "wall_s": wall,
        "requests_per_s": done / wall,
        "errors": len(tally.errors),
        "first_errors": tally.errors[:5],
        "cpu_cores": {
            "fronts": [round(c / wall, 3) for c in fronts_cpu],
            "postgresql": round(pg_cpu / wall, 3),
            "clients": round(clients_cpu / wall, 3),
        },
    }
    every: list[float] = []
    for kind, latencies in tally.latencies.items():
        every += latencies
        result[kind] = summary(latencies)
    result["all"] = summary(every)
    print(
        f"{len(fronts)} front(s): {done} requests in {wall:.1f} s = "
        f"{result['requests_per_s']:.1f} requests/s, {len(tally.errors)} errors",
        flush=True,
    )
    for error in tally.errors[:5]:
        print(f"  error: {error}")
    return result


def summary(latencies: list[float]) -> dict[str, float | int]:
    if not latencies:
        return {"requests": 0, "p50_ms": float("nan"), "p95_ms": float("nan")}
    return {
        "requests": len(latencies),
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * percentile(latencies, 0.95),
    }


def table(rounds: list[dict[str, Any]]) -> str:
    lines = [
        "| fronts | requests | requests/s | search p50 / p95 | chat p50 / p95 | all p50 / p95 "
        "| errors | CPU (cores): fronts / PostgreSQL / clients |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rounds:
        cpu = r["cpu_cores"]
        latency = [f"{r[k]['p50_ms']:.0f} / {r[k]['p95_ms']:.0f} ms" for k in ("search", "chat")]
        latency.append(f"{r['all']['p50_ms']:.0f} / {r['all']['p95_ms']:.0f} ms")
        lines.append(
            f"| {r['fronts']} | {r['requests']} | {r['requests_per_s']:.1f} | "
            + " | ".join(latency)
            + f" | {r['errors']} | {' + '.join(f'{c:.2f}' for c in cpu['fronts'])} / "
            f"{cpu['postgresql']:.2f} / {cpu['clients']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds not counted")
    parser.add_argument(
        "--documents", type=int, default=0, help="load only the first N documents (0 = all)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        raise SystemExit("needs two CPU cores")
    files = sorted((DATA / "corpus").glob("*.md"))
    if args.documents:
        files = files[: args.documents]
    questions = [q.question for q in load_golden(DATA / "golden.jsonl") if not q.offtopic]
    one, five, fifteen = os.getloadavg()
    print(
        f"cores {cores}, load average {one:.2f} {five:.2f} {fifteen:.2f}, "
        f"{args.clients} clients, {len(files)} documents, {len(questions)} questions"
    )
    pg = PgServer()
    rounds: list[dict[str, Any]] = []
    try:
        postmaster = pg.server.get_pid()
        assert postmaster is not None
        url = pg.fresh_database()
        with tempfile.TemporaryDirectory(prefix="ragdesk-fronts-") as tmp:
            root = Path(tmp)
            blobs = root / "originals"
            blobs.mkdir()
            fronts: list[ServerProcess] = []
            try:  # the fronts stop before their directories go
                fronts.append(start_front(root / "front0", cores[0], url, blobs))
                started = time.monotonic()
                documents = load_corpus(fronts[0], files)
                print(f"{documents} documents indexed in {time.monotonic() - started:.1f} s")
                rounds.append(run_round(fronts, questions, args, postmaster))
                fronts.append(start_front(root / "front1", cores[1], url, blobs))
                rounds.append(run_round(fronts, questions, args, postmaster))
            finally:
                for front in fronts:
                    front.stop()
    finally:
        pg.stop()
    print(f"load average now {os.getloadavg()[0]:.2f}")
    print(table(rounds))
    ratio = rounds[1]["requests_per_s"] / rounds[0]["requests_per_s"]
    errors = sum(r["errors"] for r in rounds)
    verdict = "PASS" if ratio >= BAR and errors == 0 else "FAIL"
    print(f"two fronts / one front: {ratio:.2f}x (bar {BAR}x, 0 errors; {errors}): {verdict}")
    if args.json:
        results = {"load_average_at_start": [one, five, fifteen], "rounds": rounds}
        args.json.write_text(json.dumps({**results, "ratio": ratio, "bar": BAR}, indent=2))


if __name__ == "__main__":
    main()
