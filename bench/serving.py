"""Serving: continuous batching, prefix cache and SSE overhead, all in one run.

    python -m bench.serving [--clients 1,2,4,8] [--repeats 3]
    python -m bench.serving --peer PATH/llama-server|build   (see bench/peer.py)

1. Concurrency. N clients (threads) each send one streamed request (a distinct ~100-token
   prompt, 64 tokens, greedy) at the same instant, first to llama-cpp-python's ``Llama``
   behind a lock (how a server built on it has to serve), then to the real Ragdesk server
   (``POST /api/completions``, SSE). Aggregate tokens/s = generated tokens / (first submit
   → last finish); time to first token from each client's submit. Bars at 8 clients:
   Ragdesk ≥ 2× the baseline's tokens/s, TTFT p50 ≤ 0.5 s.
2. Follow-up. A ~700-token prompt P is answered (32 tokens), then P + answer + a question
   is sent: warm (its prefix is cached) and cold (a unique nonce first, so nothing
   matches). Bar: warm TTFT ≤ 0.2× cold, medians of ``--repeats``.
3. SSE. Decode tokens/s of one 256-token stream over HTTP vs the same request through the
   engine in-process (in a fresh process, alongside the idle server), the two alternating.
   Bar: HTTP ≥ 0.95× in-process, medians.

Every prompt starts with its own word, so no two share a prefix beyond BOS.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx

from llm.local import available_cpus
from llm.models import bundled_model, small_model

T = TypeVar("T")
MODEL_DIR = Path("data/models")
CONCURRENCY_TOKENS = 64
FOLLOW_UP_TOKENS = 32
SSE_TOKENS = 256
SSE_PROMPT = "Count from 1 to 500:"
FOLLOW_UP_QUESTION = "\nQuestion: which of these topics came first in history?\nAnswer:"
SPEEDUP_BAR = 2.0
TTFT_BAR_S = 0.5
WARM_COLD_BAR = 0.2
SSE_BAR = 0.95
HTTP_TIMEOUT = httpx.Timeout(120.0)

# One opening word per request of the concurrency rounds (1 + 2 + 4 + 8 = 15) and one for
# the warm-up: distinct first tokens, so no prompt can reuse another's KV cache.
LEADS = [
    "Notes:",
    "Summary:",
    "Draft:",
    "Excerpt:",
    "Memo:",
    "Report:",
    "Briefing:",
    "Transcript:",
    "Abstract:",
    "Overview:",
    "Passage:",
    "Reading:",
    "Column:",
    "Entry:",
    "Chapter:",
    "Lesson:",
]

TOPICS = [
    "The printing press changed Europe within a few decades. Before Gutenberg, books were "
    "copied by hand in monasteries, and a single Bible could take a scribe years to finish. "
    "Movable metal type, oil-based ink and a press adapted from wine making let one workshop "
    "produce hundreds of identical pages a day. Pamphlets, calendars and grammars spread "
    "quickly, prices fell, and more people had a reason to learn to read. Historians still",
    "Coral reefs cover a tiny fraction of the ocean floor but shelter a quarter of all marine "
    "species. Each reef is built by colonies of small animals called polyps, which live in "
    "partnership with algae that supply them with sugars from sunlight. When the water grows "
    "too warm, the polyps expel the algae and the coral turns white, a process known as "
    "bleaching. If temperatures stay high for weeks, the colony starves, and scientists now",
    "Baking sourdough bread starts with a starter, a mixture of flour and water colonised by "
    "wild yeasts and lactic acid bacteria. The baker feeds it every day until it rises "
    "reliably, then mixes a portion into a dough with more flour, water and salt. Long, cool "
    "fermentation develops flavour and makes the loaf easier to digest. Shaping builds "
    "surface tension, and a very hot oven with steam gives the crust its blistered colour. Most",
    "Iceland sits on the Mid-Atlantic Ridge, where the North American and Eurasian plates pull "
    "apart by a couple of centimetres each year. Magma rises to fill the gap, which is why the "
    "island has dozens of active volcanoes, hot springs and geysers. Eruptions under glaciers "
    "melt huge volumes of ice and release sudden floods across the southern plains. Farmers "
    "have learned to live with ash and lava, and the country now heats most homes with",
    "In chess, the opening is the phase in which both players develop their pieces and fight "
    "for the centre. Classical principles advise moving each piece once, castling early and "
    "avoiding premature attacks with the queen. Modern players, helped by engines, have found "
    "that many rules can be broken when the position justifies it. Some openings lead to sharp "
    "tactical battles, others to slow manoeuvring, and a player's repertoire usually reflects",
    "A honeybee colony behaves almost like a single organism. The queen lays up to two thousand "
    "eggs a day, while thousands of sterile female workers clean cells, nurse larvae, build wax "
    "comb, guard the entrance and forage for nectar and pollen. Foragers tell their sisters "
    "where flowers are through a waggle dance whose angle and duration encode direction and "
    "distance. In late spring the colony raises new queens, and the old queen leaves with",
    "Roman aqueducts carried water across valleys and through hills to supply cities with "
    "fountains, baths and latrines. Engineers surveyed routes with simple instruments and kept "
    "a gentle, constant slope over dozens of kilometres, so that gravity alone moved the water. "
    "Most of the channel ran underground; the famous arched bridges were only needed where the "
    "ground dropped away. Rome itself was eventually served by eleven aqueducts, and several",
    "Ocean tides are caused mainly by the gravitational pull of the Moon, with a smaller "
    "contribution from the Sun. Because the pull is stronger on the side of the Earth facing "
    "the Moon and weaker on the far side, the oceans bulge in two places at once. As the planet "
    "rotates, most coastlines pass through both bulges and see two high tides a day. When the "
    "Sun and Moon line up, their effects add together and produce spring tides, while",
    "Glaciers form where more snow falls in winter than melts in summer. Year after year the "
    "snow is buried and compressed into dense blue ice, which eventually becomes heavy enough "
    "to flow downhill under its own weight. As a glacier moves it plucks rocks from its bed "
    "and grinds them into fine flour, carving U-shaped valleys, sharp ridges and deep fjords. "
    "Most mountain glaciers are now shrinking quickly, and the meltwater they release each",
    "The electric telegraph was the first technology to separate communication from "
    "transport. Messages that once travelled at the speed of a horse or a ship could cross a "
    "continent in minutes as pulses of current along a copper wire. Operators learned Morse "
    "code by ear, railways used the telegraph to schedule trains safely, and newspapers "
    "organised agencies to share reports from distant cities. Within a generation, cables",
]


@dataclass
class Stream:
    """One request as its client saw it; times from ``time.perf_counter()``."""

    submitted: float
    token_times: list[float] = field(default_factory=list)
    finished: float = 0.0
    text: str = ""
    tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str = ""

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.submitted

    @property
    def decode_tokens_per_s(self) -> float:
        return (self.tokens - 1) / (self.token_times[-1] - self.token_times[0])


@dataclass(frozen=True)
class Round:
    clients: int
    tokens: int
    wall_s: float
    ttft_p50: float
    ttft_max: float
    cached_max: int
    prompt_tokens: tuple[int, int]  # fewest, most (only the server reports them)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s

    @classmethod
    def of(cls, streams: list[Stream]) -> Round:
        ttfts = [s.ttft for s in streams]
        return cls(
            clients=len(streams),
            tokens=sum(s.tokens for s in streams),
            wall_s=max(s.finished for s in streams) - min(s.submitted for s in streams),
            ttft_p50=statistics.median(ttfts),
            ttft_max=max(ttfts),
            cached_max=max(s.cached_tokens for s in streams),
            prompt_tokens=(
                min(s.prompt_tokens for s in streams),
                max(s.prompt_tokens for s in streams),
            ),
        )


class Misbehaved(RuntimeError):
    """The server or engine answered something a correct one never would."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="1,2,4,8", help="comma-separated client counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--peer",
        metavar="LLAMA_SERVER",
        help="instead: Ragdesk against this llama-server ('build': build one), see bench.peer",
    )
    parser.add_argument(
        "--peer-tuned",
        action="store_true",
        help="start the peer with -c 32768 -b 512 --swa-full (earlier rounds) instead of as "
        "its users do (-np 8 -c 8192)",
    )
    parser.add_argument(
        "--model",
        choices=["small", "default"],
        default="small",
        help="with --peer: Gemma 3 270M (small) or the default chat model",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    if args.peer:
        from bench.peer import compare, find_or_build

        chosen = (
            small_model(MODEL_DIR) if args.model == "small" else bundled_model(MODEL_DIR)
        ).resolve()
        compare(find_or_build(args.peer), chosen, counts, args.repeats, tuned=args.peer_tuned)
        return
    if sum(counts) + 1 > len(LEADS):
        parser.error(f"at most {len(LEADS) - 1} requests over all rounds")
    load_at_start = os.getloadavg()[0]
    model = small_model(MODEL_DIR).resolve()
    rounds = concurrency_prompts(counts)
    warm_up = f"{LEADS[-1]} {TOPICS[0]}"
    # ~700 tokens: the paragraphs, each cut after its last full sentence
    follow_up_base = "\n\n".join(t[: t.rfind(".") + 1] for t in TOPICS)

    baseline = run_baseline(model, rounds, warm_up)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(model, Path(tmp))
        try:
            stream(server.url, warm_up, CONCURRENCY_TOKENS)
            ragdesk = [Round.of(http_round(server.url, prompts)) for prompts in rounds]
            follow_ups = [follow_up(server.url, follow_up_base) for _ in range(args.repeats)]
            http_sse, in_process = compare_sse(server.url, model, args.repeats)
        except Exception:
            print_log_tail(server.log_path)
            raise
        finally:
            server.stop()
    print(f"## Serving: continuous batching, prefix cache, SSE ({machine()})\n")
    print(
        f"Load average when the run started: {load_at_start:.2f} (anything else busy skews it).\n"
    )
    report(baseline, ragdesk, follow_ups, http_sse, in_process)


def machine() -> str:
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return f"{available_cpus()} CPUs, {names[0] if names else 'unknown CPU'}"


def concurrency_prompts(counts: list[int]) -> list[list[str]]:
    leads = iter(LEADS)
    return [[f"{next(leads)} {TOPICS[i % len(TOPICS)]}" for i in range(n)] for n in counts]


# --- concurrency ---------------------------------------------------------------------------
def run_clients(requests: list[Callable[[], T]]) -> list[T]:
    """Run every request on its own thread, all released at once; re-raise any failure."""
    barrier = threading.Barrier(len(requests))
    results: list[T | None] = [None] * len(requests)
    errors: list[BaseException] = []

    def client(i: int) -> None:
        barrier.wait()
        try:
            results[i] = requests[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def run_baseline(model: Path, rounds: list[list[str]], warm_up: str) -> list[Round]:
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(model),
        n_ctx=4096,
        n_threads=available_cpus(),
        swa_full=True,
        verbose=False,
    )
    try:
        firsts = [llm.tokenize(p.encode())[1] for prompts in rounds for p in prompts]
        assert len(set(firsts)) == len(firsts), "two prompts share a prefix beyond BOS"
        lock = threading.Lock()
        baseline_stream(llm, lock, warm_up)
        return [
            Round.of(run_clients([partial(baseline_stream, llm, lock, p) for p in prompts]))
            for prompts in rounds
        ]
    finally:
        llm.close()


def baseline_stream(llm: Any, lock: threading.Lock, prompt: str) -> Stream:
    result = Stream(submitted=time.perf_counter())
    with lock:  # one request at a time: all a server on the high-level API can do
        chunks = llm.create_completion(
            prompt, max_tokens=CONCURRENCY_TOKENS, temperature=0, stream=True
        )
        for chunk in chunks:
            choice = chunk["choices"][0]
            if choice["finish_reason"] is None:  # one chunk per token; the last one only ends
                result.token_times.append(time.perf_counter())
                result.tokens += 1
            else:
                result.finish_reason = choice["finish_reason"]
            result.text += choice["text"]
    result.finished = time.perf_counter()
    return result


def http_round(url: str, prompts: list[str]) -> list[Stream]:
    return run_clients([partial(stream, url, p, CONCURRENCY_TOKENS) for p in prompts])


# --- the Ragdesk server --------------------------------------------------------------------
def start_server(model: Path, data_dir: Path) -> Any:
    from tests.server import ServerProcess  # the same real-process harness as the e2e tests

    server = ServerProcess(data_dir, data_dir / "server.log", generator_model=model)
    try:
        return server.start()
    except Exception:
        print_log_tail(server.log_path)
        server.stop()
        raise


def print_log_tail(path: Path) -> None:
    if path.exists():
        print(f"--- last lines of {path} ---")
        print("\n".join(path.read_text(errors="replace").splitlines()[-40:]))


def stream(url: str, prompt: str, max_tokens: int) -> Stream:
    """One ``POST /api/completions`` with ``stream``, timed at each SSE ``token`` event."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    from tests.server import auth_headers  # the server's API key

    with httpx.Client(timeout=HTTP_TIMEOUT, headers=auth_headers(url)) as client:
        result = Stream(submitted=time.perf_counter())
        with client.stream("POST", f"{url}/api/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                raise Misbehaved(f"HTTP {response.status_code}: {response.text}")
            for event, data in sse_events(response.iter_lines()):
                if event == "token":
                    result.token_times.append(time.perf_counter())
                    result.text += json.loads(data)["text"]
                elif event == "done":
                    done = json.loads(data)
                    usage = done["usage"]
                    result.finished = time.perf_counter()
                    result.finish_reason = done["finish_reason"]
                    result.tokens = usage["completion_tokens"]
                    result.prompt_tokens = usage["prompt_tokens"]
                    result.cached_tokens = usage["cached_tokens"]
                    check_usage(usage, result)
                    return result
                else:
                    raise Misbehaved(f"SSE event {event!r}: {data}")
    raise Misbehaved(f"the stream ended without a done event after {result.text!r}")


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    event, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue  # a comment (keep-alive)
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield event, "\n".join(data)


def check_usage(usage: dict[str, int], result: Stream) -> None:
    total = usage["prompt_tokens"] + usage["completion_tokens"]
    if usage["total_tokens"] != total or not 0 <= usage["cached_tokens"] <= usage["prompt_tokens"]:
        raise Misbehaved(f"inconsistent usage {usage}")
    if usage["completion_tokens"] < 1 or not result.token_times:
        raise Misbehaved(f"no tokens generated: {usage}, text {result.text!r}")


# --- follow-up: prefix cache ---------------------------------------------------------------
@dataclass(frozen=True)
class FollowUp:
    first: Stream
    warm: Stream
    cold: Stream

    @property
    def ratio(self) -> float:
        return self.warm.ttft / self.cold.ttft


def follow_up(url: str, base: str) -> FollowUp:
    first_prompt = f"{nonce()} {base}"
    first = stream(url, first_prompt, FOLLOW_UP_TOKENS)
    question = first.text + FOLLOW_UP_QUESTION
    warm = stream(url, first_prompt + question, FOLLOW_UP_TOKENS)
    cold = stream(url, f"{nonce()} {base}{question}", FOLLOW_UP_TOKENS)
    return FollowUp(first, warm, cold)


def nonce() -> str:
    """A unique start, so that no cached prefix matches (beyond BOS)."""
    return f"{uuid.uuid4().hex[:12]}:"


# --- SSE vs in-process ---------------------------------------------------------------------
def sse_stream(run: Callable[[], Stream]) -> Stream:
    result = run()
    if result.finish_reason != "length":
        raise Misbehaved(
            f"the SSE prompt ended early ({result.finish_reason}) after {result.tokens} tokens"
        )
    return result


def compare_sse(url: str, model: Path, repeats: int) -> tuple[list[Stream], list[Stream]]:
    """HTTP and in-process runs alternate, so drift on a shared machine hits both alike.

    The in-process engine lives in a fresh process (started while the server idles): once a
    high-level ``Llama`` has been loaded and closed in a process, a new llama.cpp context
    there decodes ~20 % slower (measured on 2 cores), which would flatter the ratio.
    """
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        1, mp_context=spawn, initializer=load_engine, initargs=(model,)
    ) as pool:
        try:
            pool.submit(engine_stream).result()  # warm-up, as the server had its own
            http, local = [], []
            for _ in range(repeats):
                http.append(sse_stream(lambda: stream(url, SSE_PROMPT, SSE_TOKENS)))
                local.append(sse_stream(pool.submit(engine_stream).result))
            return http, local
        finally:
            pool.submit(close_engine).result()


_engine: Any = None  # the in-process engine, in the worker process only


def load_engine(model: Path) -> None:
    from llm.local import LocalModel, LocalModelConfig

    global _engine
    _engine = LocalModel(LocalModelConfig(name="gemma", path=model, context_tokens=4096))


def close_engine() -> None:
    _engine.close()


def engine_stream() -> Stream:
    from llm.params import CompletionRequest, Finished, SamplingParams, TextDelta

    params = SamplingParams(max_tokens=SSE_TOKENS, temperature=0)
    result = Stream(submitted=time.perf_counter())
    for event in _engine.submit(CompletionRequest(SSE_PROMPT, params)):
        if isinstance(event, TextDelta):
            result.token_times.append(time.perf_counter())
            result.text += event.text
        elif isinstance(event, Finished):
            result.finished = time.perf_counter()
            result.finish_reason = event.reason
            result.tokens = event.usage.completion_tokens
            result.prompt_tokens = event.usage.prompt_tokens
            result.cached_tokens = event.usage.cached_tokens
            if event.error:
                raise Misbehaved(f"engine error: {event.error}")
    return result


# --- report --------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "✓" if ok else "✗"


def report(
    baseline: list[Round],
    ragdesk: list[Round],
    follow_ups: list[FollowUp],
    http_sse: list[Stream],
    in_process: list[Stream],
) -> None:
    fewest = min(r.prompt_tokens[0] for r in ragdesk)
    most = max(r.prompt_tokens[1] for r in ragdesk)
    print(
        f"Concurrency: distinct prompts of {fewest}–{most} tokens, "
        f"{CONCURRENCY_TOKENS} tokens each, greedy.\n"
    )
    print(
        "| clients | baseline tok/s | baseline TTFT p50 / max | Ragdesk tok/s "
        "| Ragdesk TTFT p50 / max | Ragdesk / baseline |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for b, r in zip(baseline, ragdesk, strict=True):
        print(
            f"| {r.clients} | {b.tokens_per_s:.1f} | {b.ttft_p50:.2f} s / {b.ttft_max:.2f} s "
            f"| {r.tokens_per_s:.1f} | {r.ttft_p50:.2f} s / {r.ttft_max:.2f} s "
            f"| {r.tokens_per_s / b.tokens_per_s:.2f}× |"
        )
    print(
        f"\n(tokens per round, baseline / Ragdesk: "
        f"{', '.join(f'{b.tokens}/{r.tokens}' for b, r in zip(baseline, ragdesk, strict=True))};"
        f" most cached prompt tokens in a Ragdesk round: {max(r.cached_max for r in ragdesk)})\n"
    )

    print(f"| follow-up (median of {len(follow_ups)}) | value |")
    print("| --- | --- |")
    med = statistics.median
    print(
        f"| prompt P, cold: tokens / TTFT | {follow_ups[0].first.prompt_tokens} / "
        f"{med(f.first.ttft for f in follow_ups):.3f} s |"
    )
    print(
        f"| follow-up, warm: tokens (cached) / TTFT | {follow_ups[0].warm.prompt_tokens} "
        f"({med(f.warm.cached_tokens for f in follow_ups):.0f}) / "
        f"{med(f.warm.ttft for f in follow_ups):.3f} s |"
    )
    print(
        f"| follow-up, cold: tokens (cached) / TTFT | {follow_ups[0].cold.prompt_tokens} "
        f"({med(f.cold.cached_tokens for f in follow_ups):.0f}) / "
        f"{med(f.cold.ttft for f in follow_ups):.3f} s |"
    )
    warm_cold = med(f.ratio for f in follow_ups)
    print(
        f"| warm / cold TTFT | {warm_cold:.3f} (runs: "
        f"{', '.join(f'{f.ratio:.3f}' for f in follow_ups)}) |\n"
    )

    http_rate = med(s.decode_tokens_per_s for s in http_sse)
    local_rate = med(s.decode_tokens_per_s for s in in_process)
    print(f"| {SSE_TOKENS}-token stream (median of {len(http_sse)}) | decode tok/s | runs |")
    print("| --- | --- | --- |")
    for label, runs, rate in (
        ("HTTP + SSE", http_sse, http_rate),
        ("engine in-process", in_process, local_rate),
    ):
        joined = ", ".join(f"{s.decode_tokens_per_s:.1f}" for s in runs)
        print(f"| {label} | {rate:.1f} | {joined} |")

    at8 = [(b, r) for b, r in zip(baseline, ragdesk, strict=True) if r.clients == 8]
    print("\n| bar | target | measured | |")
    print("| --- | --- | --- | --- |")
    if at8:
        b, r = at8[0]
        speedup = r.tokens_per_s / b.tokens_per_s
        print(
            f"| tok/s at 8 clients, Ragdesk / baseline | ≥ {SPEEDUP_BAR:g}× | {speedup:.2f}× "
            f"| {verdict(speedup >= SPEEDUP_BAR)} |"
        )
        print(
            f"| TTFT p50 at 8 clients | ≤ {TTFT_BAR_S:g} s | {r.ttft_p50:.2f} s "
            f"| {verdict(r.ttft_p50 <= TTFT_BAR_S)} |"
        )
    print(
        f"| follow-up TTFT, warm / cold | ≤ {WARM_COLD_BAR:g} | {warm_cold:.3f} "
        f"| {verdict(warm_cold <= WARM_COLD_BAR)} |"
    )
    sse_ratio = http_rate / local_rate
    print(
        f"| decode tok/s, HTTP / in-process | ≥ {SSE_BAR:g} | {sse_ratio:.3f} "
        f"| {verdict(sse_ratio >= SSE_BAR)} |"
    )


if __name__ == "__main__":
    main()
