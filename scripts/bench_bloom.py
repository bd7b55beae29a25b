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

2. Speed and memory of the exact stage. The 500,000 records repeated 5x
   (2,500,000), in two jobs:
   2.1 a dedup pass (keep each record not seen before) through
     (a) the Bloom stage alone: xxh3_128 of the UTF-8 text, dict dedup per
         batch, add_new (numpy), with run_filter's default sizing (capacity
         10,000,000 at 0.001) and with m = 2e7 bits, k optimal for n;
     (b) the full run_filter lines pipeline (reading, normalization, Bloom,
         writing) from a temporary file under /tmp to an in-memory sink;
     (c) a pure-Python dict-of-dicts character trie;
     (d) a Python set of xxh3_128 hashes (and a set of the strings themselves).
   2.2 membership, the job a static trie can do: the structure is built from
     the first half of the records, then the second half is looked up in it
     (every text there was seen), then texts of the corpora that are in
     neither half (a find is a false positive): the Bloom filter (both sizes;
     BloomFilter.may_contain), marisa-trie (static: marisa_trie.Trie of the
     first half's records), the dict trie and both sets.
   All but (b) take the raw strings already in memory (decoded from the
   same file, so every record is its own str object); only (b) normalizes.
   Every run is in a fresh fork of this process (the same heap to start from),
   timed in one child (wall and CPU seconds; peak RSS above the start, via
   /proc/self/clear_refs, and RSS kept at the end after freed heap is given
   back with malloc_trim; the structure's own size), and run again in a second
   child under tracemalloc (its peak; memory a C++ library allocates itself,
   as marisa-trie does, is not traced, so RSS is the figure to compare there).
   The published figures (Gao & Li 2014: Bloom filter 3.5 s, trie 14.4 s) stand beside ours.

Usage:
    python scripts/bench_bloom.py            # full run (~10 minutes; marisa-trie from the bench extra)
    python scripts/bench_bloom.py --quick    # 50,000 records, speed on 250,000
    python scripts/bench_bloom.py --skip-speed --distinct-frac 1   # all-distinct variant
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import gzip
import importlib.metadata
import io
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import xxhash

from dedupdb.sketch.bloom import BloomFilter
from dedupdb.text.normalize import normalize
from dedupdb.ops.streamfilter import FilterOptions, run_filter

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"
TITLES = "zh_thucnews_titles_devtest.jsonl.gz"
REVIEWS = "zh_sophonplus_reviews.jsonl.gz"
MASK64 = (1 << 64) - 1
SIZES = [10_000, 50_000, 160_000, 500_000, 1_000_000, 5_000_000, 20_000_000]
# (records, bits) -> published accuracy: Gao Xiang and Li Bing, "Research on method to detect reduplicative Chinese
# short texts" (中文短文本去重方法研究), Computer Engineering and Applications 50(16):192-197, 2014
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


def _halves(digests: list[int]) -> tuple[np.ndarray, np.ndarray]:
    h1 = np.fromiter((d & MASK64 for d in digests), np.uint64, len(digests))
    h2 = np.fromiter((d >> 64 for d in digests), np.uint64, len(digests))
    return h1, h2


def bloom_stage(records: list[str], bloom: BloomFilter, batch: int = 8192) -> int:
    """dedupdb filter's exact stage without reading or normalization: hash, dict dedup per batch, add_new."""
    kept = 0
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        digests = list(map(xxhash.xxh3_128_intdigest, map(str.encode, chunk)))
        first: dict[int, int] = {}
        for i, d in enumerate(digests):
            first.setdefault(d, i)
        kept += int((~bloom.add_new(*_halves(list(first)))).sum())
    return kept


def bloom_lookup(records: list[str], bloom: BloomFilter, batch: int = 8192) -> int:
    """Records the filter may hold (BloomFilter.may_contain), a batch at a time; adds nothing."""
    found = 0
    for start in range(0, len(records), batch):
        digests = list(map(xxhash.xxh3_128_intdigest, map(str.encode, records[start:start + batch])))
        found += int(bloom.may_contain(*_halves(digests)).sum())
    return found


_END = None  # key None marks the end of a text in the dict-of-dicts trie (never a character)


def trie_dedup(records: list[str], root: dict | None = None) -> tuple[int, int, dict]:
    """Character trie as nested dicts; a record is new when its path has no end marker yet.
    Returns (kept, nodes made, root)."""
    root = {} if root is None else root
    kept = nodes = 0
    for text in records:
        node = root
        for ch in text:
            child = node.get(ch)
            if child is None:
                child = node[ch] = {}
                nodes += 1
            node = child
        if _END not in node:
            node[_END] = True
            kept += 1
    return kept, nodes, root


def trie_lookup(records: list[str], root: dict) -> int:
    found = 0
    for text in records:
        node = root
        for ch in text:
            node = node.get(ch)
            if node is None:
                break
        else:
            found += _END in node
    return found


def set_of_hashes(records: list[str], seen: set[int] | None = None) -> tuple[int, set[int]]:
    seen = set() if seen is None else seen
    kept = 0
    h = xxhash.xxh3_128_intdigest
    for text in records:
        d = h(text.encode())
        if d not in seen:
            seen.add(d)
            kept += 1
    return kept, seen


def set_of_strings(records: list[str], seen: set[str] | None = None) -> tuple[int, set[str]]:
    seen = set() if seen is None else seen
    kept = 0
    for text in records:
        if text not in seen:
            seen.add(text)
            kept += 1
    return kept, seen


def hashes_lookup(records: list[str], seen: set[int]) -> int:
    h = xxhash.xxh3_128_intdigest
    return sum(1 for text in records if h(text.encode()) in seen)


def strings_lookup(records: list[str], seen: set[str]) -> int:
    return sum(1 for text in records if text in seen)


def marisa_lookup(records: list[str], trie) -> int:
    return sum(1 for text in records if text in trie)


# --- own sizes: what the structure itself holds, in bytes


def set_bytes(seen: set) -> int:
    """The set's table plus every object it keeps alive (for a set of strings, the kept records themselves)."""
    return sys.getsizeof(seen) + sum(map(sys.getsizeof, seen))


def dict_trie_bytes(root: dict) -> int:
    """Every dict node of the trie (the one-character keys are interned by CPython and not counted)."""
    total, stack = 0, [root]
    while stack:
        node = stack.pop()
        total += sys.getsizeof(node)
        stack.extend(child for key, child in node.items() if key is not _END)
    return total


# --- measuring: each run in a forked child, so every structure starts from the same heap


def _proc_status_kib(*fields: str) -> dict[str, int] | None:
    try:
        with open("/proc/self/status") as fh:
            values = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in fh) if k in fields}
        return values if len(values) == len(fields) else None
    except OSError:
        return None


