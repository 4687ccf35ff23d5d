"""OCR of scanned PDF pages: character accuracy and seconds per page, as a Markdown table.

    .venv/bin/python -m bench.ocr [--pages 3] [--dpi 150] [--threads 1]

Pages are drawn in memory (tests/scans.py: an 11 pt font on A4, as a 150 dpi scan): clean,
skewed by 2 degrees, speckled with noise, and both. Accuracy is 1 - CER: the Levenshtein
distance between the recognised text and the drawn text (whitespace runs folded to one
space) over the drawn text's length. Seconds are wall time per page of
``recognise_pages`` (render + detection + recognition), after one warm-up page that also
loads the models; model loading is reported on its own. Also: the parse time of a PDF
with a real text layer, with OCR on and off (it must not change: no page is rendered).
"""

from __future__ import annotations

import argparse
import statistics
import time

from retrieval.parsers import parse_document
from retrieval.parsers.ocr import OcrOptions, recognise_pages
from retrieval.types import DocumentKind
from tests.documents import make_pdf
from tests.scans import scanned_page, scanned_pdf

TEXT = [
    "Travel expenses. Employees who travel for work are reimbursed for economy class "
    "train or air tickets, booked at least fourteen days ahead where possible.",
    "The daily meal allowance abroad is 45 euros; within the country it is 28 euros. "
    "Hotel costs above 150 euros per night need a manager's approval before booking.",
    "Receipts must be submitted within thirty days of the journey, scanned or as "
    "originals, together with the expense form signed by the traveller.",
    "Refunds are paid with the next salary. Questions go to the finance office, room 214, "
    "or to finance@example.org, Monday to Thursday from 9:00 to 16:00.",
]
VARIANTS = {
    "clean": {},
    "skewed 2°": {"skew_degrees": 2.0},
    "noisy (3% speckle, blur)": {"noise": 0.03},
    "skewed 2° and noisy (8% speckle)": {"skew_degrees": 2.0, "noise": 0.08},
}


def levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        previous = current
    return previous[-1]


def accuracy(recognised: str, truth: str) -> float:
    recognised, truth = " ".join(recognised.split()), " ".join(truth.split())
    return 1 - levenshtein(recognised, truth) / len(truth)


def measure(pages: int, options: OcrOptions) -> list[tuple[str, float, float]]:
    rows = []
    for name, variant in VARIANTS.items():
        images = [scanned_page(TEXT, seed=seed, **variant) for seed in range(pages)]  # type: ignore[arg-type]
        pdf = scanned_pdf(images)
        scores, seconds = [], []
        for number in range(1, pages + 1):
            started = time.perf_counter()
            blocks = recognise_pages(pdf, [number], options)[number]
            seconds.append(time.perf_counter() - started)
            scores.append(accuracy(" ".join(block.text for block in blocks), " ".join(TEXT)))
        rows.append((name, statistics.mean(scores), statistics.mean(seconds)))
    return rows


def text_pdf_parse_seconds(ocr: OcrOptions | None, repeat: int = 5) -> float:
    data = make_pdf(["\n".join(TEXT[i % 4] for i in range(40))] * 20)
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        parse_document(data, DocumentKind.PDF, "text.pdf", ocr=ocr)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=3, help="pages per variant")
    parser.add_argument("--dpi", type=int, default=OcrOptions.dpi)
    parser.add_argument("--threads", type=int, default=OcrOptions.threads)
    args = parser.parse_args()
    options = OcrOptions(dpi=args.dpi, threads=args.threads)
    warm_up = scanned_pdf([scanned_page(TEXT[:1])])
    started = time.perf_counter()
    recognise_pages(warm_up, [1], options)
    loading = time.perf_counter() - started
    rows = measure(args.pages, options)
    print(f"OCR at {args.dpi} dpi, {args.threads} thread(s), {args.pages} page(s) per row\n")
    print("| page | accuracy (1 - CER) | seconds / page |")
    print("| --- | ---: | ---: |")
    for name, score, seconds in rows:
        print(f"| {name} | {score:.3f} | {seconds:.2f} |")
    print(f"\nFirst page, models loaded: {loading:.2f} s.")
    off, on = text_pdf_parse_seconds(None), text_pdf_parse_seconds(options)
    print(f"Text PDF, 20 pages: parse {off * 1000:.0f} ms with OCR off, {on * 1000:.0f} ms on.")


if __name__ == "__main__":
    main()
