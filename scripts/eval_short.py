#!/usr/bin/env python3
"""Short texts with repost-style edits: does dedupdb find the original, and only it?

Originals are real short Chinese texts (reviews, news headlines); each gets
variants of the kinds a repost brings (one or two characters changed, 转发/RT
prefixes, @mentions, hashtags, emoji, links, full-width punctuation,
traditional characters, and a combination). Originals and distractors from the
same corpus go into a store through the library; each variant is queried and
scored: recall = the original is among the answers; precision = answers that
are the original (or an exact copy of it) over all answers.

A second part reports what the length rule costs on long documents: the share
of stored pairs on long English news that come from SimHash alone.

    python scripts/eval_short.py                 # both corpora, 2,000 originals each
    python scripts/eval_short.py --quick
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dedupdb  # noqa: E402
from dedupdb.text.normalize import normalize  # noqa: E402
from dedupdb.ingest.records import RecordOptions  # noqa: E402

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
EMOJI = "😀😂🤣😍👍🙏🔥💯🎉😭😅🤔"
COMMON = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质信"


def load(name: str, limit: int | None = None) -> list[str]:
    texts = []
    with gzip.open(EVAL / name, "rt", encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"].replace("\n", " ").strip())
            if limit and len(texts) >= limit:
                break
    return texts


def _swap_chars(text: str, count: int, rng: random.Random) -> str:
    chars = list(text)
    cjk = [i for i, c in enumerate(chars) if "\u4e00" <= c <= "\u9fff"]
    for i in rng.sample(cjk, min(count, len(cjk))):
        chars[i] = rng.choice([c for c in COMMON if c != chars[i]])
    return "".join(chars)


def _full_width(text: str) -> str:
    table = {ord(c): chr(ord(c) + 0xFEE0) for c in "!?,.:;()0123456789"}
    table.update({ord("，"): ",", ord("。"): ".", ord("！"): "!", ord("？"): "?"})
    return text.translate(table)


def variants(text: str, rng: random.Random, to_traditional) -> dict[str, str]:
    name = "".join(rng.choice(COMMON) for _ in range(rng.randint(2, 4)))
    return {
        "1 char changed": _swap_chars(text, 1, rng),
        "2 chars changed": _swap_chars(text, 2, rng),
        "转发/RT prefix": rng.choice(["转发微博 ", "转发 ", f"RT @{name}: ", f"//@{name}: "]) + text,
        "@mentions": f"{text} @{name} @{name[::-1]}",
        "hashtag": f"#{name}# {text}" if rng.random() < 0.5 else f"{text} #{name}",
        "emoji": "".join(c + (rng.choice(EMOJI) if rng.random() < 0.15 else "") for c in text),
        "link": f"{text} http://t.cn/{''.join(rng.choice('abcdefXYZ0123') for _ in range(7))}",
        "full-width punctuation": _full_width(text),
        "traditional": to_traditional(text),
        "combined": f"转发微博 //@{name}: " + _swap_chars(text, 1, rng) + rng.choice(EMOJI),
    }


def evaluate_corpus(name: str, originals_n: int, distractors_n: int, min_chars: int, seed: int, settings: dict):
    import opencc

    to_traditional = opencc.OpenCC("s2t").convert
    rng = random.Random(seed)
    seen, pool = set(), []
    for text in load(name):
        key = normalize(text)
        if len(key) >= min_chars and key not in seen:
            seen.add(key)
            pool.append(text)
    rng.shuffle(pool)
    originals = pool[:originals_n]
    distractors = pool[originals_n : originals_n + distractors_n]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / f"{name.split('.')[0]}.txt"
        corpus.write_text("".join(t + "\n" for t in originals + distractors), encoding="utf-8")
        with dedupdb.open(Path(tmp) / "short.db", **settings) as db:
            started = time.perf_counter()
            db.add([corpus], records=RecordOptions("lines"))
            add_seconds = time.perf_counter() - started
            recall = defaultdict(lambda: [0, 0])
            answers = defaultdict(lambda: [0, 0])
            started = time.perf_counter()
            queries = 0
            for line, original in enumerate(originals, 1):
                wanted = f"{corpus}#{line}"
                for kind, variant in variants(original, rng, to_traditional).items():
                    try:
                        hits = db.query(variant, top=50, containment=None)  # near-duplicates only
                    except dedupdb.InputError:  # nothing left to compare once the noise is gone
                        hits = []
                    queries += 1
                    keys = [h.key for h in hits]
                    recall[kind][0] += wanted in keys
                    recall[kind][1] += 1
                    answers[kind][0] += sum(1 for k in keys if k == wanted)
                    answers[kind][1] += len(keys)
            query_ms = (time.perf_counter() - started) / max(1, queries) * 1000
    return recall, answers, add_seconds, query_ms, len(originals), len(distractors)


def long_document_cost(limit: int, settings: dict) -> tuple[int, int, int]:
    """Pairs on long English news: (all pairs, pairs from SimHash alone, of those with Jaccard < 0.3)."""
    texts = load("en_bbc_fulltext.jsonl.gz") + load("en_reuters21578.jsonl.gz", limit)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "news.jsonl"
        corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        with dedupdb.open(Path(tmp) / "long.db", **settings) as db:
            db.add([corpus], records=RecordOptions("jsonl"))
            threshold = db.settings.threshold
            pairs = list(db.pairs(by="content"))  # stored pairs of distinct texts
    simhash_only = [p for p in pairs if p.jaccard < threshold]
    return len(pairs), len(simhash_only), sum(1 for p in simhash_only if p.jaccard < 0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--originals", type=int, default=2000)
    parser.add_argument("--distractors", type=int, default=20000)
    parser.add_argument("--min-chars", type=int, default=8, help="shortest original, in normalized characters")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--cjk-ngram", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="300 originals, 3,000 distractors")
    args = parser.parse_args()
    if args.quick:
        args.originals, args.distractors = 300, 3000
    settings = {"threshold": args.threshold, "cjk_ngram": args.cjk_ngram}
    for corpus in ("zh_sophonplus_reviews.jsonl.gz", "zh_thucnews_titles_devtest.jsonl.gz"):
        recall, answers, add_s, query_ms, n_orig, n_dist = evaluate_corpus(
            corpus, args.originals, args.distractors, args.min_chars, args.seed, settings
        )
        print(f"\n{corpus}: {n_orig} originals + {n_dist} distractors (add {add_s:.1f}s, {query_ms:.2f} ms/query)")
        print(f"{'edit':<24}{'recall':>8}{'precision':>11}")
        total_r, total_a = [0, 0], [0, 0]
        for kind in recall:
            r, a = recall[kind], answers[kind]
            total_r = [total_r[0] + r[0], total_r[1] + r[1]]
            total_a = [total_a[0] + a[0], total_a[1] + a[1]]
            print(f"{kind:<24}{r[0] / r[1]:>8.3f}{(a[0] / a[1] if a[1] else 1):>11.3f}")
        print(f"{'all':<24}{total_r[0] / total_r[1]:>8.3f}{(total_a[0] / total_a[1] if total_a[1] else 1):>11.3f}")
    limit = 3000 if args.quick else None
    pairs, simhash_only, weak = long_document_cost(limit, settings)
    print(f"\nlong documents (BBC + Reuters): {pairs} pairs, {simhash_only} found by SimHash alone "
          f"(Jaccard below the threshold), {weak} of them with Jaccard < 0.3")


if __name__ == "__main__":
    main()