def _reset_peak_rss() -> bool:
    """Return freed heap to the system and restart the peak-RSS count (Linux: clear_refs 5)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _in_child(fn) -> dict:
    """fn() in a forked copy of this process; its JSON-able result comes back through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        code = 0
        try:
            payload = json.dumps(fn()).encode()
        except BaseException as exc:  # noqa: BLE001 - reported by the parent
            payload, code = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode(), 1
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as src:
        data = src.read()
    os.waitpid(pid, 0)
    result = json.loads(data or b'{"error": "the child died"}')
    if "error" in result:
        sys.exit(f"measurement failed: {result['error']}")
    return result


def measure(run, size_of) -> dict:
    """run() -> (figures, structure). Timed in one child (wall and CPU seconds, peak and retained RSS above the
    start, the structure's own bytes by size_of), then run again in a second child under tracemalloc (peak of the
    Python allocations: numpy's are traced, memory a C++ library allocates itself, as marisa-trie does, is not)."""

    def timed_run() -> dict:
        gc.collect()
        tracked = _reset_peak_rss()
        start = _proc_status_kib("VmRSS")
        c0, t0 = time.process_time(), time.perf_counter()
        figures, structure = run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = _proc_status_kib("VmHWM")
        _reset_peak_rss()  # freed heap back to the system: what stays resident is what the run keeps
        now = _proc_status_kib("VmRSS")
        rss = {}
        if start and now and peak:
            rss = {"rss_retained": (now["VmRSS"] - start["VmRSS"]) * 1024,
                   "rss_peak": (peak["VmHWM"] - start["VmRSS"]) * 1024 if tracked else None}
        return {**figures, "wall": wall, "cpu": cpu, "own_bytes": size_of(structure), **rss}

    def traced_run() -> dict:
        gc.collect()
        tracemalloc.start()
        run()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return {"traced_peak": peak}

    return {**_in_child(timed_run), **_in_child(traced_run)}


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.1f}"


