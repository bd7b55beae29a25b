#!/usr/bin/env python
"""Short English texts with known edits: recall per edit level and per length band, and strict false pairs, of
dedupdb at its default settings beside datasketch in the same run.

Originals are short texts of the shared corpora (../shared/eval): Reuters and BBC headlines (an article's first
line), sentences of at most 12 words from IMDB, BBC and Reuters, and clauses (sentences cut at , ; : and dashes)
of 3-20 words; distinct by strict key (eval_precision.strict_key), sampled evenly over the length bands
(words of the original: <= 5, 6-8, 9-12, 13-20; the originals of exactly 5 words are also reported apart,
as "=5", since the targets hold from 5 words up). Every original gets one variant per edit level, made by
the edits of scripts/eval_precision.py:

  format   two of: case, whitespace and line ends, full width, punctuation spacing, a punctuation change
  typo     one letter changed, inserted, dropped or swapped in one word of three letters or more
  tag      a #hashtag, a short link or an @mention appended
  word     a word or two substituted, inserted or deleted (one below 13 words, one or two from 13)
  heavy    10-20% of the words substituted, inserted or deleted (one at least)

"light" in the summary pools typo and tag (eval_precision's light level on texts under 20 words, where its 5%
budget allows no word edits). Distractors are other short texts of the same pool. This script is separate from
eval_short.py, which queries Chinese reposts one at a time: here, as in eval_precision.py, every document goes
into one store and pairs are read back, so recall and false pairs use eval_precision's definitions
(StrictJudge: a pair is false when the two source texts' character 4-gram Jaccard is below 0.5).

False pairs are also counted as templates when the two source texts differ only in numbers, or in one slot of a
shared frame (a common beginning and end holding at least half the words of each; dates, names, figures).

datasketch: MinHashLSH(threshold=0.5, num_perm=128) with character 5-grams (ds:char5) and with words (ds:word,
unigrams and bigrams), both on NFKC + case-folded text, candidates kept on a MinHash estimate >= 0.5.

    python scripts/eval_short_en.py                   # 600 originals a band + 12,000 distractors, ~2 minutes
    python scripts/eval_short_en.py --quick           # 150 a band + 3,000 distractors
    python scripts/eval_short_en.py --no-datasketch --misses 5
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_precision as ep  # noqa: E402  (its edits, judge and systems: one definition of each)

BANDS = ((1, 5, "<=5"), (6, 8, "6-8"), (9, 12, "9-12"), (13, 20, "13-20"))
LEVELS = ("format", "typo", "tag", "word", "heavy")
SYSTEMS = ("dedupdb", "ds:char5", "ds:word")
TARGETS = {"format": 0.995, "light": 0.99, "heavy": 0.90}
_CLAUSE_CUT = re.compile(r"\s*(?:[,;:]|\s--?\s|\s\u2014\s)\s*")
_HTML = re.compile(r"<[^>]{0,40}>")


def band_of(words: int) -> str | None:
    for low, high, name in BANDS:
        if low <= words <= high:
            return name
    return None


def short_texts() -> list[tuple[str, str]]:
    """(origin, text) of every headline, sentence of <= 12 words and clause of 3-20 words, distinct by strict key."""
    out, seen = [], set()

    def keep(origin: str, text: str, most: int) -> None:
        text = " ".join(_HTML.sub(" ", text).split())
        words = len(text.split())
        key = ep.strict_key(text)
        if 3 <= words <= most and len(key) >= 8 and key not in seen:
            seen.add(key)
            out.append((origin, text))

    for stem, origin in (("en_reuters21578", "reuters"), ("en_bbc_fulltext", "bbc"), ("en_imdb_aclImdb", "imdb")):
        records = ep.read_jsonl_gz(stem)
        if origin == "imdb":
            records = random.Random(3).sample(records, 20000)
        for _, text in records:
            if origin != "imdb":
                keep(f"{origin}:headline", text.split("\n", 1)[0], 20)
            for sentence in ep._SENTENCE_END.split(" ".join(text.split())):
                keep(f"{origin}:sentence", sentence, 12)
                for clause in _CLAUSE_CUT.split(sentence):
                    keep(f"{origin}:clause", clause, 20)
    ep.log(f"short texts: {len(out):,} distinct")
    return out


def word_edits(text: str, count: int, pool: list[str], rng: random.Random) -> str:
    return ep.apply_token_edits(text, "en", count, ("sub", "ins", "del"), pool, rng)


def make_variants(text: str, pool: list[str], rng: random.Random) -> dict[str, tuple[str, str]]:
    n = len(text.split())
    tag = rng.choice(("hashtag", "link", "mention"))
    tail = {"hashtag": lambda: ep._hashtag(rng, "en", pool), "link": lambda: ep._link(rng, "en"),
            "mention": lambda: "@" + ep._handle(rng, "en", pool)}[tag]()
    heavy = max(1, rng.randint(-(-n // 10), max(-(-n // 10), n // 5)))
    words = 1 if n < 13 else rng.randint(1, 2)
    return {
        "format": ep.format_variant(text, "en", rng),
        "typo": (ep.typos(text, 1, rng), "typo"),
        "tag": (text.rstrip() + rng.choice((" ", "\n")) + tail, tag),
        "word": (word_edits(text, words, pool, rng), f"{words} word(s)"),
        "heavy": (word_edits(text, heavy, pool, rng), f"{heavy}/{n}"),
    }


def build_sample(args) -> tuple[ep.Sample, dict[str, str]]:
    """Originals evenly over the bands, distractors from the rest; returns the sample and each original's band."""
    every = short_texts()
    rng = random.Random(f"{args.seed}-short-en")
    rng.shuffle(every)
    per_band: dict[str, list[str]] = defaultdict(list)
    distractors: list[str] = []
    for _, text in every:
        band = band_of(len(text.split()))
        if band and len(per_band[band]) < args.originals:
            per_band[band].append(text)
        elif len(distractors) < args.distractors:
            distractors.append(text)
    pool = [w for text in distractors[:3000] for w in text.split()]
    texts, source, level, kind, bands = {}, {}, {}, {}, {}
    originals = [(band, text) for _, _, band in BANDS for text in per_band[band]]
    for i, (band, text) in enumerate(originals):
        texts[f"o{i}"], bands[f"o{i}"] = text, band
    for i, text in enumerate(distractors):
        texts[f"d{i}"] = text
    for i, (band, text) in enumerate(originals):
        for lvl, (variant, how) in make_variants(text, pool, rng).items():
            vid = f"v{i}-{lvl}"
            texts[vid], source[vid], level[vid], kind[vid] = variant, f"o{i}", lvl, how
    ep.log(f"{len(originals)} originals ({', '.join(f'{b} {len(per_band[b])}' for _, _, b in BANDS)}), "
           f"{len(distractors)} distractors, {len(source)} variants")
    return ep.Sample("short-en", "en", texts, source, level, kind, len(originals), len(distractors)), bands


