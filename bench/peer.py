"""Ragdesk against llama.cpp's own server, in one run: ``python -m bench.serving --peer PEER``.

PEER is a ``llama-server`` executable, or ``build``: then the llama.cpp source inside the
installed llama-cpp-python's sdist is downloaded from the package index and built once
(~6 min on 2 cores) into ``~/.cache/ragdesk/peer/<version>/``, with the flags ``make setup``
builds Ragdesk's own llama.cpp with, so both run the same kernels.

Both servers load the same bundled model (``--model``: Gemma 3 270M by default, or the default
chat model) and run side by side, idle while the other is measured. The peer runs as its
own users start it: ``-np 8 -c 8192 -t <cpus>`` and nothing else (llama-server's defaults:
no ``--swa-full``, which Ragdesk's engine needs for prefix reuse on sliding-window models
and which costs Gemma 3 about a quarter of its throughput). ``--peer-tuned`` starts it as
earlier rounds did (``-c 32768 -b 512 --swa-full``).
For each repeat and each client count, N clients send one streamed ``/v1/completions`` each
(distinct ~100-token prompts, 64 tokens, greedy) at the same instant, first to the peer
(``-np 8``: eight parallel slots), then to Ragdesk: rounds alternate, so drift on a shared
machine hits both alike. Aggregate tokens/s = completion tokens / (first submit → last
finish); time to first token from each client's submit to its first text chunk.
Bars at 8 clients: Ragdesk ≥ 1.0× the peer's tokens/s, TTFT p50 ≤ the peer's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx

from bench.serving import (
    CONCURRENCY_TOKENS,
    HTTP_TIMEOUT,
    TOPICS,
    Misbehaved,
    Round,
    Stream,
    nonce,
    run_clients,
    sse_events,
)
from llm.local import available_cpus

THROUGHPUT_BAR = 1.0
SLOTS = 8
CONTEXT_PER_SLOT = 4096  # --peer-tuned: as Ragdesk's engine gives each sequence
DEFAULT_CONTEXT = 8192  # as a user starts it: -np 8 -c 8192
# What the Makefile passes to llama-cpp-python's build (AMX off: some VMs fault on it).
CMAKE_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


# --- finding or building llama-server -------------------------------------------------------
def find_or_build(spec: str) -> Path:
    if spec != "build":
        path = Path(spec).expanduser().resolve()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise SystemExit(f"--peer {spec}: not an executable llama-server")
        return path
    version = importlib.metadata.version("llama-cpp-python")
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = home / "ragdesk" / "peer" / version
    binary = root / "llama.cpp" / "build" / "bin" / "llama-server"
    if not binary.exists():
        build(version, root)
    return binary


def build(version: str, root: Path) -> None:
    """Download llama-cpp-python's sdist and build its vendored llama.cpp's server."""
    print(f"building llama-server from llama-cpp-python {version}'s sdist into {root}")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*pip, "-d", tmp, f"llama-cpp-python=={version}"], check=True)
        (sdist,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        with tarfile.open(sdist) as archive:
            archive.extractall(tmp, filter="data")
        source = Path(tmp) / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
        target = root / "llama.cpp"
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(source, target)
    configure = [
        *("cmake", "-B", "build", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON"),
        *("-DLLAMA_BUILD_TESTS=OFF", "-DCMAKE_BUILD_TYPE=Release"),
        f"-DCMAKE_C_FLAGS={CMAKE_FLAGS}",
        f"-DCMAKE_CXX_FLAGS={CMAKE_FLAGS}",
    ]
    subprocess.run(configure, cwd=target, check=True)
    jobs = str(available_cpus())
    subprocess.run(
        ["cmake", "--build", "build", "--target", "llama-server", "-j", jobs],
        cwd=target,
        check=True,
    )


# --- the peer process -----------------------------------------------------------------------
class PeerServer:
    def __init__(self, binary: Path, model: Path, log_path: Path, *, tuned: bool = False):
        from tests.server import free_port

        self.url = f"http://127.0.0.1:{free_port()}"
        self.log_path = log_path
        self.flags = (
            ["-np", str(SLOTS), "-c", str(SLOTS * CONTEXT_PER_SLOT), "-b", "512", "--swa-full"]
            if tuned
            else ["-np", str(SLOTS), "-c", str(DEFAULT_CONTEXT)]
        ) + ["-t", str(available_cpus())]
        command = [
            str(binary),
            *("-m", str(model), "--host", "127.0.0.1", "--port", self.url.rsplit(":", 1)[1]),
            *self.flags,
            "--no-webui",
        ]
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 120) -> None:
        from tests.server import wait_until_healthy

        wait_until_healthy(f"{self.url}/health", self.process, timeout_s, self.log_path)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._log.close()


# --- one streamed /v1/completions, either server ------------------------------------------
def completion_stream(url: str, headers: dict[str, str], model: str, prompt: str) -> Stream:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": CONCURRENCY_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.Client(timeout=HTTP_TIMEOUT, headers=headers) as client:
        result = Stream(submitted=time.perf_counter())
        with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                raise Misbehaved(f"{url}: HTTP {response.status_code}: {response.text}")
            chunks = 0
            for _, data in sse_events(response.iter_lines()):
                if data.strip() == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    result.tokens = chunk["usage"]["completion_tokens"]
                    result.prompt_tokens = chunk["usage"]["prompt_tokens"]
                for choice in chunk.get("choices", []):
                    if choice.get("text"):
                        result.token_times.append(time.perf_counter())
                        result.text += choice["text"]
                        chunks += 1
        result.finished = time.perf_counter()
    if not result.token_times:
        raise Misbehaved(f"{url}: no text streamed for {prompt[:40]!r}")
    result.tokens = result.tokens or chunks
    return result


@dataclass(frozen=True)
class Target:
    label: str
    url: str
    headers: dict[str, str]
    model: str

    def round(self, clients: int) -> Round:
        prompts = [f"{nonce()} {TOPICS[i % len(TOPICS)]}" for i in range(clients)]
        stream = partial(completion_stream, self.url, self.headers, self.model)
        return Round.of(run_clients([partial(stream, p) for p in prompts]))


def first_model(url: str, headers: dict[str, str]) -> str:
    models = httpx.get(f"{url}/v1/models", headers=headers, timeout=30).json()["data"]
    return str(models[0]["id"])


# --- the run --------------------------------------------------------------------------------
def compare(
    peer_binary: Path, model: Path, counts: list[int], repeats: int, *, tuned: bool = False
) -> None:
    from bench.serving import machine, print_log_tail, start_server

    load_at_start = os.getloadavg()[0]
    results: dict[tuple[str, int], list[Round]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        peer = PeerServer(peer_binary, model, Path(tmp) / "peer.log", tuned=tuned)
        ragdesk_server = None
        try:
            peer.wait_ready()
            ragdesk_server = start_server(model, Path(tmp) / "ragdesk")
            headers = ragdesk_server.headers
            targets = [
                Target("llama-server", peer.url, {}, first_model(peer.url, {})),
                # "default": the model the server was started with (--model); the first
                # listed is whichever bundled model sorts first, not necessarily that one
                Target("Ragdesk", ragdesk_server.url, headers, "default"),
            ]
            for target in targets:  # warm-up: first-use allocations, thread pools
                target.round(1)
            for _ in range(repeats):
                for clients in counts:
                    for target in targets:
                        results.setdefault((target.label, clients), []).append(
                            target.round(clients)
                        )
        except Exception:
            print_log_tail(peer.log_path)
            if ragdesk_server is not None:
                print_log_tail(ragdesk_server.log_path)
            raise
        finally:
            peer.stop()
            if ragdesk_server is not None:
                ragdesk_server.stop()
    print(f"## Serving against llama-server ({machine()}, {model.name})\n")
    print(f"The peer: llama-server {' '.join(peer.flags)}.\n")
    print(f"Load average when the run started: {load_at_start:.2f}.\n")
    report(results, counts, repeats)


def report(results: dict[tuple[str, int], list[Round]], counts: list[int], repeats: int) -> None:
    med = statistics.median
    print(
        f"Streamed `/v1/completions`, {CONCURRENCY_TOKENS} tokens, greedy; medians of "
        f"{repeats} rounds, the two servers alternating.\n"
    )
    print(
        "| clients | llama-server tok/s | TTFT p50 | Ragdesk tok/s | TTFT p50 "
        "| Ragdesk / llama-server (per round) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    verdicts = []
    for clients in counts:
        peer, ours = results[("llama-server", clients)], results[("Ragdesk", clients)]
        peer_rate, our_rate = med(r.tokens_per_s for r in peer), med(r.tokens_per_s for r in ours)
        peer_ttft, our_ttft = med(r.ttft_p50 for r in peer), med(r.ttft_p50 for r in ours)
        per_round = ", ".join(
            f"{o.tokens_per_s / p.tokens_per_s:.2f}" for p, o in zip(peer, ours, strict=True)
        )
        print(
            f"| {clients} | {peer_rate:.1f} | {peer_ttft:.2f} s | {our_rate:.1f} "
            f"| {our_ttft:.2f} s | {our_rate / peer_rate:.2f}× ({per_round}) |"
        )
        if clients == SLOTS:
            verdicts = [
                (
                    "tok/s, Ragdesk / llama-server",
                    f"≥ {THROUGHPUT_BAR:g}×",
                    f"{our_rate / peer_rate:.2f}×",
                    our_rate / peer_rate >= THROUGHPUT_BAR,
                ),
                (
                    "TTFT p50, Ragdesk vs llama-server",
                    "≤ peer",
                    f"{our_ttft:.2f} s vs {peer_ttft:.2f} s",
                    our_ttft <= peer_ttft,
                ),
            ]
    if verdicts:
        print(f"\n| bar at {SLOTS} clients | target | measured | |")
        print("| --- | --- | --- | --- |")
        for name, target, measured, ok in verdicts:
            print(f"| {name} | {target} | {measured} | {'✓' if ok else '✗'} |")
