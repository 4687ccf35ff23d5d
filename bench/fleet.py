"""Generation fleet: aggregate tokens/s of a front over two nodes vs over one.

    python -m bench.fleet [--clients 16] [--seconds 30] [--tokens 64]

Each node is a real Ragdesk process serving the small bundled model on /v1, pinned to one
CPU core (the affinity it inherits at start, and ``n_threads=1``). A front Ragdesk (not
pinned) lists the nodes as one model (llm/fleet.py); ``--clients`` threads send
non-streamed ``/v1/completions`` (distinct prompts, greedy, ``--tokens`` each) to the front
for ``--seconds``. Aggregate tokens/s = completion tokens / wall time. Round 1: one node
(core 0); round 2: two nodes (cores 0 and 1). Bar: two ≥ 1.7× one (issue #15).

The default 16 clients fill every node's 8 slots in both rounds: a fleet's capacity is
what it serves saturated. With 8 clients, two nodes batch 4 streams each, and a node's
tokens/s grows with its batch (continuous batching), so 8 clients measure the batch size
as much as the node count (1.23× on a quiet 2-core machine, against 1.97× with 16).

On a 2-core machine the front and the clients share the cores with the nodes in round 2
only, so the ratio there is a floor of what separate machines would show.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx

from llm.models import small_model
from tests.server import ServerProcess  # the real-process harness of the e2e tests

MODEL_DIR = Path("data/models")
BAR = 1.7


def start_node(root: Path, core: int, model: Path) -> ServerProcess:
    node = ServerProcess(
        root, root / "server.log", embedder_backend="fake", generator_model=model, n_threads=1
    )
    everything = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})  # the child inherits the starting thread's affinity
    try:
        return node.start(ready_timeout=180)
    finally:
        os.sched_setaffinity(0, everything)


def share_key(node: ServerProcess, key: str) -> None:
    from tests.test_fleet_processes import accept_key

    accept_key(node, key)


def start_front(root: Path, nodes: list[ServerProcess], model: Path) -> ServerProcess:
    entry = {"url": [n.url for n in nodes], "remote_model": "default", "api_key": nodes[0].api_key}
    return ServerProcess(
        root,
        root / "server.log",
        embedder_backend="fake",
        generator_model=model,  # registered, never loaded: the chat model is the fleet
        models=json.dumps({"fleet": entry}),
        chat_model="fleet",
    ).start(ready_timeout=60)


def drive(front: ServerProcess, clients: int, seconds: float, tokens: int) -> tuple[int, float]:
    """(completion tokens, wall seconds) of ``clients`` threads sending until ``seconds``."""
    totals: list[int] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(i: int) -> None:
        n = 0
        with httpx.Client(headers=front.headers, timeout=120) as http:
            while time.monotonic() < end:
                n += 1
                body = {
                    "model": "fleet",
                    "prompt": f"Client {i} request {n}: write a short story about a lighthouse.",
                    "max_tokens": tokens,
                    "temperature": 0,
                }
                response = http.post(f"{front.url}/v1/completions", json=body)
                response.raise_for_status()
                with lock:
                    totals.append(response.json()["usage"]["completion_tokens"])

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(totals), time.monotonic() - start


def round_of(root: Path, cores: list[int], args: argparse.Namespace, model: Path) -> float:
    nodes: list[ServerProcess] = []
    front = None
    try:
        for core in cores:
            nodes.append(start_node(root / f"node{core}", core, model))
            if len(nodes) > 1:
                share_key(nodes[-1], nodes[0].api_key)
        front = start_front(root / f"front{len(cores)}", nodes, model)
        drive(front, args.clients, 3.0, 8)  # warm-up: every node's first requests
        tokens, wall = drive(front, args.clients, args.seconds, args.tokens)
        rate = tokens / wall
        print(f"{len(cores)} node(s): {tokens} tokens in {wall:.1f} s = {rate:.1f} tokens/s")
        return rate
    finally:
        for server in [front, *nodes]:
            if server is not None:
                server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        raise SystemExit("needs two CPU cores")
    model = small_model(MODEL_DIR).resolve()
    print(f"cores {cores}, load average {os.getloadavg()[0]:.1f}, {args.clients} clients")
    with tempfile.TemporaryDirectory() as tmp:
        one = round_of(Path(tmp) / "one", cores[:1], args, model)
        two = round_of(Path(tmp) / "two", cores, args, model)
    ratio = two / one
    print(f"two nodes / one node: {ratio:.2f}x (bar {BAR}x): {'PASS' if ratio >= BAR else 'FAIL'}")


if __name__ == "__main__":
    main()