_NUMBER = re.compile(r"\d+(?:[.,/:-]\d+)*")


def is_template(a: str, b: str) -> bool:
    """The texts differ only in numbers, or in one slot of a shared frame: a common beginning and end (in words,
    after strict folding) holding at least half the words of each."""
    fa, fb = (ep.strict_key(_NUMBER.sub("0", t)) for t in (a, b))
    if fa == fb:
        return True
    wa = [w for w in (ep.strict_key(w) for w in _NUMBER.sub("0", a).split()) if w]
    wb = [w for w in (ep.strict_key(w) for w in _NUMBER.sub("0", b).split()) if w]
    head = 0
    while head < min(len(wa), len(wb)) and wa[head] == wb[head]:
        head += 1
    tail = 0
    while tail < min(len(wa), len(wb)) - head and wa[-1 - tail] == wb[-1 - tail]:
        tail += 1
    return 2 * (head + tail) >= max(len(wa), len(wb)) and head + tail > 0


def ds_char5_pairs(texts: dict[str, str]) -> ep.PairScores:
    from datasketch import MinHash, MinHashLSH
    import numpy as np
    import unicodedata

    ids = list(texts)
    shingles = []
    for i in ids:
        folded = " ".join(unicodedata.normalize("NFKC", texts[i]).casefold().split())
        shingles.append([g.encode("utf-8") for g in ep.char_grams(folded, 5)])
    sigs = MinHash.bulk(shingles, num_perm=ep.DS_PERM)
    lsh = MinHashLSH(threshold=ep.DS_THRESHOLD, num_perm=ep.DS_PERM)
    with lsh.insertion_session() as session:
        for doc_id, sig in zip(ids, sigs):
            session.insert(doc_id, sig, check_duplication=False)
    values = {doc_id: sig.hashvalues for doc_id, sig in zip(ids, sigs)}
    pairs: ep.PairScores = {}
    for doc_id, sig in zip(ids, sigs):
        for other in lsh.query(sig):
            if other > doc_id and float(np.mean(values[doc_id] == values[other])) >= ep.DS_THRESHOLD:
                pairs[ep.ordered(doc_id, other)] = {}
    return pairs


