"""Time from Enter to the first token, with the draft prefetched while the question is
typed and without, in one run, in real headless Chromium against ``ragdesk serve``.

    python -m bench.prefetch [--questions 20] [--cps 5] [--set handbook]

The golden set's corpus is uploaded to a fresh server (the default model, the real
embedder), then each question is typed into the chat's question box at ``--cps``
characters a second, as a person types, and sent with Enter, each in a new conversation.
Questions alternate between the two paths: prefetch on (the question box sends its
drafts) and off (the browser drops every ``/ui/prefetch`` request), so neither path finds
the other's prompt cached. Reported: time to first token p50/p95 of each path, how many
prefetches started and were used (the answer's prompt began with the prefetched text),
and the prompt tokens the used ones found cached (``/metrics``).
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.answers import DATA
from retrieval.evaluation import load_golden
from tests.server import ServerProcess, http, sign_in

CHROMIUM = "/usr/bin/chromium"
ANSWERED = "#messages article.msg.assistant:not(.streaming)"
FIRST_TOKEN = """() => new Promise(resolve => {
  const seen = () => {
    const body = document.querySelector("#messages article.msg.streaming .msg-body");
    const done = document.querySelectorAll("#messages article.msg.assistant:not(.streaming)");
    return (body && body.textContent.trim()) || done.length > window.__answers;
  };
  if (seen()) { resolve(performance.now()); return; }
  new MutationObserver((_, observer) => {
    if (seen()) { observer.disconnect(); resolve(performance.now()); }
  }).observe(document.querySelector("#messages"),
             {subtree: true, childList: true, characterData: true});
})"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--cps", type=float, default=5.0, help="typing speed, characters/s")
    parser.add_argument("--set", default="handbook")
    args = parser.parse_args()
    questions = [q.question for q in load_golden(DATA / args.set / "golden.jsonl")]
    questions = questions[: args.questions]
    with tempfile.TemporaryDirectory(prefix="ragdesk-prefetch-") as scratch:
        server = ServerProcess(Path(scratch) / "data", Path(scratch) / "server.log").start(600)
        try:
            upload_corpus(server, DATA / args.set / "corpus")
            times = _type_and_ask(server, questions, 1000.0 / args.cps)
            counts = prefetch_counts(server.url)
        finally:
            server.stop()
    _report(times, counts, args)


def upload_corpus(server: ServerProcess, corpus: Path) -> None:
    for path in sorted(corpus.iterdir()):
        response = http.post(
            f"{server.url}/api/documents", files=[("file", (path.name, path.read_bytes()))]
        )
        document_id = response.json()["documents"][0]["id"]
        deadline = time.monotonic() + 600
        while http.get(f"{server.url}/api/documents/{document_id}").json()["status"] != "indexed":
            assert time.monotonic() < deadline, f"{path.name} was not indexed"
            time.sleep(0.5)


def _type_and_ask(
    server: ServerProcess, questions: list[str], delay_ms: float
) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {"on": [], "off": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        # bypass_csp: the page's CSP forbids the eval that wait_for_function polls with
        page = browser.new_context(base_url=server.url, bypass_csp=True).new_page()
        sign_in(page, server.username, server.password)
        for number, question in enumerate(questions):
            path = "on" if number % 2 == 0 else "off"
            page.unroute("**/ui/prefetch")
            if path == "off":
                page.route("**/ui/prefetch", lambda route: route.abort())
            page.goto("/")
            page.evaluate("window.__answers = 0")
            page.click("#question")
            page.keyboard.type(question, delay=delay_ms)
            page.wait_for_timeout(delay_ms)  # the pause before Enter, as after any keystroke
            # Not awaited here (the value is null, not the promise): it resolves after Enter.
            page.evaluate(
                f"window.__first = null; ({FIRST_TOKEN})().then(t => window.__first = t); null"
            )
            started = page.evaluate("performance.now()")
            page.keyboard.press("Enter")
            page.wait_for_function("window.__first !== null", timeout=180_000)
            ttft = (float(page.evaluate("window.__first")) - float(started)) / 1000
            page.wait_for_selector(
                "#messages article.msg.assistant:not(.streaming)", timeout=180_000
            )
            times[path].append(ttft)
            print(f"  [{number + 1}/{len(questions)}] prefetch {path:3} {ttft:5.2f} s  {question}")
        browser.close()
    return times


def prefetch_counts(url: str) -> dict[str, float]:
    text = http.get(f"{url}/metrics").text
    counts = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'ragdesk_prefetches_total\{outcome="(\w+)"\} ([0-9.e+]+)', text)
    }
    cached = re.search(r"ragdesk_prefetch_cached_prompt_tokens_total ([0-9.e+]+)", text)
    counts["cached_tokens"] = float(cached.group(1)) if cached else 0.0
    return counts


def _report(times: dict[str, list[float]], counts: dict[str, float], args: Any) -> None:
    def p(values: list[float], q: float) -> str:
        ordered = sorted(values)
        return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.2f}"

    print(
        f"\n{args.set}, typed at {args.cps:g} characters/s, default model; "
        "time from Enter to first token:\n"
    )
    print("| path | questions | p50 s | p95 s | mean s |")
    print("| --- | --- | --- | --- | --- |")
    for path in ("off", "on"):
        values = times[path]
        mean = statistics.fmean(values)
        row = f"{len(values)} | {p(values, 0.5)} | {p(values, 0.95)} | {mean:.2f}"
        print(f"| prefetch {path} | {row} |")
    used, started = counts.get("used", 0.0), counts.get("started", 0.0)
    print(
        f"\nprefetches started {started:.0f}, used {used:.0f} "
        f"({len(times['on'])} questions sent with prefetch on), "
        f"wasted {counts.get('wasted', 0):.0f}, "
        f"skipped {counts.get('skipped', 0):.0f}; prompt tokens found cached by used ones: "
        f"{counts['cached_tokens']:.0f}"
    )


if __name__ == "__main__":
    main()
