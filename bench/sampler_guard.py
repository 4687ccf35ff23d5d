"""What the sampler guard costs: engine throughput with every sample through the C++
try/catch shim (llm/engine/guard.cpp) against llama.cpp's sampler called directly.

    python -m bench.sampler_guard [--clients 8] [--tokens 64] [--rounds 3]

One engine (bundled model, in-process) serves ``--clients`` concurrent greedy requests of
``--tokens`` tokens; the two modes alternate for ``--rounds`` rounds on the same model.
Reported: aggregate decode tokens/s per mode (median) and their ratio. Bar: ≥ 0.98×.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llm.local import LocalModel, LocalModelConfig, available_cpus
from llm.models import small_model
from llm.params import CompletionRequest, Finished, SamplingParams

BAR = 0.98


def run_round(model: LocalModel, clients: int, tokens: int, lead: str) -> float:
    """Aggregate generated tokens/s of ``clients`` requests submitted at once."""
    generated: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        prompt = f"{lead} {i}: a short history of the printing press and its effects on"
        request = CompletionRequest(prompt, SamplingParams(max_tokens=tokens, temperature=0))
        for event in model.submit(request):
            if isinstance(event, Finished):
                with lock:
                    generated.append(event.usage.completion_tokens)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(generated) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = LocalModelConfig(
        name="bench",
        path=small_model(Path("data/models")),
        parallel=args.clients,
        n_threads=available_cpus(),
    )
    model = LocalModel(config)
    native = model.engine.native
    guard = native._guard
    results: dict[str, list[float]] = {"guard": [], "direct": []}
    try:
        run_round(model, args.clients, 8, "Warm-up")
        for r in range(args.rounds):
            for mode in ("guard", "direct") if r % 2 == 0 else ("direct", "guard"):
                native._guard = guard if mode == "guard" else None
                results[mode].append(run_round(model, args.clients, args.tokens, f"{mode}{r}"))
    finally:
        native._guard = guard
        model.close()
    guarded, direct = (statistics.median(results[m]) for m in ("guard", "direct"))
    print(f"{args.clients} clients x {args.tokens} tokens, {args.rounds} rounds alternating")
    print("| sampling | tokens/s (median) | rounds |\n| --- | --- | --- |")
    for mode, values in results.items():
        rounds = ", ".join(f"{v:.1f}" for v in values)
        print(f"| {mode} | {statistics.median(values):.1f} | {rounds} |")
    ratio = guarded / direct
    print(f"\nguard / direct: {ratio:.3f}x (bar >= {BAR}x): {'PASS' if ratio >= BAR else 'FAIL'}")


if __name__ == "__main__":
    main()