def memory_cells(m: dict) -> str:
    return (f"{_mib(m['own_bytes']):>8} {_mib(m.get('traced_peak')):>8} {_mib(m.get('rss_peak')):>8} "
            f"{_mib(m.get('rss_retained')):>8}")


MEMORY_HEAD = f"{'own MiB':>8} {'traced':>8} {'RSS pk':>8} {'RSS kept':>8}"


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
        opts = FilterOptions()
        print(f"\n== speed and memory: {total:,} records ({len(base):,} x{repeat}), {n_distinct:,} distinct, "
              f"{size / 2**20:.0f} MiB, the records in memory as str objects before any run. Each run in a fresh "
              "fork of this process: wall s, CPU s, records per CPU s (one core); own MiB = the structure's own "
              "size (Bloom: its bit array; set: its table and the objects it keeps, for strings the kept records; "
              "dict trie: its dicts; marisa-trie: its serialized size); traced = tracemalloc peak of the run "
              "(separate run); RSS pk = peak resident memory above the start, RSS kept = resident above the start at "
              "the end with the structure alive, after freed heap is returned to the system")
        print("\n-- 1. dedup pass: keep each record not seen before, one stream")
        print(f"  {'':<52} {'kept':>12} {'wall':>9} {'CPU':>13} {'rec/CPU s':>15}  {MEMORY_HEAD}  published")

        def row(name: str, m: dict, note: str = "") -> None:
            print(f"  {name:<52} kept {m['kept']:>7,} {m['wall']:>7.2f} s {m['cpu']:>7.2f} cpu-s "
                  f"{total / m['cpu']:>11,.0f} rec/s  {memory_cells(m)}  {note}", flush=True)

        def bloom_pass(bits: int | None, hashes: int | None):
            def run():
                bloom = (BloomFilter(opts.capacity, opts.error_rate) if bits is None
                         else BloomFilter(n_distinct, bits=bits, hashes=hashes))
                return {"kept": bloom_stage(records, bloom), "bits": bloom.bits, "k": bloom.hashes}, bloom
            return run

        m = measure(bloom_pass(None, None), lambda b: b._array.nbytes)
        row(f"(a) Bloom stage, m={m['bits']:,} k={m['k']}", m, "3.5 s")
        k = optimal_k(20_000_000, n_distinct)
        m = measure(bloom_pass(20_000_000, k), lambda b: b._array.nbytes)
        row(f"(a') Bloom stage, m=20,000,000 k={k}", m)

        def pipeline():
            with open(path, "rb") as src:
                return {"kept": run_filter(src, NullText(), opts).kept}, None

        m = measure(pipeline, lambda _: None)
        row("(b) run_filter lines (read+normalize+Bloom+write)", m)
    finally:
        os.unlink(path)

    def dict_trie_pass():
        kept, nodes, root = trie_dedup(records)
        return {"kept": kept, "nodes": nodes}, root

    m = measure(dict_trie_pass, dict_trie_bytes)
    row("(c) dict-of-dicts character trie", m, f"14.4 s; {m['nodes']:,} nodes")
    def set_pass(dedup):
        def run():
            kept, seen = dedup(records)
            return {"kept": kept}, seen
        return run

    m = measure(set_pass(set_of_hashes), set_bytes)
    row("(d) set of xxh3_128 hashes", m)
    m = measure(set_pass(set_of_strings), set_bytes)
    row("(d') set of the strings", m)
    print("  (marisa-trie is static, built once from its keys: it cannot take a record at a time, so it is "
          "measured in 2 below)")
    membership(records, unseen_texts(pool, titles, reviews, n_distinct, rng), n_distinct, opts)


