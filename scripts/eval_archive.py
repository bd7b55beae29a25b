#!/usr/bin/env python
"""Cross-format recall on an archive as a person has one: the same texts as .txt notes, PDF papers, DOCX, ODT,
EPUB and RTF documents, and mail (re-encoded, HTML-only, forwarded, attached), beside unrelated texts.

Texts come from the shared corpora: BBC articles (English) and the longest Chinese reviews (sophonplus), NUM of
each (default 30). Every text is written as a .txt, and as:
  pdf        every text
  docx       every second text, with 5% of its words (English) or characters (Chinese) replaced
  odt, epub  every third text (offset by one and two); rtf every fourth
  mail       every second text: in an mbox once base64, once quoted-printable, once HTML only
             (multipart/alternative without a plain part for Chinese, HTML-only for English), once forwarded
             inline with a note; Chinese messages in GB18030 or Big5 half of the time
  eml        every third text saved as .eml (quoted-printable, plain and HTML); every fifth in a Maildir
  attached   every fourth text's PDF attached to a message about something else
DECOYS other texts of the same corpora (default 200) are written as .txt only; a locked PDF and a truncated PDF
are added too, and must be reported as failed while everything else is added.

Scored from the store's own document pairs (`Database.pairs()`), as scripts/eval_precision.py does:
  recall        share of (note.txt, copy) pairs reported, per kind of copy
  false pairs   reported pairs of two different texts whose strict similarity (character 4-gram Jaccard after
                NFKC, case folding and removing punctuation and whitespace, of the texts written) is below 0.5
datasketch (MinHashLSH, 128 permutations, threshold 0.5, character 5-grams) runs on the texts dedupdb extracted
(it reads no documents itself), so its row compares matching, not reading.

    python scripts/eval_archive.py                  # 30 + 30 texts, 200 decoys, about a minute
    python scripts/eval_archive.py --texts 10 --decoys 50 --json out.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
import tempfile
import time
import unicodedata
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
sys.path.insert(0, str(ROOT))

import dedupdb  # noqa: E402
from tests.writers import (  # noqa: E402
    forwarded, make_docx, make_epub, make_message, make_odt, make_pdf, make_rtf, write_mbox,
)


def read_corpus(name: str) -> list[str]:
    with gzip.open(EVAL / name, "rt", encoding="utf-8") as stream:
        return [json.loads(line)["text"] for line in stream]


def pick_texts(count: int, decoys: int, seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    rng = random.Random(seed)
    english = [t for t in read_corpus("en_bbc_fulltext.jsonl.gz") if 1200 <= len(t) <= 5000]
    chinese = [t for t in read_corpus("zh_sophonplus_reviews.jsonl.gz") if 250 <= len(t) <= 2000]
    english = list(dict.fromkeys(english))
    chinese = list(dict.fromkeys(chinese))
    rng.shuffle(english)
    rng.shuffle(chinese)
    chosen = [("en", t) for t in english[:count]] + [("zh", t) for t in chinese[:count]]
    half = decoys // 2
    others = [("en", t) for t in english[count : count + half]] + [("zh", t) for t in chinese[count : count + decoys - half]]
    return chosen, others


def edited(text: str, lang: str, share: float, rng: random.Random) -> str:
    """text with share of its words (English) or characters (Chinese) replaced by others of the text."""
    if lang == "en":
        words = text.split(" ")
        pool = [w for w in words if w.isalpha()] or ["word"]
        for index in rng.sample(range(len(words)), max(1, int(len(words) * share))):
            words[index] = rng.choice(pool)
        return " ".join(words)
    chars = list(text)
    hanzi = [i for i, c in enumerate(chars) if "\u4e00" <= c <= "\u9fff"]
    pool = [chars[i] for i in hanzi]
    for index in rng.sample(hanzi, max(1, int(len(hanzi) * share))):
        chars[index] = rng.choice(pool)
    return "".join(chars)


def build(folder: Path, texts: list[tuple[str, str]], decoys: list[tuple[str, str]], seed: int):
    """Write the archive; returns (written text of each document key, the source id of each key, expected pairs
    as (note key, copy key, kind))."""
    rng = random.Random(seed)
    written: dict[str, str] = {}
    source: dict[str, str] = {}
    expected: list[tuple[str, str, str]] = []
    mail_messages = []
    for n, (lang, text) in enumerate(texts):
        sid = f"t{n}"
        title = text.split("\n", 1)[0][:60] if lang == "en" else text[:12]
        note = folder / "notes" / f"{sid}.txt"
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(text, encoding="utf-8")
        written[str(note)], source[str(note)] = text, sid

        def copy(key: str, kind: str, body: str) -> None:
            written[key], source[key] = body, sid
            expected.append((str(note), key, kind))

        papers = folder / "papers"
        papers.mkdir(exist_ok=True)
        copy(str(make_pdf(papers / f"{sid}.pdf", text)), "pdf", text)
        if n % 2 == 0:
            body = edited(text, lang, 0.05, rng)
            copy(str(make_docx(papers / f"{sid}.docx", body)), "docx (5% edited)", body)
        if n % 3 == 1:
            copy(str(make_odt(papers / f"{sid}.odt", text)), "odt", text)
        if n % 3 == 2:
            copy(str(make_epub(papers / f"{sid}.epub", text, title)), "epub", text)
        if n % 4 == 3:
            copy(str(make_rtf(papers / f"{sid}.rtf", text)), "rtf", text)
        charset = "utf-8" if lang == "en" else rng.choice(["utf-8", "gb18030", "big5" if n % 4 == 0 else "gbk"])
        if charset == "big5":
            try:
                text.encode("big5")
            except UnicodeEncodeError:
                charset = "gb18030"
        if n % 2 == 0:
            variants = [
                ("mail base64", make_message(text, title, f"{sid}.b64@x", charset=charset, cte="base64")),
                ("mail quoted-printable", make_message(text, title, f"{sid}.qp@x", charset=charset,
                                                       cte="quoted-printable")),
                ("mail HTML only", make_message(text, title, f"{sid}.html@x", charset=charset, html=True)),
            ]
            original = variants[0][1]
            variants.append(("mail forwarded", forwarded(original, "FYI, see below." if lang == "en" else "转给你看看。",
                                                         f"{sid}.fwd@x")))
            for kind, message in variants:
                mail_messages.append((kind, message, sid, text))
        if n % 3 == 0:
            saved = folder / "saved" / f"{sid}.eml"
            saved.parent.mkdir(exist_ok=True)
            message = make_message(text, title, f"{sid}.saved@x", charset=charset, cte="quoted-printable", html="both")
            saved.write_bytes(bytes(message))
            copy(f"{saved}#{sid}.saved@x", "eml", text)
        if n % 5 == 0:
            maildir = folder / "Maildir"
            for sub in ("cur", "new", "tmp"):
                (maildir / sub).mkdir(parents=True, exist_ok=True)
            path = maildir / "cur" / f"17000000{n:02d}.M{n}P1.host:2,S"
            path.write_bytes(bytes(make_message(text, title, f"{sid}.md@x", charset=charset)))
            copy(f"{path}#{sid}.md@x", "maildir", text)
        if n % 4 == 0:
            pdf = (papers / f"{sid}.pdf").read_bytes()
            note_text = "Here is the paper we talked about." if lang == "en" else "这是我们说过的那篇文章。"
            message = make_message(note_text, f"paper {sid}", f"{sid}.att@x", attachments=((f"{sid}.pdf", pdf),))
            mail_messages.append(("attached pdf", message, sid, text))
    box = folder / "mail" / "archive.mbox"
    box.parent.mkdir(exist_ok=True)
    write_mbox(box, [m for _, m, _, _ in mail_messages])
    for kind, message, sid, text in mail_messages:
        key = f"{box}#{message['Message-ID'].strip('<>')}"
        if kind == "attached pdf":
            key += f"/{sid}.pdf"
        written[key], source[key] = text, sid
        expected.append((str(folder / "notes" / f"{sid}.txt"), key, kind))
    for n, (lang, text) in enumerate(decoys):
        path = folder / "other" / f"d{n}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written[str(path)], source[str(path)] = text, f"d{n}"
    make_pdf(folder / "papers" / "locked.pdf", texts[0][1], password="secret")
    whole = (folder / "papers" / "t1.pdf").read_bytes()
    (folder / "papers" / "truncated.pdf").write_bytes(whole[: len(whole) // 2])
    return written, source, expected


_STRIP = re.compile(r"[\W_]+", re.UNICODE)


def strict_grams(text: str) -> frozenset[str]:
    key = _STRIP.sub("", unicodedata.normalize("NFKC", text).casefold())
    return frozenset(key[i : i + 4] for i in range(max(1, len(key) - 3)))


def score(pairs: set[tuple[str, str]], written, source, expected) -> tuple[dict, int, int, list]:
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for note, key, kind in expected:
        found = (min(note, key), max(note, key)) in pairs
        by_kind[kind][0] += found
        by_kind[kind][1] += 1
    grams: dict[str, frozenset] = {}
    false = []
    cross = 0
    for a, b in pairs:
        if a not in source or b not in source or source[a] == source[b]:
            continue
        cross += 1
        ga = grams.setdefault(a, strict_grams(written[a]))
        gb = grams.setdefault(b, strict_grams(written[b]))
        if len(ga & gb) / max(1, len(ga | gb)) < 0.5:
            false.append((a, b))
    return {k: (v[0], v[1]) for k, v in sorted(by_kind.items())}, cross, len(false), false


def datasketch_pairs(texts: dict[str, str]) -> set[tuple[str, str]]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=0.5, num_perm=128)
    sketches = {}
    for key, text in texts.items():
        folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
        sketch = MinHash(num_perm=128)
        sketch.update_batch([folded[i : i + 5].encode() for i in range(max(1, len(folded) - 4))])
        sketches[key] = sketch
        lsh.insert(key, sketch)
    out = set()
    for key, sketch in sketches.items():
        for other in lsh.query(sketch):
            if other != key and sketch.jaccard(sketches[other]) >= 0.5:
                out.add((min(key, other), max(key, other)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=30, help="texts of each language (default 30)")
    parser.add_argument("--decoys", type=int, default=200, help="unrelated texts, as .txt (default 200)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    texts, decoys = pick_texts(args.texts, args.decoys, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "archive"
        folder.mkdir()
        written, source, expected = build(folder, texts, decoys, args.seed)
        started = time.perf_counter()
        with dedupdb.open(Path(tmp) / "store.sqlite") as db:
            summary = db.add([folder], workers=args.workers)
            seconds = time.perf_counter() - started
            pairs = {(min(p.a, p.b), max(p.a, p.b)) for p in db.pairs(by="document")}
            extracted = {r.key: r.text for r in db.export(unique=False)}
        files = sum(1 for p in folder.rglob("*") if p.is_file())
        mib = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
    recall, cross, false_count, false = score(pairs, written, source, expected)
    ds = datasketch_pairs(extracted)
    ds_recall, ds_cross, ds_false_count, _ = score(ds, written, source, expected)
    failed = sorted((Path(p).name, r) for p, r in summary.failed)
    found = sum(f for f, _ in recall.values())
    total = sum(t for _, t in recall.values())
    ds_found = sum(f for f, _ in ds_recall.values())
    print(f"archive: {files} files, {mib:.1f} MiB, {len(texts)} texts with copies, {len(decoys)} decoys; "
          f"add {seconds:.1f} s; {len(extracted)} documents")
    print(f"failed as expected: {failed}")
    print(f"{'copy':<24} {'dedupdb':>14} {'datasketch':>14}")
    for kind, (f, t) in recall.items():
        d = ds_recall[kind][0]
        print(f"{kind:<24} {f:>4}/{t:<4} {f / t:5.3f} {d:>4}/{t:<4} {d / t:5.3f}")
    print(f"{'all':<24} {found:>4}/{total:<4} {found / total:5.3f} {ds_found:>4}/{total:<4} {ds_found / total:5.3f}")
    print(f"pairs between different texts: dedupdb {cross} ({false_count} strictly false), "
          f"datasketch {ds_cross} ({ds_false_count} strictly false)")
    for a, b in false[:10]:
        print(f"  false: {Path(a).name} ~ {Path(b).name}")
    if args.json:
        args.json.write_text(json.dumps({
            "files": files, "mib": round(mib, 2), "seconds": round(seconds, 2), "failed": failed,
            "recall": {k: [f, t] for k, (f, t) in recall.items()}, "recall_all": round(found / total, 4),
            "cross_pairs": cross, "false_pairs": false_count,
            "datasketch": {"recall_all": round(ds_found / total, 4), "cross_pairs": ds_cross,
                           "false_pairs": ds_false_count},
        }, indent=2))


if __name__ == "__main__":
    main()
