#!/usr/bin/env python
"""Extraction throughput: PDF pages per second with pypdfium2 (what dedupdb uses) and pypdf, and how much of a
Chinese text each gives back; mail megabytes per second; and the add of a mixed archive by workers.

PDFs are written by reportlab from real texts of the shared corpora (BBC articles, Chinese reviews), several
pages each. "text kept" is the share of the source's characters (punctuation and whitespace aside) that the
extracted text holds in order (difflib's matching blocks).

    python scripts/bench_extract.py                 # 40 PDFs of each language, 2,000 messages, the mixed archive
                                                    # of 100 + 100 texts with 0, 1 and 2 workers
    python scripts/bench_extract.py --pdfs 10 --messages 500 --no-archive
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import random
import re
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dedupdb  # noqa: E402
from dedupdb.ingest.mail import parse_message, split_mbox  # noqa: E402
from tests.writers import make_message, make_pdf, write_mbox  # noqa: E402

_spec = importlib.util.spec_from_file_location("eval_archive", ROOT / "scripts" / "eval_archive.py")
eval_archive = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eval_archive)

_STRIP = re.compile(r"[\W_]+")


def kept(source: str, got: str) -> float:
    a = _STRIP.sub("", unicodedata.normalize("NFKC", source).casefold())
    b = _STRIP.sub("", unicodedata.normalize("NFKC", got).casefold())
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()) / max(1, len(a))


def with_pdfium(data: bytes) -> tuple[int, str]:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    texts = []
    for index in range(len(document)):
        page = document[index]
        textpage = page.get_textpage()
        texts.append(textpage.get_text_bounded())
        textpage.close()
        page.close()
    pages = len(document)
    document.close()
    return pages, "\n".join(texts)


def with_pypdf(data: bytes) -> tuple[int, str]:
    import io

    import pypdf

    reader = pypdf.PdfReader(io.BytesIO(data))
    return len(reader.pages), "\n".join(page.extract_text() or "" for page in reader.pages)


def bench_pdfs(folder: Path, count: int, seed: int) -> None:
    texts, _ = eval_archive.pick_texts(count, 0, seed)
    by_lang: dict[str, list[tuple[bytes, str]]] = {"en": [], "zh": []}
    for n, (lang, text) in enumerate(texts):
        # Long enough for several pages: the text three times over.
        body = "\n\n".join([text] * 3)
        by_lang[lang].append((make_pdf(folder / f"{lang}{n}.pdf", body).read_bytes(), body))
    print(f"{'PDF':<8} {'library':<10} {'files':>5} {'pages':>6} {'pages/s':>8} {'text kept':>9}")
    for lang, items in by_lang.items():
        for name, extract in (("pypdfium2", with_pdfium), ("pypdf", with_pypdf)):
            extract(items[0][0])  # imported and warmed before the clock
            started = time.perf_counter()
            results = [extract(data) for data, _ in items]
            seconds = time.perf_counter() - started
            pages = sum(p for p, _ in results)
            share = sum(kept(body, got) for (_, body), (_, got) in zip(items, results)) / len(items)
            print(f"{lang:<8} {name:<10} {len(items):>5} {pages:>6} {pages / seconds:>8.0f} {share:>9.4f}")


def bench_mail(folder: Path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    texts, _ = eval_archive.pick_texts(200, 0, seed)
    messages = []
    for n in range(count):
        lang, text = texts[n % len(texts)]
        charset = "utf-8" if lang == "en" else rng.choice(["utf-8", "gb18030"])
        messages.append(make_message(text, f"message {n}", f"{n}@bench", charset=charset,
                                     cte=rng.choice(["base64", "quoted-printable"]), html=rng.choice([False, "both"])))
    box = write_mbox(folder / "bench.mbox", messages)
    size = box.stat().st_size
    started = time.perf_counter()
    with open(box, "rb") as stream:
        raws = list(split_mbox(stream, 0, 0, None, 64 << 20))
    split = time.perf_counter() - started
    started = time.perf_counter()
    parsed = [parse_message(m.data, 64 << 20) for m in raws]
    seconds = time.perf_counter() - started
    assert len(parsed) == count and all(p.parts[0].text for p in parsed)
    print(f"mail: {count} messages, {size / 2**20:.1f} MiB: split {size / 2**20 / split:.0f} MiB/s, "
          f"parsed and decoded {size / 2**20 / seconds:.1f} MiB/s ({count / seconds:.0f} messages/s)")


def bench_archive(folder: Path, seed: int, workers: list[int], count: int) -> None:
    texts, decoys = eval_archive.pick_texts(count, 200, seed)
    archive = folder / "archive"
    archive.mkdir()
    eval_archive.build(archive, texts, decoys, seed)
    files = [p for p in archive.rglob("*") if p.is_file()]
    mib = sum(p.stat().st_size for p in files) / 2**20
    for count in workers:
        started = time.perf_counter()
        with dedupdb.open(folder / f"store{count}.sqlite") as db:
            summary = db.add([archive], workers=count)
        seconds = time.perf_counter() - started
        print(f"add of the mixed archive ({len(files)} files, {mib:.1f} MiB, {summary.records} messages and "
              f"attachments): --workers {count}: {seconds:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pdfs", type=int, default=40, help="PDFs of each language (default 40)")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--workers", default="0,1,2", help="worker counts for the archive add (default 0,1,2)")
    parser.add_argument("--archive-texts", type=int, default=100,
                        help="texts of each language in the mixed archive, as scripts/eval_archive.py builds it (default 100)")
    parser.add_argument("--no-archive", action="store_true")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bench_pdfs(folder, args.pdfs, args.seed)
        bench_mail(folder, args.messages, args.seed)
        if not args.no_archive:
            bench_archive(folder, args.seed, [int(w) for w in args.workers.split(",")], args.archive_texts)


if __name__ == "__main__":
    main()
