"""Ingestion speed of the new formats against a DOCX holding the same text, in one run.

    python -m bench.format_ingest [--slides 200] [--sheets 20] [--rows 50000]
                                  [--messages 2000] [--rounds 2]

Three files a team really has: a deck of ``--slides`` slides (a title, three bullets and
speaker notes each), a workbook of ``--sheets`` sheets holding ``--rows`` rows in all
(eight columns, a header on each sheet) and an mbox of ``--messages`` mails. For each,
the text the parser extracts is measured, and a DOCX is written with that many words of
the same vocabulary (paragraphs of about the same length). Each file is ingested into a
fresh scratch data directory with the real embedder and FAISS index (``ragdesk ingest``),
the pair alternating over ``--rounds``; the bar (issue #41) is each format within 2x its
DOCX. Prints one Markdown row per format with every round.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from email.message import EmailMessage
from pathlib import Path

from bench.tables import settings_for, unindexed, warm_up

WORDS = [
    "policy",
    "staff",
    "leave",
    "office",
    "travel",
    "claim",
    "approve",
    "manager",
    "receipt",
    "budget",
    "invoice",
    "supplier",
    "contract",
    "meeting",
    "room",
    "floor",
    "parking",
    "permit",
    "laptop",
    "training",
    "course",
    "safety",
    "deadline",
    "quarter",
    "region",
    "revenue",
    "target",
    "customer",
    "support",
    "rota",
    "shift",
    "holiday",
    "allowance",
    "grade",
]


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def deck(slides: int, rng: random.Random) -> bytes:
    from pptx import Presentation

    presentation = Presentation()
    for n in range(slides):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = f"Slide {n + 1}: {sentence(rng, 4)}"
        body = slide.placeholders[1].text_frame
        body.text = sentence(rng, 12)
        for _ in range(2):
            body.add_paragraph().text = sentence(rng, 12)
        slide.notes_slide.notes_text_frame.text = sentence(rng, 30)
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def workbook(sheets: int, rows: int, rng: random.Random) -> bytes:
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    for s in range(sheets):
        sheet = book.create_sheet(f"Region {s + 1}")
        sheet.append(["Code", "Item", "Owner", "Site", "Units", "Price", "Due", "Note"])
        for r in range(rows // sheets):
            sheet.append(
                [
                    f"R{s}-{r:05d}",
                    rng.choice(WORDS),
                    rng.choice(WORDS).title(),
                    rng.choice(WORDS),
                    rng.randint(1, 500),
                    round(rng.uniform(1, 900), 2),
                    f"2027-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                    sentence(rng, 5),
                ]
            )
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def mbox(messages: int, rng: random.Random) -> bytes:
    out = []
    for n in range(messages):
        message = EmailMessage()
        message["From"] = f"{rng.choice(WORDS)}@example.com"
        message["To"] = "staff@example.com"
        message["Subject"] = f"Re: {sentence(rng, 5)}"
        message["Date"] = f"Mon, 0{1 + n % 9} Nov 2026 09:{n % 60:02d}:00 +0000"
        message.set_content("\n\n".join(sentence(rng, 20) for _ in range(3)))
        out.append(b"From sender@example.com Mon Nov  2 09:00:00 2026\n" + bytes(message))
    return b"\n".join(out)


def docx_like(words: int, rng: random.Random) -> bytes:
    from docx import Document

    document = Document()
    written = 0
    while written < words:
        if written % 400 == 0:
            document.add_heading(sentence(rng, 4), level=2)
        document.add_paragraph(sentence(rng, 40))
        written += 40
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def words_in(data: bytes, filename: str) -> int:
    from retrieval.parsers import detect_kind, parse_document

    parsed = parse_document(data, detect_kind(data, filename), filename)
    return sum(len(page.text.split()) for page in parsed.pages)


def ingest_s(data: bytes, filename: str, scratch: Path) -> float:
    from app.documents.ingest_command import run_ingest

    corpus = scratch / "corpus"
    corpus.mkdir(parents=True)
    (corpus / filename).write_bytes(data)
    settings = settings_for(scratch / "data")
    started = time.perf_counter()
    with redirect_stdout(sys.stderr):
        run_ingest(settings, [corpus], collection="default", batch_documents=16)
    elapsed = time.perf_counter() - started
    failed = unindexed(settings, 1)
    if failed:
        raise SystemExit(f"{filename} was not indexed: {failed}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slides", type=int, default=200)
    parser.add_argument("--sheets", type=int, default=20)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rng = random.Random(7)
    files: list[tuple[str, Callable[[], bytes]]] = [
        ("deck.pptx", lambda: deck(args.slides, rng)),
        ("workbook.xlsx", lambda: workbook(args.sheets, args.rows, rng)),
        ("mail.mbox", lambda: mbox(args.messages, rng)),
    ]
    print("| format | words | format s (rounds) | DOCX s (rounds) | ratio |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="ragdesk-format-ingest-") as scratch:
        warm_up(Path(scratch))
        for filename, make in files:
            data = make()
            words = words_in(data, filename)
            twin = docx_like(words, rng)
            ours: list[float] = []
            theirs: list[float] = []
            for n in range(args.rounds):
                base = Path(scratch) / f"{filename}-{n}"
                ours.append(ingest_s(data, filename, base / "format"))
                theirs.append(ingest_s(twin, "twin.docx", base / "docx"))
            ratio = sum(ours) / sum(theirs)
            print(
                f"| {filename.split('.')[1]} | {words:,} | "
                f"{' / '.join(f'{s:.1f}' for s in ours)} | "
                f"{' / '.join(f'{s:.1f}' for s in theirs)} | {ratio:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
