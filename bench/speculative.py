"""Speculative decoding on a grounded prompt: decode tokens/s and TTFT with and without.

    python -m bench.speculative [--model PATH] [--draft PATH] [--tokens 128] [--repeats 2]
                                [--methods off,prompt-lookup,draft-model] [--invariant]

One stream, greedy. The prompt is a grounded question: a ~1,000-token passage of the
handbook corpus (bench/data/handbook) as a numbered source, then a question to answer from
it by quoting. Every method has its own engine in this process and the runs alternate
(off, prompt-lookup, draft-model, off, ...), so drift on a shared machine hits all alike;
each repeat starts with its own nonce, so every run prefills cold. Decode tokens/s counts
from the first streamed text to the end. The output of every method is compared with
``off``: with ``--invariant`` (``batch_invariant``) it must be identical to the token,
and the run fails otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llm.local import LocalModel, LocalModelConfig
from llm.params import CompletionRequest, Finished, SamplingParams, TextDelta

MODELS = Path("data/models")
DEFAULT = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SOURCE = Path("bench/data/handbook/corpus/employee-handbook.md")
QUESTION = (
    "What does the handbook say about working hours, flexible working and the days people "
    "are expected in the office? Answer from the source only, quoting its wording, and cite "
    "it as [1]."
)


@dataclass(frozen=True)
class Run:
    method: str
    ttft: float
    decode_tokens_per_s: float
    tokens: int
    text: str


def grounded_prompt(nonce: str, chars: int = 4500) -> str:
    passage = SOURCE.read_text()[:chars]
    system = (
        f"({nonce}) You answer staff questions from the numbered sources below, quoting "
        "them and citing them like [1]. If the sources do not cover it, say so."
    )
    user = f"Sources:\n[1] {SOURCE.name}\n{passage}\n\nQuestion: {QUESTION}"
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def stream(model: LocalModel, method: str, prompt: str, tokens: int) -> Run:
    params = SamplingParams(max_tokens=tokens, temperature=0)
    submitted = time.perf_counter()
    first = last = 0.0
    text, finished = "", None
    for event in model.submit(CompletionRequest(prompt, params)):
        if isinstance(event, TextDelta):
            last = time.perf_counter()
            first = first or last
            text += event.text
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None and finished.error is None, finished
    n = finished.usage.completion_tokens
    return Run(method, first - submitted, (n - 1) / (last - first), n, text)


def load(model: Path, method: str, draft: Path, invariant: bool, k: int) -> LocalModel:
    config = LocalModelConfig(
        name=method,
        path=model,
        parallel=2,
        batch_invariant=invariant,
        speculative="off" if method == "off" else method,  # type: ignore[arg-type]
        speculative_tokens=k,
        draft_model=draft if method == "draft-model" else None,
    )
    return LocalModel(config)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=DEFAULT)
    parser.add_argument("--draft", type=Path, default=DRAFT)
    parser.add_argument("--methods", default="off,prompt-lookup,draft-model")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--k", type=int, default=4, help="drafted tokens per step")
    parser.add_argument("--invariant", action="store_true", help="batch-invariant engines")
    args = parser.parse_args()
    methods = args.methods.split(",")
    if "draft-model" in methods and not args.draft.exists():
        print(f"(no draft model at {args.draft}: draft-model left out)\n")
        methods.remove("draft-model")
    assert methods[0] == "off", "off comes first: the others are compared with it"
    load_at_start = os.getloadavg()[0]
    models = {m: load(args.model, m, args.draft, args.invariant, args.k) for m in methods}
    runs: list[list[Run]] = []
    try:
        for m, model in models.items():  # warm-up
            stream(model, m, grounded_prompt("warm-up"), 8)
        for _ in range(args.repeats):
            prompt = grounded_prompt(uuid.uuid4().hex[:8])
            runs.append([stream(models[m], m, prompt, args.tokens) for m in methods])
    finally:
        for model in models.values():
            model.close()
    report(args, methods, runs, load_at_start)


def report(
    args: argparse.Namespace, methods: list[str], runs: list[list[Run]], load: float
) -> None:
    mode = "batch-invariant" if args.invariant else "default (not batch-invariant)"
    print(f"## Speculative decoding: {args.model.name}, 1 stream, greedy, {mode}\n")
    print(
        f"{args.tokens} tokens, K = {args.k}, {args.repeats} alternating repeats; load average "
        f"at start {load:.2f}.\n"
    )
    print("| method | decode tok/s (median) | runs | TTFT (median) | speedup | same text as off |")
    print("| --- | --- | --- | --- | --- | --- |")
    base = statistics.median(r[0].decode_tokens_per_s for r in runs)
    mismatches = 0
    for i, method in enumerate(methods):
        rates = [r[i].decode_tokens_per_s for r in runs]
        same = [r[i].text == r[0].text for r in runs]
        mismatches += same.count(False)
        rate = statistics.median(rates)
        print(
            f"| {method} | {rate:.1f} | {', '.join(f'{x:.1f}' for x in rates)} "
            f"| {statistics.median(r[i].ttft for r in runs):.2f} s | {rate / base:.2f}× "
            f"| {sum(same)}/{len(same)} |"
        )
    for i, method in enumerate(methods[1:], 1):
        for r in runs:
            if r[i].text != r[0].text:
                at = next(
                    (
                        j
                        for j, (a, b) in enumerate(zip(r[i].text, r[0].text, strict=False))
                        if a != b
                    ),
                    min(len(r[i].text), len(r[0].text)),
                )
                print(f"\n{method} differs from off at character {at}: {r[i].text[at:at + 60]!r} "
                      f"vs {r[0].text[at:at + 60]!r}")  # fmt: skip
    print(f"\nAnswer (off, first repeat): {runs[0][0].text[:400]!r}")
    if args.invariant and mismatches:
        raise SystemExit(f"{mismatches} runs differ from off in batch-invariant mode")


if __name__ == "__main__":
    main()
