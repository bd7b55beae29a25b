#!/usr/bin/env python
"""Bloom-filter accuracy against memory, and dedup speed, on Chinese short texts.

Reproduces the classic measurement from the Chinese short-text dedup literature
(Bloom filter vs. character trie) with dedupdb's BloomFilter:

1. Accuracy. 50,000 distinct short texts (distinct after dedupdb's normalize;
   newlines replaced by spaces; at most --max-chars characters) are drawn with a
   fixed seed, half from zh_thucnews_titles_devtest (as many as it has) and the
   rest from zh_sophonplus_reviews, each repeated exactly 10 times and shuffled:
   500,000 records, 10% distinct. For each bit-array size m the filter gets the
   optimal k = max(1, round(m / n ln 2)) for n = distinct count, and the records
   are streamed through it twice:
     strict   one record at a time, as the literature's filter works;
     batches  as `dedupdb filter` does it, --batch (8192) records at a time:
              each batch is deduplicated with a dict first (a repeat inside
              the batch is dropped, as in a stream), then BloomFilter.add_new
              sees the batch's first occurrences. Distinct items inside one
              batch do not see each other's bits (add_new checks before it
              sets), so batches make fewer false positives than strict.
   A record is decided correctly when it is kept if and only if it is its
   text's first occurrence in the stream.
     accuracy      fraction of records decided correctly
     kept/dist     fraction of distinct texts kept (1 - FP rate)
     FP            first occurrences wrongly dropped (a Bloom filter has no
                   false negatives, so these are the only errors: FN = 0)
     FP rate       FP / distinct texts (measured), beside the theory average
                   (1/n) sum_i (1 - exp(-k i / m))^k
   With 10% distinct, record accuracy cannot fall below 90%.
   The same is repeated for the smaller setting: 50,000 records, 5,000 distinct.

2. Speed. The 500,000 records repeated 5x (2,500,000) through
     (a) the Bloom stage alone: xxh3_128 of the UTF-8 text, dict dedup per
         batch, add_new (numpy), with run_filter's default sizing (capacity
         10,000,000 at 0.001) and with m = 2e7 bits, k optimal for n;
     (b) the full run_filter lines pipeline (reading, normalization, Bloom,
         writing) from a temporary file under /tmp to an in-memory sink;
     (c) a pure-Python dict-of-dicts character trie;
     (d) a Python set of xxh3_128 hashes (and a set of the strings themselves).
   (a), (c), (d) take the raw strings already in memory (decoded from the
   same file, so every record is its own str object); only (b) normalizes.

Usage:
    python scripts/bench_bloom.py            # full run (~2-4 minutes)
    python scripts/bench_bloom.py --quick    # 50,000 records, speed on 250,000
    python scripts/bench_bloom.py --skip-speed --distinct-frac 1   # all-distinct variant
"""

from __future__ import annotations

import argparse
import gc
import gzip
import io
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import xxhash

from dedupdb.bloom import BloomFilter
from dedupdb.normalize import normalize
from dedupdb.streamfilter import FilterOptions, run_filter

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"
TITLES = "zh_thucnews_titles_devtest.jsonl.gz"
REVIEWS = "zh_sophonplus_reviews.jsonl.gz"
MASK64 = (1 << 64) - 1
SIZES = [10_000, 50_000, 160_000, 500_000, 1_000_000, 5_000_000, 20_000_000]
# (records, bits) -> published accuracy
PUBLISHED = {(50_000, 50_000): "56%", (500_000, 160_000): "90%", (500_000, 20_000_000): "100%"}


def load_texts(name: str, max_chars: int) -> list[str]:
    out = []
    with gzip.open(EVAL_DIR / name, "rt", encoding="utf-8") as f:
        for line in f:
            text = " ".join(json.loads(line)["text"].splitlines()).strip()
            if text and len(text) <= max_chars:
                out.append(text)
    return out


