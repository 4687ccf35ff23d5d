"""One KV cache for all sequences (Ragdesk) or one per sequence (llama-server at ``-np 8``),
straight on llama.cpp: eight ~90-token prompts, then decode steps of eight rows.

    python -m bench.kv_streams [--model PATH] [--rounds 3] [--steps 64]

llama-server started with ``-np N`` keeps a KV stream per slot (``kv_unified`` is off
unless ``-np`` is left to auto); Ragdesk's engine keeps one unified cache, so that shared
prefixes are stored once. Each decode row then attends over every sequence's cells (the
others masked) rather than its own stream's. Both contexts are loaded side by side with
the cells each server would give them (Ragdesk's default ``context_tokens × parallel / 2``
against the peer's ``-c 8192``) and measured in alternating rounds with the same prompts;
reported: prefill seconds and median decode-step milliseconds per round.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.prefill_batching import prefill
from bench.serving import MODEL_DIR, TOPICS, nonce
from llm.local import available_cpus
from llm.models import bundled_model

SEQUENCES = 8


@contextmanager
def kv_unified(unified: bool) -> Iterator[None]:
    """``NativeModel`` always asks for a unified cache: switch it for the context made here."""
    import llama_cpp  # heavy: on use

    original = getattr(llama_cpp, "llama_init_from_model")  # noqa: B009 (untyped module)

    def init(model: Any, params: Any) -> Any:
        params.kv_unified = unified
        return original(model, params)

    setattr(llama_cpp, "llama_init_from_model", init)  # noqa: B010
    try:
        yield
    finally:
        setattr(llama_cpp, "llama_init_from_model", original)  # noqa: B010


def load(path: Path, unified: bool, cells: int) -> Any:
    from llm.engine.native import NativeConfig, NativeModel

    config = NativeConfig(
        path, kv_cells=cells, n_seq_max=SEQUENCES, n_batch=512, n_threads=available_cpus()
    )
    with kv_unified(unified):
        return NativeModel(config)


def one_round(model: Any, prompts: list[str], steps: int) -> tuple[float, float]:
    """Seconds to prefill the prompts (one ``llama_decode`` each, as the engine does), and
    the median milliseconds of a decode step of all of them."""
    tokenized = [model.tokenize(prompt) for prompt in prompts]
    seconds = prefill(model, tokenized, together=False)
    lengths = [len(tokens) for tokens in tokenized]
    times = []
    for step in range(steps):
        model.clear_batch()
        for seq, length in enumerate(lengths):
            model.add(100 + step, length + step, seq, True)
        started = time.perf_counter()
        if model.decode() != 0:
            raise SystemExit("decode failed")
        times.append(time.perf_counter() - started)
    return seconds, statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a GGUF (default: the default chat model)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    path = args.model or bundled_model(MODEL_DIR)
    models = {
        "one cache (Ragdesk, 16384 cells)": load(path, True, 4096 * SEQUENCES // 2),
        "a stream per sequence (llama-server -np 8 -c 8192)": load(path, False, 8192),
    }
    results: dict[str, list[tuple[float, float]]] = {label: [] for label in models}
    try:
        for number in range(args.rounds):
            prompts = [f"{nonce()} {TOPICS[i % len(TOPICS)]}" for i in range(SEQUENCES)]
            for label, model in models.items():
                results[label].append(one_round(model, prompts, args.steps))
                prefill, step = results[label][-1]
                print(f"round {number + 1} {label}: prefill {prefill:.2f} s, step {step:.1f} ms")
    finally:
        for model in models.values():
            model.close()
    print(f"\n## KV cache layout, {path.name}: {SEQUENCES} sequences\n")
    print("| KV cache | prefill s per round | decode step ms per round | step median |")
    print("| --- | --- | --- | --- |")
    for label, rounds in results.items():
        prefills = ", ".join(f"{p:.1f}" for p, _ in rounds)
        steps = ", ".join(f"{s:.0f}" for _, s in rounds)
        median = statistics.median(s for _, s in rounds)
        print(f"| {label} | {prefills} | {steps} | {median:.0f} |")


if __name__ == "__main__":
    main()
