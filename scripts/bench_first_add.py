#!/usr/bin/env python
"""What the first `dedupdb add` after an install costs against the second.

The compiled sketching (fastsketch.py, numba) is compiled the first time a machine needs it and kept in numba's
cache (jit.py: the user cache folder, or $NUMBA_CACHE_DIR). A fresh install is simulated by fresh, empty cache
folders ($NUMBA_CACHE_DIR and $XDG_CACHE_HOME, where jieba's dictionary cache lives too), never by deleting the
user's own. Each run is `dedupdb add reviews.jsonl --records jsonl` in a process of its own, start-up included,
onto a new database, with the same cache folders: the first compiles, the later ones load what it kept.

Usage:
    python scripts/bench_first_add.py --records 20000
    python scripts/bench_first_add.py --records 100000 --runs 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="IMDB reviews added")
    parser.add_argument("--runs", type=int, default=2, help="adds in a row, the first onto fresh caches")
    parser.add_argument("--workers", type=int, default=None, help="add --workers (default: add's own)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="dedupdb-bench-first-"))
    try:
        corpus = work / "reviews.jsonl"
        with gzip.open(EVAL_DIR / "en_imdb_aclImdb.jsonl.gz", "rt", encoding="utf-8") as src, \
                open(corpus, "w", encoding="utf-8") as out:
            for i, line in enumerate(src):
                if i >= args.records:
                    break
                out.write(json.dumps({"id": str(i), "text": json.loads(line)["text"]}) + "\n")
        env = {**os.environ, "NUMBA_CACHE_DIR": str(work / "numba"), "XDG_CACHE_HOME": str(work / "cache")}
        command = [sys.executable, "-m", "dedupdb", "add", str(corpus), "--records", "jsonl", "--id-field", "id"]
        if args.workers is not None:
            command += ["--workers", str(args.workers)]
        print(f"{args.records:,} IMDB reviews ({corpus.stat().st_size / 2**20:.1f} MiB), {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f} before", flush=True)
        walls = []
        for run in range(args.runs):
            started = time.perf_counter()
            done = subprocess.run([*command, "--db", str(work / f"run{run}.db")], env=env, capture_output=True,
                                  text=True)
            walls.append(time.perf_counter() - started)
            if done.returncode != 0:
                sys.exit(f"add failed: {done.stderr[-2000:]}")
            label = "first (fresh caches: compiles)" if run == 0 else f"run {run + 1} (caches kept)"
            print(f"{label:<34} {walls[-1]:6.1f} s  {args.records / walls[-1]:7,.0f} docs/s", flush=True)
        later = min(walls[1:]) if len(walls) > 1 else float("nan")
        print(f"first / fastest later: {walls[0] / later:.2f}x; load average {os.getloadavg()[0]:.1f} after")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
