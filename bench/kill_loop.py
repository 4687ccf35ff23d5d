"""Stop anywhere, lose nothing (#30 bar): a real ``ragdesk serve`` is stopped again and
again, by ``kill -9`` or SIGTERM at a random moment, while uploads, large documents
being embedded in slices and deletes are in flight; then it is started once more and
every acknowledged upload must be there and indexed, and no deleted document back.

    python -m bench.kill_loop [--cycles 20] [--seed 7] [--embedder real|fake]

Each cycle starts the server on the same data directory, uploads a few one-page files
into two collections (and every third cycle a DOCX of ``--passages`` passages, so that
embedding slices of several documents are in progress), deletes one document it was
told about earlier, waits a random 0.5-6 s and stops the server: odd cycles with SIGTERM
(which must exit 0 within the drain time plus a grace), even ones with SIGKILL. An
upload counts as acknowledged when its 201 arrived; a delete when its 204 did.
"""

from __future__ import annotations

import argparse
import random
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.fair_ingest import create_collection, large_docx
from tests.server import ServerProcess

STOP_BOUND_S = 60.0  # RAGDESK_DRAIN_S (20 s) plus a bounded grace, as tests/test_stop_anywhere
SETTLE_S = 900.0  # the last start: every acknowledged document indexed within this


@dataclass
class Tally:
    acknowledged: dict[int, str] = field(default_factory=dict)  # id -> filename
    deleted: set[int] = field(default_factory=set)
    sigterm_exits: list[tuple[int, float]] = field(default_factory=list)  # (status, seconds)
    kills: int = 0
    refused: int = 0  # uploads answered with an error (the server was stopping): not acked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--passages", type=int, default=3000)
    parser.add_argument("--embedder", choices=("real", "fake"), default="real")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    docx = large_docx(args.passages)
    tally = Tally()
    settings = {"generator_backend": "fake"}
    if args.embedder == "fake":
        settings["embedder_backend"] = "fake"
    with tempfile.TemporaryDirectory(prefix="ragdesk-kill-") as scratch:
        data_dir = Path(scratch) / "data"
        create_collection(data_dir, "other")
        log = Path(scratch) / "server.log"
        for cycle in range(args.cycles):
            server = _start(data_dir, log, settings)
            _cycle(server, cycle, rng, docx, tally)
            _stop(server, by_sigterm=cycle % 2 == 1, tally=tally)
            print(
                f"cycle {cycle + 1}/{args.cycles}: {len(tally.acknowledged)} acknowledged, "
                f"{len(tally.deleted)} deleted",
                flush=True,
            )
        server = _start(data_dir, log, settings)
        try:
            lost, resurrected, unfinished, settle_s = _check(server, tally)
        finally:
            server.stop()
    _report(args, tally, lost, resurrected, unfinished, settle_s)


def _start(data_dir: Path, log: Path, settings: dict[str, str]) -> ServerProcess:
    try:
        return ServerProcess(data_dir, log, **settings).start(600)
    except RuntimeError:  # it exited: show why before the scratch directory goes
        print(log.read_text(errors="replace")[-4000:])
        raise


def _cycle(server: ServerProcess, cycle: int, rng: random.Random, docx: bytes, t: Tally) -> None:
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=30)
    stop_at = time.monotonic() + rng.uniform(0.5, 6.0)
    try:
        if cycle % 3 == 0:
            _upload(client, t, f"contract-{cycle}.docx", docx, None)
        survivors = sorted(set(t.acknowledged) - t.deleted)
        if survivors and cycle % 2 == 0:
            victim = rng.choice(survivors)
            if client.delete(f"/api/documents/{victim}").status_code == 204:
                t.deleted.add(victim)
        n = 0
        while time.monotonic() < stop_at:
            collection = "other" if n % 2 else None
            text = f"Memo {cycle}.{n}: the locker code for room {cycle * 100 + n} is {n * 7919}."
            _upload(client, t, f"memo-{cycle}-{n}.txt", text.encode(), collection)
            n += 1
            time.sleep(rng.uniform(0.05, 0.4))
    finally:
        client.close()


def _upload(client: httpx.Client, t: Tally, name: str, data: bytes, collection: str | None) -> None:
    params = {"collection": collection} if collection else {}
    try:
        response = client.post("/api/documents", params=params, files=[("file", (name, data))])
    except httpx.HTTPError:
        t.refused += 1
        return
    if response.status_code != 201:
        t.refused += 1
        return
    for document in response.json()["documents"]:
        t.acknowledged[int(document["id"])] = name


def _stop(server: ServerProcess, *, by_sigterm: bool, tally: Tally) -> None:
    assert server.process is not None
    if not by_sigterm:
        server.kill()
        server.stop()  # closes the log
        tally.kills += 1
        return
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    try:
        status = server.process.wait(STOP_BOUND_S)
    except Exception:
        status = -1  # did not stop in time: counted as a failure, then killed
    tally.sigterm_exits.append((status, time.monotonic() - started))
    server.stop()


def _check(server: ServerProcess, t: Tally) -> tuple[set[int], set[int], dict[int, str], float]:
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
    started = time.monotonic()
    try:
        while True:
            documents = client.get("/api/documents").json()["documents"]
            listed = {d["id"]: d["status"] for d in documents}
            expected = set(t.acknowledged) - t.deleted
            unfinished = {i: listed[i] for i in expected if listed.get(i) not in (None, "indexed")}
            if not unfinished or time.monotonic() - started > SETTLE_S:
                break
            time.sleep(1.0)
        settle_s = time.monotonic() - started
        return expected - set(listed), t.deleted & set(listed), unfinished, settle_s
    finally:
        client.close()


def _report(
    args: argparse.Namespace,
    t: Tally,
    lost: set[int],
    resurrected: set[int],
    unfinished: dict[int, str],
    settle_s: float,
) -> None:
    exits = [status for status, _ in t.sigterm_exits]
    slowest = max((s for _, s in t.sigterm_exits), default=0.0)
    print(
        f"\n{args.cycles} cycles ({args.embedder} embedder, seed {args.seed}): "
        f"{t.kills} kill -9, {len(exits)} SIGTERM\n"
    )
    print("| measure | value |")
    print("| --- | --- |")
    print(f"| uploads acknowledged (201) | {len(t.acknowledged)} |")
    print(f"| uploads refused while stopping (not acknowledged) | {t.refused} |")
    print(f"| deletes acknowledged (204) | {len(t.deleted)} |")
    print(f"| acknowledged documents lost | {len(lost)} |")
    print(f"| deleted documents back | {len(resurrected)} |")
    print(f"| not indexed {settle_s:.0f} s after the last start | {len(unfinished)} |")
    print(f"| SIGTERM exits with status 0 | {exits.count(0)} of {len(exits)} |")
    print(f"| slowest SIGTERM exit | {slowest:.1f} s (bound {STOP_BOUND_S:.0f} s) |")
    if lost or resurrected or unfinished or exits.count(0) != len(exits):
        print(f"\nFAILED: lost {sorted(lost)}, back {sorted(resurrected)}, unfinished {unfinished}")
        print(f"SIGTERM statuses: {exits}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