def run(args) -> dict:
    sample, bands = build_sample(args)
    judge = ep.StrictJudge(sample.texts, sample.source)
    systems = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dedupdb-short-en-") as tmp:
        chosen = {} if args.char_ngram is None else {"char_ngram": args.char_ngram}
        systems["dedupdb"] = ep.dedupdb_pairs(sample.texts, Path(tmp), args.threshold, **chosen)[0]
    ep.log(f"dedupdb: {len(systems['dedupdb']):,} pairs ({time.perf_counter() - started:.1f}s)")
    if not args.no_datasketch:
        started = time.perf_counter()
        systems["ds:char5"] = ds_char5_pairs(sample.texts)
        ep.log(f"ds:char5: {len(systems['ds:char5']):,} pairs ({time.perf_counter() - started:.1f}s)")
        started = time.perf_counter()
        systems["ds:word"] = ep.datasketch_pairs(sample.texts, "en", "ds:word")
        ep.log(f"ds:word: {len(systems['ds:word']):,} pairs ({time.perf_counter() - started:.1f}s)")
    results = {}
    for system, pairs in systems.items():
        found = defaultdict(lambda: [0, 0])  # (level, band) -> [found, variants]
        marked = defaultdict(int)  # (level, band) -> variants found as pairs dedupdb marks as templates
        misses = defaultdict(list)
        for vid, lvl in sample.level.items():
            original = sample.source[vid]
            hit = ep.ordered(vid, original) in pairs
            exactly_five = [(lvl, "=5")] if len(sample.texts[original].split()) == 5 else []
            for key in ((lvl, bands[original]), (lvl, "all"), *exactly_five):
                found[key][0] += hit
                found[key][1] += 1
                marked[key] += bool(hit and pairs[ep.ordered(vid, original)].get("template"))
            if not hit:
                misses[lvl].append((sample.texts[original], sample.texts[vid]))
        false = [p for p in pairs if judge.is_false(*p)]
        sources = {ep.ordered(judge.source.get(a, a), judge.source.get(b, b)) for a, b in pairs}
        framed = {p for p in sources if p[0] != p[1] and is_template(sample.texts[p[0]], sample.texts[p[1]])}
        templates = [p for p in false if ep.ordered(judge.source.get(p[0], p[0]), judge.source.get(p[1], p[1])) in framed]
        template_pairs = sum(1 for p in pairs.values() if p.get("template"))
        marked_false = sum(1 for p in false if pairs[p].get("template"))
        results[system] = {"recall": {f"{lvl}|{band}": f / n for (lvl, band), (f, n) in found.items()},
                           "marked": {f"{lvl}|{band}": v for (lvl, band), v in marked.items()},
                           "template_pairs": template_pairs, "marked_false": marked_false,
                           "rate_apart": (len(false) - marked_false) / max(1, len(pairs) - template_pairs),
                           "found": {f"{lvl}|{band}": v for (lvl, band), v in found.items()},
                           "pairs": len(pairs), "false": len(false), "templates": len(templates),
                           "template_sources": len(framed), "sources": sum(1 for a, b in sources if a != b),
                           "rate": len(false) / max(1, len(pairs)),
                           "misses": {lvl: m[: args.misses] for lvl, m in misses.items()},
                           "false_examples": [(sample.texts[judge.source.get(a, a)], sample.texts[judge.source.get(b, b)])
                                              for a, b in false[: args.misses]]}
    return results


