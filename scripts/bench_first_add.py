#!/usr/bin/env python
"""What the first `dedupdb add` after an install costs against the second.

The compiled sketching (fastsketch.py, numba) is compiled the first time a machine needs it and kept in numba's
cache (jit.py: the user cache folder, or $NUMBA_CACHE_DIR). A fresh install is simulated by fresh, empty cache
folders ($NUMBA_CACHE_DIR and $XDG_CACHE_HOME, where jieba's dictionary cache lives too), never by deleting the
user's own. Each run is `dedupdb add reviews.jsonl --records jsonl` in a process of its own, start-up included,
onto a new database, with the same cache folders: the first starts the compile (a process of its own, at the lowest
priority, which outlives it), the next --runs - 1 follow at once, and a last one follows once the compile has
finished, loading what it kept.

--corpus sentences takes short texts instead: the IMDB reviews cut into sentences of three words or more, in order
(as many as --records); --corpus zh-reviews the short Chinese reviews (zh_sophonplus_reviews.jsonl.gz).

Usage:
    python scripts/bench_first_add.py --records 20000
    python scripts/bench_first_add.py --records 100000 --runs 3
    python scripts/bench_first_add.py --corpus sentences --records 150000
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"


NAMES = {"reviews": "IMDB reviews", "sentences": "sentences of IMDB reviews", "zh-reviews": "Chinese reviews"}


def texts(corpus: str, count: int):
    """The first count texts of the corpus asked for."""
    name = "zh_sophonplus_reviews.jsonl.gz" if corpus == "zh-reviews" else "en_imdb_aclImdb.jsonl.gz"
    given = 0
    with gzip.open(EVAL_DIR / name, "rt", encoding="utf-8") as src:
        for line in src:
            text = json.loads(line)["text"]
            pieces = [text] if corpus != "sentences" else [
                s for s in re.split(r"(?<=[.!?])\s+", text.replace("<br />", " ")) if len(s.split()) >= 3]
            for piece in pieces:
                if given >= count:
                    return
                given += 1
                yield piece


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="texts added")
    parser.add_argument("--runs", type=int, default=2, help="adds in a row, the first onto fresh caches (then one more "
                        "once the compile has finished)")
    parser.add_argument("--workers", type=int, default=None, help="add --workers (default: add's own)")
    parser.add_argument("--corpus", choices=["reviews", "sentences", "zh-reviews"], default="reviews",
                        help="IMDB reviews, IMDB reviews' sentences, or Chinese reviews")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="dedupdb-bench-first-"))
    try:
        corpus = work / "reviews.jsonl"
        with open(corpus, "w", encoding="utf-8") as out:
            for i, text in enumerate(texts(args.corpus, args.records)):
                out.write(json.dumps({"id": str(i), "text": text}, ensure_ascii=False) + "\n")
        env = {**os.environ, "NUMBA_CACHE_DIR": str(work / "numba"), "XDG_CACHE_HOME": str(work / "cache")}
        command = [sys.executable, "-m", "dedupdb", "add", str(corpus), "--records", "jsonl", "--id-field", "id"]
        if args.workers is not None:
            command += ["--workers", str(args.workers)]
        print(f"{args.records:,} {NAMES[args.corpus]} ({corpus.stat().st_size / 2**20:.1f} MiB), {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f} before", flush=True)
        def add(run: int, label: str) -> float:
            started = time.perf_counter()
            done = subprocess.run([*command, "--db", str(work / f"run{run}.db")], env=env, capture_output=True,
                                  text=True)
            wall = time.perf_counter() - started
            if done.returncode != 0:
                sys.exit(f"add failed: {done.stderr[-2000:]}")
            print(f"{label:<44} {wall:6.1f} s  {args.records / wall:7,.0f} docs/s", flush=True)
            return wall

        walls = [add(0, "first (fresh caches: compiles)")]
        walls += [add(run, f"run {run + 1} (caches kept, at once)") for run in range(1, args.runs)]
        # The compile runs on in a process of its own after the first add (at the lowest priority): an add once it
        # has finished is what every later add costs.
        waited = time.perf_counter()
        while list((work / "numba").glob("dedupdb-compiled-*.compiling")) and time.perf_counter() - waited < 600:
            time.sleep(0.5)
        print(f"(the compile finished {time.perf_counter() - waited:.1f} s after the last add)")
        compiled = add(args.runs, "an add once the compile has finished")
        print(f"first / second: {walls[0] / walls[1]:.2f}x; first / compiled add: {walls[0] / compiled:.2f}x; "
              f"load average {os.getloadavg()[0]:.1f} after" if len(walls) > 1 else
              f"first / compiled add: {walls[0] / compiled:.2f}x; load average {os.getloadavg()[0]:.1f} after")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
