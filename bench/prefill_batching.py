"""Eight short prompts prefilled one ``llama_decode`` each (what Ragdesk's engine does)
against all eight in one (what llama-server does), straight on llama.cpp.

    python -m bench.prefill_batching [--repeats 3]

The prompts are ``bench.serving --peer``'s eight (~90 tokens each), on the default model,
two threads; each round clears the cache and prefills them both ways, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.serving import MODEL_DIR, concurrency_prompts, machine
from llm.engine.native import NativeConfig, NativeModel
from llm.local import available_cpus
from llm.models import bundled_model


def prefill(native: NativeModel, prompts: list[list[int]], *, together: bool) -> float:
    for seq in range(len(prompts)):
        native.seq_remove(seq)
    start = time.perf_counter()
    native.clear_batch()
    for seq, tokens in enumerate(prompts):
        for i, token in enumerate(tokens):
            native.add(token, i, seq, i == len(tokens) - 1)
        if not together:
            assert native.decode() == 0
            native.clear_batch()
    if together:
        assert native.decode() == 0
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    path = bundled_model(Path(MODEL_DIR))
    native = NativeModel(
        NativeConfig(path, kv_cells=8192, n_seq_max=8, n_batch=1024, n_threads=available_cpus())
    )
    try:
        prompts = [native.tokenize(p) for p in concurrency_prompts([8])[0]]
        apart, together = [], []
        for _ in range(args.repeats):
            apart.append(prefill(native, prompts, together=False))
            together.append(prefill(native, prompts, together=True))
    finally:
        native.close()
    print(f"## Prefilling eight prompts: one call each or one call ({machine()})\n")
    print(f"{path.name}, {sum(map(len, prompts))} prompt tokens; medians of {args.repeats}.\n")
    print("| prefilled | seconds (per round) |")
    print("| --- | --- |")
    for label, times in (("one call per prompt", apart), ("all in one call", together)):
        rounds = ", ".join(f"{t:.2f}" for t in times)
        print(f"| {label} | {statistics.median(times):.2f} ({rounds}) |")


if __name__ == "__main__":
    main()