def pooled(result: dict, levels: tuple[str, ...], band: str) -> float:
    found = sum(result["found"].get(f"{lvl}|{band}", [0, 0])[0] for lvl in levels)
    total = sum(result["found"].get(f"{lvl}|{band}", [0, 0])[1] for lvl in levels)
    return found / total if total else float("nan")


def report(results: dict, args) -> None:
    columns = [("format", ("format",)), ("typo", ("typo",)), ("tag", ("tag",)), ("light", ("typo", "tag")),
               ("word", ("word",)), ("heavy", ("heavy",))]
    rows = []
    for system, r in results.items():
        for _, _, band in (BANDS[0], (5, 5, "=5"), *BANDS[1:], (0, 0, "all")):
            cells = [f"{pooled(r, levels, band):.3f}" for _, levels in columns]
            extra = ([f"{r['pairs']:,}", f"{r['false']:,}", f"{r['templates']:,}", f"{100 * r['rate']:.2f}",
                      f"{r['template_pairs']:,}/{r['marked_false']:,}", f"{100 * r['rate_apart']:.2f}",
                      f"{r['template_sources']}/{r['sources']}"] if band == "all" else ["", "", "", "", "", "", ""])
            rows.append([system, band, *cells, *extra])
    ep.print_table("Short English texts: recall per edit level and length band (words of the original); strict "
                   "false pairs over all pairs (templ = of those, texts differing only in numbers or one slot; "
                   "frames = pairs of distinct source texts that are such templates, false or not / all such pairs; "
                   "marked = pairs dedupdb marks as templates / of them false; apart = the rate without them)",
                   ["system", "band", *(name for name, _ in columns), "pairs", "false", "templ", "rate%", "marked",
                    "apart", "frames"],
                   rows)
    for system, r in results.items():
        if r["template_pairs"]:
            print(f"{system}: variants found as pairs marked template, by level (all bands; =5): " + ", ".join(
                f"{lvl} {r['marked'].get(f'{lvl}|all', 0)}; {r['marked'].get(f'{lvl}|=5', 0)}" for lvl in LEVELS))
    if args.misses:
        for system, r in results.items():
            for lvl, missed in r["misses"].items():
                print(f"\n{system} missed ({lvl}):")
                for original, variant in missed:
                    print(f"  {ep.snippet(original, 90)!r}\n    -> {ep.snippet(variant, 90)!r}")
            print(f"\n{system} false pairs:")
            for a, b in r["false_examples"]:
                print(f"  {ep.snippet(a, 90)!r}\n    ~ {ep.snippet(b, 90)!r}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--originals", type=int, default=600, help="originals per length band")
    p.add_argument("--distractors", type=int, default=12000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threshold", type=float, default=None, help="dedupdb threshold (default: the library's)")
    p.add_argument("--char-ngram", type=int, default=None, help="dedupdb character n-grams (0: words)")
    p.add_argument("--no-datasketch", action="store_true")
    p.add_argument("--misses", type=int, default=0, help="print this many missed variants and false pairs")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="150 originals a band and 3,000 distractors")
    args = p.parse_args(argv)
    if args.quick:
        args.originals, args.distractors = min(args.originals, 150), min(args.distractors, 3000)
    print(f"dedupdb {ep.dedupdb.__version__} ({ep.revision()}), threshold {args.threshold or 'default'}; "
          f"{args.originals} originals a band + {args.distractors} distractors, seed {args.seed}")
    started = time.perf_counter()
    results = run(args)
    report(results, args)
    print(f"\ndone in {time.perf_counter() - started:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
