#!/usr/bin/env python
"""Benchmark the batch query, `dedupdb query --records FILE`, against the add of the same records onto the same
store, and rensa's in-memory LSH queried with the same records.

The store is bench_query.py's: N documents synthesized from the evaluation corpora (every corpus text once, up to
N/4 of them, then edited variants), built through the public API (reused with --db). The records are M texts,
half edited versions of stored documents, half corpus texts never stored (bench_query.py's queries), written as
one JSON Lines file. Then, in the same run, each as a user runs it, in a process of its own (start-up included,
the whole process tree's peak RSS sampled every 50 ms):
  * `dedupdb query --records R.jsonl --id-field id --format json` on the store, output to /dev/null;
  * `dedupdb add R.jsonl --records jsonl --id-field id` on a copy of the same store;
  * `dedupdb query --records` of the short Chinese reviews (zh_sophonplus_reviews.jsonl.gz, the first --zh-n);
  * in this process, Database.query_many over --library-n of the records against as many Database.query calls:
    what answering a batch together saves;
  * rensa 0.5: RMinHashLSH of the store's texts (word bigrams, 256 permutations), built, then queried with the
    records (candidates only: rensa verifies nothing), as a peer.

Then --pairs more times (3 by default), alternately and unwatched: the batch query, then the add onto a fresh
copy of the store; the ratio of each pair and their median.

Usage:
    python scripts/bench_query_many.py --n 100000 --records 20000
    python scripts/bench_query_many.py --n 400000 --db /tmp/bench-400k.db --records 20000 --zh-n 20000
"""

from __future__ import annotations

import argparse
import atexit
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))

import bench_add  # noqa: E402  (scripts/ is no package: its neighbours are imported by path)
import bench_query  # noqa: E402

import dedupdb  # noqa: E402
from dedupdb.errors import InputError  # noqa: E402

EVAL_DIR = bench_query.EVAL_DIR
log = bench_query.log


def dedupdb_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dedupdb", *args]


def copy_store(source: Path, target: Path) -> None:
    with dedupdb.open(source, create=False) as db:  # the WAL folded in: one file holds the whole store
        db.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copyfile(source, target)


def library_comparison(db_path: Path, texts: list[str]) -> dict:
    """query_many of the texts against a query() each, on one open store, after a warm-up of both."""
    with dedupdb.open(db_path, create=False) as db:
        warm = texts[:200]
        list(db.query_many(warm, workers=0))
        for text in warm:
            try:
                db.query(text)
            except InputError:
                pass
        started = time.perf_counter()
        many = list(db.query_many(texts, workers=0))
        many_seconds = time.perf_counter() - started
        started = time.perf_counter()
        same = 0
        for text, result in zip(texts, many):
            try:
                hits = db.query(text)
            except InputError:
                hits = []
            same += hits == result.hits
        single_seconds = time.perf_counter() - started
    return {"n": len(texts), "many": many_seconds, "single": single_seconds, "same": same}


