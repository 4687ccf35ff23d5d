"""Sliding-window caches: every token (``swa_full``, the default) against the window only.

    python -m bench.window_cache [--repeats 3] [--prompt-items 60]

Gemma 3 270M (a window of 512 tokens in 15 of its 18 layers) is loaded by Ragdesk's engine
as the server loads it (8 sequences, 4,096 tokens each), once with ``swa_full`` and once
without, in fresh processes, the two alternating. Each round:

1. **Eight streams**: eight distinct prompts (``--prompt-items`` note lines, ~800 tokens
   at 60: a grounded prompt with a conversation so far) sent at once, 64 tokens each,
   greedy: aggregate tokens/s (generated tokens / first submit to last finish) and time to
   first token.
2. **Next turns**: each conversation's next turn (its prompt, its answer and a new
   question) sent at once: prompt tokens found cached (the window must not lose a prefix
   a conversation goes on from) and time to first token.
3. **Memory**: the process's peak resident set (``ru_maxrss``), model and caches.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from multiprocessing import get_context

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.serving import MODEL_DIR, machine, run_clients
from llm.models import small_model

TOKENS = 64
STREAMS = 8
NAMES = ["alder", "birch", "cedar", "elm", "fir", "hazel", "larch", "maple"]
COLOURS = ["red", "blue", "green", "amber"]


@dataclass(frozen=True)
class Answer:
    text: str
    submitted: float  # time.perf_counter()
    ttft_s: float
    done: float  # time.perf_counter()
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class RoundResult:
    swa_full: bool
    tokens_per_s: float
    ttft_p50_s: float
    next_ttft_p50_s: float
    next_cached_share: float  # of the next turns' prompt tokens, found cached
    peak_rss_mb: float


def prompt(name: str, items: int) -> str:
    lines = [f"{name}{i} is {COLOURS[i * 7 % 4]} and weighs {i % 13 + 1} kg." for i in range(items)]
    question = f"Question: what colour is {name}7?\nAnswer:"
    return f"Notes on {name}:\n" + "\n".join(lines) + "\n" + question


_model = None  # the engine, in the worker process only


def load(swa_full: bool) -> None:
    from llm.local import LocalModel, LocalModelConfig

    global _model
    path = small_model(MODEL_DIR).resolve()
    _model = LocalModel(
        LocalModelConfig(name="gemma", path=path, context_tokens=4096, swa_full=swa_full)
    )
    ask("Warm-up: say hello.")  # the first decode allocates


def close() -> None:
    assert _model is not None
    _model.close()


def ask(text: str) -> Answer:
    from llm.params import CompletionRequest, Finished, SamplingParams, TextDelta

    assert _model is not None
    start = time.perf_counter()
    first, answer, finished = 0.0, "", None
    for event in _model.submit(CompletionRequest(text, SamplingParams(TOKENS, 0))):
        if isinstance(event, TextDelta):
            first = first or time.perf_counter()
            answer += event.text
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None and finished.error is None, finished
    now = time.perf_counter()
    usage = finished.usage
    return Answer(
        answer,
        start,
        (first or now) - start,
        now,
        usage.prompt_tokens,
        usage.cached_tokens,
        usage.completion_tokens,
    )


def at_once(prompts: list[str]) -> tuple[list[Answer], float]:
    """Every prompt on its own thread, released together; the answers and the wall time."""
    answers = run_clients([partial(ask, p) for p in prompts])
    return answers, max(a.done for a in answers) - min(a.submitted for a in answers)


def one_round(swa_full: bool, items: int) -> RoundResult:
    firsts = [prompt(name, items) for name in NAMES[:STREAMS]]
    answers, wall = at_once(firsts)
    nexts = [
        p + a.text + f"\nQuestion: and how much does {name}3 weigh?\nAnswer:"
        for p, a, name in zip(firsts, answers, NAMES, strict=False)
    ]
    follow_ups, _ = at_once(nexts)
    cached = sum(a.cached_tokens for a in follow_ups) / sum(a.prompt_tokens for a in follow_ups)
    return RoundResult(
        swa_full,
        sum(a.completion_tokens for a in answers) / wall,
        statistics.median(a.ttft_s for a in answers),
        statistics.median(a.ttft_s for a in follow_ups),
        cached,
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def run_in_fresh_process(swa_full: bool, items: int) -> RoundResult:
    with ProcessPoolExecutor(
        1, mp_context=get_context("spawn"), initializer=load, initargs=(swa_full,)
    ) as pool:
        try:
            return pool.submit(one_round, swa_full, items).result()
        finally:
            pool.submit(close).result()  # its engine thread would keep the worker alive


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt-items", type=int, default=60)
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    results: list[RoundResult] = []
    for r in range(args.repeats):
        order = (True, False) if r % 2 == 0 else (False, True)
        for swa_full in order:
            results.append(run_in_fresh_process(swa_full, args.prompt_items))
    print(f"## Sliding-window caches: the window only vs every token ({machine()})\n")
    print(f"Load average when the run started: {load_at_start:.2f}.\n")
    print(
        f"Gemma 3 270M, {STREAMS} streams at once, {TOKENS} tokens each, prompts of "
        f"{args.prompt_items} note lines; then each conversation's next turn at once. "
        f"Medians of {args.repeats} rounds per side, alternating, each in a fresh process.\n"
    )
    print(
        "| window layers keep | tokens/s (8 streams) | TTFT p50 | next turn TTFT p50 "
        "| next turn prompt cached | peak RSS |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    sides = {}
    for swa_full, label in ((True, "every token (default)"), (False, "the window only")):
        mine = [r for r in results if r.swa_full == swa_full]
        sides[swa_full] = statistics.median(r.tokens_per_s for r in mine)
        print(
            f"| {label} | {sides[swa_full]:.1f} "
            f"({', '.join(f'{r.tokens_per_s:.1f}' for r in mine)}) "
            f"| {statistics.median(r.ttft_p50_s for r in mine):.2f} s "
            f"| {statistics.median(r.next_ttft_p50_s for r in mine):.2f} s "
            f"| {statistics.median(r.next_cached_share for r in mine):.2f} "
            f"| {statistics.median(r.peak_rss_mb for r in mine):.0f} MB |"
        )
    print(f"\nWindow only / every token, tokens/s: {sides[False] / sides[True]:.2f}x")


if __name__ == "__main__":
    main()