def distinct_by_normalized(texts: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for t in texts:
        n = normalize(t)
        if n:
            seen.setdefault(n, t)
    return list(seen.values())


def draw_pool(n_distinct: int, rng: np.random.Generator, titles: list[str], reviews: list[str]) -> list[str]:
    """n_distinct texts, distinct after normalization across both corpora: half titles (if there are enough)."""
    t_idx = rng.permutation(len(titles))
    r_idx = rng.permutation(len(reviews))
    pool: list[str] = []
    seen: set[str] = set()
    for source, order, want in ((titles, t_idx, n_distinct // 2), (reviews, r_idx, n_distinct)):
        for i in order:
            if len(pool) >= want:
                break
            n = normalize(source[i])
            if n not in seen:
                seen.add(n)
                pool.append(source[i])
    if len(pool) < n_distinct:
        sys.exit(f"only {len(pool)} distinct texts available, {n_distinct} asked for")
    return pool


def digests_of(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    ds = [xxhash.xxh3_128_intdigest(normalize(t).encode()) for t in texts]
    h1 = np.fromiter((d & MASK64 for d in ds), np.uint64, len(ds))
    h2 = np.fromiter((d >> 64 for d in ds), np.uint64, len(ds))
    return h1, h2


def optimal_k(bits: int, n: int) -> int:
    return max(1, round(bits / n * math.log(2)))


def theory_fp(bits: int, k: int, n: int) -> float:
    i = np.arange(n, dtype=np.float64)
    return float(np.mean((1.0 - np.exp(-k * i / bits)) ** k))


def simulate_strict(order: np.ndarray, h1: np.ndarray, h2: np.ndarray, n_distinct: int, bits: int, k: int):
    """One record at a time: FP mask over the distinct texts in order of first occurrence.

    Only first occurrences are offered to add_new, one per call. That is exactly a one-record-at-a-time stream:
    a Bloom filter has no false negatives, so a repeat is always reported seen and never changes the bits
    (its own bits were set when it was kept, or were all set already when it was wrongly dropped)."""
    bloom = BloomFilter(n_distinct, bits=bits, hashes=k)
    fp = np.zeros(len(order), dtype=bool)
    for j, item in enumerate(order.tolist()):
        fp[j] = bloom.add_new(h1[item:item + 1], h2[item:item + 1])[0]
    return fp, bloom


def simulate_batched(stream: np.ndarray, h1: np.ndarray, h2: np.ndarray, n_distinct: int, bits: int, k: int,
                     batch: int) -> np.ndarray:
    """As `dedupdb filter` does it: keep mask of the records, a batch at a time (dict dedup, then add_new)."""
    bloom = BloomFilter(n_distinct, bits=bits, hashes=k)
    kept = np.zeros(len(stream), dtype=bool)
    for start in range(0, len(stream), batch):
        chunk = stream[start:start + batch].tolist()
        first: dict[int, int] = {}
        for pos, item in enumerate(chunk):
            first.setdefault(item, pos)  # later repeats inside the batch are dropped, as in a stream
        items = np.fromiter(first.keys(), np.int64, len(first))
        positions = np.fromiter(first.values(), np.int64, len(first))
        seen = bloom.add_new(h1[items], h2[items])
        kept[start + positions[~seen]] = True
    return kept


def accuracy_table(label: str, n_records: int, n_distinct: int, rng, titles, reviews, batch: int, sizes) -> list[str]:
    pool = draw_pool(n_distinct, rng, titles, reviews)
    copies = n_records // n_distinct
    stream = rng.permutation(np.repeat(np.arange(n_distinct), copies))
    h1, h2 = digests_of(pool)
    first_pos = np.unique(stream, return_index=True)[1]
    is_first = np.zeros(len(stream), dtype=bool)
    is_first[first_pos] = True
    order = stream[np.sort(first_pos)]  # distinct texts in order of first occurrence
    lengths = np.array([len(t) for t in pool])
    print(f"\n== {label}: {len(stream):,} records, {n_distinct:,} distinct ({n_distinct / len(stream):.0%}), "
          f"each x{copies}; chars/text median {np.median(lengths):.0f}, mean {lengths.mean():.1f}")
    print(f"{'':>35}{'-- strict one-at-a-time stream --':^42}{'-- batches of ' + str(batch) + ' --':^20}")
    head = (f"{'bits m':>11} {'KiB':>7} {'k':>6} {'fill':>6}  {'accuracy':>9} {'kept/dist':>9} {'FP':>6} "
            f"{'FP rate':>7} {'theory':>7}  {'accuracy':>9} {'FP':>6} {'FN':>3}  published")
    print(head)
    rows = []
    for bits in sizes:
        k = optimal_k(bits, n_distinct)
        fp_mask, bloom = simulate_strict(order, h1, h2, n_distinct, bits, k)
        fp = int(fp_mask.sum())
        kept = simulate_batched(stream, h1, h2, n_distinct, bits, k, batch)
        b_fp = int((is_first & ~kept).sum())
        b_fn = int((~is_first & kept).sum())
        pub = PUBLISHED.get((len(stream), bits), "")
        row = (f"{bits:>11,} {bits / 8192:>7.1f} {k:>6} {bloom.fill_ratio:>6.3f}  {1 - fp / len(stream):>9.3%} "
               f"{1 - fp / n_distinct:>9.2%} {fp:>6,} {fp / n_distinct:>7.4f} {theory_fp(bits, k, n_distinct):>7.4f}  "
               f"{(kept == is_first).mean():>9.3%} {b_fp:>6,} {b_fn:>3}  {pub}")
        print(row, flush=True)
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------- speed


class NullText(io.TextIOBase):
    def __init__(self) -> None:
        self.chars = 0

    def write(self, s: str) -> int:
        self.chars += len(s)
        return len(s)


def bloom_stage(records: list[str], bloom: BloomFilter, batch: int = 8192) -> int:
    """dedupdb filter's exact stage without reading or normalization: hash, dict dedup per batch, add_new."""
    kept = 0
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        digests = list(map(xxhash.xxh3_128_intdigest, map(str.encode, chunk)))
        first: dict[int, int] = {}
        for i, d in enumerate(digests):
            first.setdefault(d, i)
        firsts = list(first)
        h1 = np.fromiter((d & MASK64 for d in firsts), np.uint64, len(firsts))
        h2 = np.fromiter((d >> 64 for d in firsts), np.uint64, len(firsts))
        kept += int((~bloom.add_new(h1, h2)).sum())
    return kept


def trie_dedup(records: list[str]) -> tuple[int, int]:
    """Character trie as nested dicts; a record is new when its path has no end marker yet."""
    root: dict = {}
    end = None  # key None marks the end of a text (never a character)
    kept = nodes = 0
    for text in records:
        node = root
        for ch in text:
            child = node.get(ch)
            if child is None:
                child = node[ch] = {}
                nodes += 1
            node = child
        if end not in node:
            node[end] = True
            kept += 1
    return kept, nodes


def set_of_hashes(records: list[str]) -> int:
    seen: set[int] = set()
    kept = 0
    h = xxhash.xxh3_128_intdigest
    for text in records:
        d = h(text.encode())
        if d not in seen:
            seen.add(d)
            kept += 1
    return kept


def set_of_strings(records: list[str]) -> int:
    seen: set[str] = set()
    kept = 0
    for text in records:
        if text not in seen:
            seen.add(text)
            kept += 1
    return kept


def timed(fn, *args):
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0, time.process_time() - c0


def speed(n_records: int, n_distinct: int, repeat: int, rng, titles, reviews) -> None:
    pool = draw_pool(n_distinct, rng, titles, reviews)
    base = rng.permutation(np.repeat(np.arange(n_distinct), n_records // n_distinct))
    stream = np.tile(base, repeat)
    total = len(stream)
    with tempfile.NamedTemporaryFile("wb", prefix="bench_bloom_", suffix=".txt", dir="/tmp", delete=False) as f:
        path = f.name
        ids = stream.tolist()
        for start in range(0, total, 100_000):
            f.write(("\n".join(pool[i] for i in ids[start:start + 100_000]) + "\n").encode())
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            records = f.read().decode().split("\n")[:-1]  # fresh str objects, as a reader makes them
        assert len(records) == total
        print(f"\n== speed: {total:,} records ({len(base):,} x{repeat}), {n_distinct:,} distinct, "
              f"{size / 2**20:.0f} MiB; wall s, CPU s, records per CPU s (one core)")
        opts = FilterOptions()

        def row(name: str, kept: int, wall: float, cpu: float, note: str = "") -> None:
            print(f"  {name:<52} kept {kept:>7,} {wall:>7.2f} s {cpu:>7.2f} cpu-s {total / cpu:>11,.0f} rec/s  {note}",
                  flush=True)

        bloom = BloomFilter(opts.capacity, opts.error_rate)
        kept, wall, cpu = timed(bloom_stage, records, bloom)
        row(f"(a) Bloom stage, m={bloom.bits:,} k={bloom.hashes}", kept, wall, cpu, "published 3.5 s")
        k = optimal_k(20_000_000, n_distinct)
        bloom = BloomFilter(n_distinct, bits=20_000_000, hashes=k)
        kept, wall, cpu = timed(bloom_stage, records, bloom)
        row(f"(a') Bloom stage, m=20,000,000 k={k}", kept, wall, cpu)

        def pipeline() -> int:
            with open(path, "rb") as src:
                return run_filter(src, NullText(), opts).kept

        kept, wall, cpu = timed(pipeline)
        row("(b) run_filter lines (read+normalize+Bloom+write)", kept, wall, cpu)
    finally:
        os.unlink(path)
    (kept, nodes), wall, cpu = timed(trie_dedup, records)
    row("(c) dict-of-dicts character trie", kept, wall, cpu, f"published 14.4 s; {nodes:,} nodes")
    kept, wall, cpu = timed(set_of_hashes, records)
    row("(d) set of xxh3_128 hashes", kept, wall, cpu)
    kept, wall, cpu = timed(set_of_strings, records)
    row("(d') set of the strings", kept, wall, cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--records", type=int, default=500_000, help="records in the main setting (default 500,000)")
    ap.add_argument("--small-records", type=int, default=50_000, help="records in the small setting (default 50,000)")
    ap.add_argument("--distinct-frac", type=float, default=0.1, help="distinct texts / records (default 0.1)")
    ap.add_argument("--sizes", type=lambda s: [int(float(x)) for x in s.split(",")], default=SIZES,
                    help="comma-separated bit-array sizes (default 1e4,5e4,1.6e5,5e5,1e6,5e6,2e7)")
    ap.add_argument("--batch", type=int, default=8192, help="records per add_new batch in the batched run (default 8192, as dedupdb filter)")
    ap.add_argument("--repeat", type=int, default=5, help="speed: the main stream repeated this often (default 5)")
    ap.add_argument("--max-chars", type=int, default=140, help="short texts only: at most this many chars (140)")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--skip-speed", action="store_true", help="accuracy tables only")
    ap.add_argument("--skip-accuracy", action="store_true", help="speed table only")
    ap.add_argument("--quick", action="store_true", help="50,000 / 5,000 records, speed on 250,000")
    args = ap.parse_args()
    if args.quick:
        args.records, args.small_records = 50_000, 5_000

    t0 = time.perf_counter()
    titles = distinct_by_normalized(load_texts(TITLES, args.max_chars))
    reviews = distinct_by_normalized(load_texts(REVIEWS, args.max_chars))
    print(f"pool: {len(titles):,} distinct titles, {len(reviews):,} distinct reviews of <= {args.max_chars} chars "
          f"(loaded in {time.perf_counter() - t0:.1f} s); seed {args.seed}")

    n_main = max(1, round(args.records * args.distinct_frac))
    n_small = max(1, round(args.small_records * args.distinct_frac))
    if not args.skip_accuracy:
        accuracy_table("main", args.records, n_main, np.random.default_rng(args.seed), titles, reviews,
                       args.batch, args.sizes)
        accuracy_table("small", args.small_records, n_small, np.random.default_rng(args.seed + 1), titles, reviews,
                       args.batch, args.sizes)
        print("published (Chinese short-text dedup literature): 56% at 5e4 bits with 5e4 texts; "
              "90% at 1.6e5 bits and 100% at 2e7 bits with 5e5 texts")
    if not args.skip_speed:
        speed(args.records, n_main, args.repeat, np.random.default_rng(args.seed + 2), titles, reviews)


if __name__ == "__main__":
    main()
