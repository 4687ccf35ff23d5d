"""Where the engine's time goes: ``llama_decode`` against everything else, in-process.

    python -m bench.engine_profile [--model PATH] [--clients 8] [--tokens 64]

N threads submit one greedy request each at the same instant (the ``bench.serving``
concurrency prompts) to a ``LocalModel`` whose engine methods are wrapped with timers;
the table shows, per part of the engine step, total time, calls and time per call.
``llama_decode`` is split into prompt prefill and decode steps by batch size. What is
not ``llama_decode`` is host work: sampling, detokenising, stop checks, queues.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.serving import MODEL_DIR, concurrency_prompts
from llm.models import small_model
from llm.params import CompletionRequest, Finished, SamplingParams

spent: defaultdict[str, float] = defaultdict(float)
calls: Counter[str] = Counter()


def timed(owner: type, method: str, label: Callable[..., str] | None = None) -> None:
    original = getattr(owner, method)

    def wrapper(self: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(self, *args)
        finally:
            key = label(self, *args) if label else f"{owner.__name__}.{method}"
            spent[key] += time.perf_counter() - started
            calls[key] += 1

    setattr(owner, method, wrapper)


def instrument(rows: int) -> None:
    from llm.engine import engine, native

    def decode_kind(model: native.NativeModel) -> str:
        size = model.batch_size
        return "llama_decode, prompt prefill" if size > rows else f"llama_decode, {size} rows"

    timed(native.NativeModel, "decode", decode_kind)
    timed(native.Sampler, "sample", lambda *_: "sampling (llama.cpp chain)")
    timed(native.Argmax, "sample", lambda *_: "sampling (argmax)")
    timed(native.NativeModel, "piece")
    timed(engine.Engine, "_step")
    timed(engine.Engine, "_accept")


def run(model: Any, prompts: list[str], tokens: int) -> tuple[int, float]:
    generated: list[int] = []

    def client(prompt: str) -> None:
        request = CompletionRequest(prompt, SamplingParams(max_tokens=tokens, temperature=0))
        for event in model.submit(request):
            if isinstance(event, Finished):
                generated.append(event.usage.completion_tokens)

    threads = [threading.Thread(target=client, args=(p,)) for p in prompts]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(generated), time.perf_counter() - started


def main() -> None:
    from llm.local import LocalModel, LocalModelConfig

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    path = args.model or small_model(MODEL_DIR)
    instrument(args.clients)
    model = LocalModel(LocalModelConfig(name="profiled", path=path, context_tokens=4096))
    try:
        run(model, ["Warm-up: hello"], 8)
        spent.clear()
        calls.clear()
        tokens, wall = run(model, concurrency_prompts([args.clients])[0], args.tokens)
    finally:
        model.close()
    print(f"## Engine profile: {path.name}, {args.clients} streams × {args.tokens} tokens\n")
    print(f"{tokens} tokens in {wall:.2f} s = {tokens / wall:.1f} tokens/s; load average "
          f"{os.getloadavg()[0]:.2f}.\n")  # fmt: skip
    step = spent["Engine._step"]
    print("| part | total ms | share of engine steps | calls | ms per call |")
    print("| --- | --- | --- | --- | --- |")
    for key in sorted(spent, key=lambda k: -spent[k]):
        print(
            f"| {key} | {spent[key] * 1000:.0f} | {spent[key] / step:.1%} | {calls[key]} "
            f"| {spent[key] / calls[key] * 1000:.3f} |"
        )
    decode = sum(v for k, v in spent.items() if k.startswith("llama_decode"))
    print(f"\nHost work (engine steps less llama_decode): {(step - decode) * 1000:.0f} ms, "
          f"{(step - decode) / step:.1%}.")  # fmt: skip


if __name__ == "__main__":
    main()