def bench_rensa(store_texts: list[str], queries: list[str]) -> dict:
    from rensa import RMinHash, RMinHashLSH

    from dedupdb.index.lsh import optimal_banding

    perms = dedupdb.Settings().num_perm
    bands = perms // optimal_banding(dedupdb.Settings().threshold, perms).rows
    started = time.perf_counter()
    lsh = RMinHashLSH(threshold=0.5, num_perm=perms, num_bands=bands)
    for i, text in enumerate(store_texts):
        m = RMinHash(num_perm=perms, seed=42)
        m.update(bench_add.word_bigrams(text))
        lsh.insert(i, m)
    built = time.perf_counter() - started
    started = time.perf_counter()
    candidates = 0
    for text in queries:
        m = RMinHash(num_perm=perms, seed=42)
        m.update(bench_add.word_bigrams(text))
        candidates += len(lsh.query(m))
    return {"build": built, "query": time.perf_counter() - started, "candidates": candidates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="documents in the store")
    parser.add_argument("--db", type=Path, default=None, help="store to reuse (or build there and keep)")
    parser.add_argument("--records", type=int, default=20_000, help="records queried and added")
    parser.add_argument("--zh-n", type=int, default=20_000, help="Chinese reviews queried (0: none)")
    parser.add_argument("--library-n", type=int, default=3_000, help="texts of the query_many / query comparison")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=3,
                        help="timing pairs of the batch query and the add, unwatched, alternately (0: none)")
    parser.add_argument("--skip-peers", action="store_true")
    args = parser.parse_args()

    print(f"dedupdb {dedupdb.__version__} at commit {bench_query.version()}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores", flush=True)
    corpus = bench_query.Corpus(args.n, args.seed, holdout=args.records // 2 + 50)
    records = corpus.queries(args.records)
    tmpdir = Path(tempfile.mkdtemp(prefix="dedupdb-bench-query-many-"))
    atexit.register(shutil.rmtree, tmpdir, True)
    db_path = args.db or tmpdir / f"store-{args.n}.db"
    db, build_seconds = bench_query.open_or_build(db_path, corpus, list(range(args.n)),
                                                  db_path.with_name(db_path.name + ".shards"), f"store {args.n:,}")
    shutil.rmtree(db_path.with_name(db_path.name + ".shards"), ignore_errors=True)
    counts = db.store.counts()
    db.close()
    if build_seconds:
        log(f"store built in {build_seconds:.0f} s")

    path = tmpdir / "records.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i, (_, text, _) in enumerate(records):
            fh.write(json.dumps({"id": f"q{i}", "text": text}, ensure_ascii=False) + "\n")
    query_command = dedupdb_command("--db", str(db_path), "query", "--records", str(path), "--id-field", "id",
                                    "--format", "json")
    query = bench_add.run_measured(query_command, "query --records")
    copy = tmpdir / "copy.db"
    add_command = dedupdb_command("--db", str(copy), "add", str(path), "--records", "jsonl", "--id-field", "id")
    copy_store(db_path, copy)
    add = bench_add.run_measured(add_command, "add")
    # The runs above are watched (their memory sampled every 50 ms, which takes some of the machine's CPU); these
    # are not, each query beside an add made just after it, so that a slower minute of a shared machine slows both.
    pairs = []
    for _ in range(args.pairs):
        query_seconds = bench_add.unwatched_seconds(query_command, "query --records")
        copy_store(db_path, copy)
        pairs.append((query_seconds, bench_add.unwatched_seconds(add_command, "add")))
    zh = None
    if args.zh_n:
        zh_path = tmpdir / "zh.jsonl"
        with gzip.open(EVAL_DIR / "zh_sophonplus_reviews.jsonl.gz", "rt", encoding="utf-8") as src, \
                open(zh_path, "w", encoding="utf-8") as out:
            for i, line in enumerate(src):
                if i >= args.zh_n:
                    break
                out.write(line)
        zh = bench_add.run_measured(dedupdb_command("--db", str(db_path), "query", "--records", str(zh_path), "--id-field", "id",
                                          "--format", "json"), "query --records (Chinese reviews)")
    library = library_comparison(db_path, [t for _, t, _ in records[: args.library_n]])
    peer = None
    if not args.skip_peers:
        peer = bench_rensa([corpus.document(i)[0] for i in range(args.n)], [t for _, t, _ in records])

    mib = 2**20
    print(f"\nstore: {args.n:,} documents, {counts.get('contents', 0):,} distinct texts, "
          f"{bench_query.file_bytes(db_path) / mib:,.0f} MiB")
    print(f"records: {len(records):,} (half edited stored documents, half never stored), "
          f"{path.stat().st_size / mib:,.1f} MiB")
    print(f"{'command (own process, start-up included)':<58}{'seconds':>9}{'records/s':>11}{'peak RSS':>10}{'peak PSS':>10}")
    rows = [("dedupdb query --records R --format json", len(records), query),
            ("dedupdb add R (onto a copy of the same store)", len(records), add)]
    if zh:
        rows.append((f"dedupdb query --records (first {args.zh_n:,} Chinese reviews)", args.zh_n, zh))
    for name, n, m in rows:
        print(f"{name:<58}{m['seconds']:>9.1f}{n / m['seconds']:>11,.0f}{m['peak_rss'] / mib:>8,.0f} M"
              f"{m['peak_pss'] / mib:>8,.0f} M")
    print(f"query --records against add: {add['seconds'] / query['seconds']:.2f}x the add's throughput")
    if pairs:
        ratios = sorted(a / q for q, a in pairs)
        print("timing pairs, unwatched (query, then add): "
              + "; ".join(f"{q:.2f} s / {a:.2f} s = {a / q:.2f}x" for q, a in pairs))
        print(f"  query --records against add, the median of {len(pairs)} pairs: {ratios[len(ratios) // 2]:.2f}x the add's "
              f"throughput (from {ratios[0]:.2f}x to {ratios[-1]:.2f}x)")
    print(f"library, {library['n']:,} texts on one open store: query_many {library['n'] / library['many']:,.0f}/s, "
          f"query() each {library['n'] / library['single']:,.0f}/s ({library['single'] / library['many']:.1f}x); "
          f"{library['same']:,} of {library['n']:,} answers identical")
    if peer:
        print(f"rensa RMinHashLSH (in memory, candidates only): built of {args.n:,} texts in {peer['build']:.1f} s, "
              f"queried {len(records) / peer['query']:,.0f} records/s ({peer['candidates']:,} candidates)")


if __name__ == "__main__":
    main()
