"""What prefetch costs a loaded server: tokens/s of real answers under 8 typists and 8 API
streams, prefetch on against off, rounds alternating, in one run.

    python -m bench.prefetch_load [--typists 8] [--streams 8] [--seconds 240] [--rounds 2]

The golden set's corpus is uploaded once; each round starts ``ragdesk serve`` on that data
twice, with ``RAGDESK_PREFETCH`` on and off (the order alternating between rounds). Then,
for ``--seconds``: each of ``--streams`` API clients asks the golden questions one after
another through ``/api/chat``; each of ``--typists`` users (an account and API key each,
so their drafts do not replace each other's) types a question at 5 characters a second,
sending ``POST /api/prefetch`` at each word's end as the web chat does, then asks it the
same way. Counted: the "token" events of every answer received within the window, per
second, and the answers finished in it; and the server's prefetch outcomes. On 2 cores
the first minutes are mostly prefill (16 answers of ~500 prompt tokens each), hence the
long window. The bar (issue #27): with prefetch on, within 5 % of off.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.answers import DATA
from bench.prefetch import prefetch_counts, upload_corpus
from retrieval.evaluation import load_golden
from tests.server import ServerProcess

CPS = 5.0  # characters a second, as a person types


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--typists", type=int, default=8)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--set", default="handbook")
    args = parser.parse_args()
    questions = [q.question for q in load_golden(DATA / args.set / "golden.jsonl")]
    rates: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="ragdesk-prefetch-load-") as scratch:
        data, log = Path(scratch) / "data", Path(scratch) / "server.log"
        first = ServerProcess(data, log).start(600)
        try:
            upload_corpus(first, DATA / args.set / "corpus")
        finally:
            first.stop()
        keys = _typist_keys(data, args.typists)
        for number in range(args.rounds):
            for prefetch in (True, False) if number % 2 == 0 else (False, True):
                server = ServerProcess(data, log, prefetch=str(prefetch).lower()).start(600)
                try:
                    rate = _load(server, keys, questions, args)
                    counts = prefetch_counts(server.url)
                finally:
                    server.stop()
                rates[prefetch].append(rate)
                shown = {k: int(v) for k, v in counts.items()}
                print(
                    f"  round {number + 1} prefetch {'on ' if prefetch else 'off'} "
                    f"{rate:6.2f} tokens/s  {shown}",
                    flush=True,
                )
    on, off = statistics.fmean(rates[True]), statistics.fmean(rates[False])
    print(
        f"\n{args.typists} typists + {args.streams} API streams, {args.seconds:g} s a "
        f"phase, {args.rounds} rounds:\n"
    )
    print("| prefetch | tokens/s of answers, each round | mean |")
    print("| --- | --- | --- |")
    for label, values in (("off", rates[False]), ("on", rates[True])):
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"| {label} | {shown} | {statistics.fmean(values):.2f} |")
    print(f"\non / off: {on / off:.3f}x (bar: at least 0.95x)")


def _typist_keys(data_dir: Path, count: int) -> list[str]:
    """An account and API key for each typist, written before the servers start."""
    from app.auth.service import open_auth
    from app.config.settings import Settings
    from app.migrations import open_database

    settings = Settings(data_dir=data_dir)
    db = open_database(settings)
    try:
        auth = open_auth(settings, db)
        keys = []
        for number in range(count):
            name = f"typist{number}"
            user = auth.users.by_name(name) or auth.users.create(name, "x" * 16, role="admin")
            keys.append(auth.keys.create(user, name="bench")[0])
        return keys
    finally:
        db.close()


def _load(
    server: ServerProcess, keys: list[str], questions: list[str], args: argparse.Namespace
) -> float:
    """Tokens of answers a second over ``args.seconds`` of streams and typists."""
    counted = {"token": 0, "done": 0}
    lock = threading.Lock()
    start = time.monotonic()
    end = start + args.seconds

    def ask(client: httpx.Client, question: str) -> None:
        for event in _events(client, question, end):
            if event in counted:
                with lock:
                    counted[event] += 1

    def stream(number: int) -> None:
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=600) as client:
            for turn in range(10_000):
                if time.monotonic() >= end:
                    return
                ask(client, questions[(number * 7 + turn) % len(questions)])

    def typist(number: int) -> None:
        headers = {"Authorization": f"Bearer {keys[number]}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=600) as client:
            for turn in range(10_000):
                question = questions[(number * 11 + turn + 3) % len(questions)]
                for draft, pause in _typed(question):
                    time.sleep(pause)
                    if time.monotonic() >= end:
                        return
                    client.post("/api/prefetch", json={"draft": draft})
                if time.monotonic() >= end:
                    return
                ask(client, question)

    threads = [threading.Thread(target=stream, args=(n,)) for n in range(args.streams)]
    threads += [threading.Thread(target=typist, args=(n,)) for n in range(len(keys))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"  {counted['done']} answers finished", flush=True)
    return counted["token"] / args.seconds


def _typed(question: str) -> Iterator[tuple[str, float]]:
    """Each draft the web chat sends while ``question`` is typed (at each word's end), with
    the typing time before it; then the rest of the question's typing."""
    words = question.split()
    for end in range(1, len(words)):
        yield " ".join(words[:end]), (len(words[end - 1]) + 1) / CPS
    time.sleep(len(words[-1]) / CPS)


def _events(client: httpx.Client, question: str, end: float) -> Iterator[str]:
    """The names of an ``/api/chat`` answer's events received before ``end``."""
    with client.stream("POST", "/api/chat", json={"message": question}) as response:
        for line in response.iter_lines():
            if time.monotonic() >= end:
                return
            match = re.match(r"event: (\w+)", line)
            if match:
                yield match.group(1)
            elif line.startswith("data:") and '"error"' in line:
                print("  error:", json.loads(line[5:]))


if __name__ == "__main__":
    main()