def unseen_texts(pool: list[str], titles: list[str], reviews: list[str], count: int, rng) -> list[str]:
    """Up to count texts of the corpora that are not in the pool (distinct after normalization), in random order."""
    taken = {normalize(t) for t in pool}
    candidates = titles + reviews
    out = []
    for i in rng.permutation(len(candidates)).tolist():
        n = normalize(candidates[i])
        if n not in taken:
            taken.add(n)
            out.append(candidates[i])
            if len(out) == count:
                break
    return out


def membership(records: list[str], unseen: list[str], n_distinct: int, opts: FilterOptions) -> None:
    """2. The reference built from the first half of the records, then every record of the second half looked
    up in it (all were seen: each text occurs in both halves), then texts that are in neither half (none may be
    found: a Bloom filter's finds there are its false positives): the job a static trie can do."""
    half = len(records) // 2
    first, second = records[:half], records[half:]
    print(f"\n-- 2. membership: build from the first {half:,} records; look up the other {len(second):,} (seen: "
          f"every text is in the first half too) and {len(unseen):,} texts never seen (found = false positives); "
          "build and lookups in CPU seconds")
    print(f"  {'':<40} {'build':>9} {'seen':>9} {'found':>9} {'unseen':>9} {'found':>6} {'lookups/CPU s':>13}  "
          f"{MEMORY_HEAD}")

    def row(name: str, m: dict) -> None:
        rate = (len(second) + len(unseen)) / (m["lookup_seen"] + m["lookup_unseen"])
        print(f"  {name:<40} {m['build']:>7.2f} s {m['lookup_seen']:>7.2f} s {m['found_seen']:>9,} "
              f"{m['lookup_unseen']:>7.2f} s {m['found_unseen']:>6,} {rate:>11,.0f} /s  {memory_cells(m)}", flush=True)

    def two_phases(build, lookup):
        def run():
            c0 = time.process_time()
            structure = build(first)
            c1 = time.process_time()
            found_seen = lookup(second, structure)
            c2 = time.process_time()
            found_unseen = lookup(unseen, structure)
            return {"build": c1 - c0, "lookup_seen": c2 - c1, "found_seen": found_seen,
                    "lookup_unseen": time.process_time() - c2, "found_unseen": found_unseen}, structure
        return run

    def bloom_build(bits: int | None):
        def build(keys: list[str]) -> BloomFilter:
            bloom = (BloomFilter(opts.capacity, opts.error_rate) if bits is None
                     else BloomFilter(n_distinct, bits=bits, hashes=optimal_k(bits, n_distinct)))
            bloom_stage(keys, bloom)
            return bloom
        return build

    import marisa_trie

    m = measure(two_phases(bloom_build(None), bloom_lookup), lambda b: b._array.nbytes)
    row("Bloom filter, run_filter's default size", m)
    m = measure(two_phases(bloom_build(20_000_000), bloom_lookup), lambda b: b._array.nbytes)
    row("Bloom filter, m=20,000,000", m)
    m = measure(two_phases(marisa_trie.Trie, marisa_lookup), lambda t: len(t.tobytes()))
    row(f"marisa-trie {importlib.metadata.version('marisa-trie')} (static)", m)
    m = measure(two_phases(lambda keys: trie_dedup(keys)[2], trie_lookup), dict_trie_bytes)
    row("dict-of-dicts character trie", m)
    m = measure(two_phases(lambda keys: set_of_hashes(keys)[1], hashes_lookup), set_bytes)
    row("set of xxh3_128 hashes", m)
    m = measure(two_phases(lambda keys: set_of_strings(keys)[1], strings_lookup), set_bytes)
    row("set of the strings", m)


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
        print("published (Gao & Li 2014, Chinese short-text dedup): 56% at 5e4 bits with 5e4 texts; "
              "90% at 1.6e5 bits and 100% at 2e7 bits with 5e5 texts")
    if not args.skip_speed:
        speed(args.records, n_main, args.repeat, np.random.default_rng(args.seed + 2), titles, reviews)


if __name__ == "__main__":
    main()
