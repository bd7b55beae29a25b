#!/usr/bin/env python
"""Decoding and packing a store's index blocks: numpy's path against the compiled one (storage/fastdecode.py).

Reads --blocks blocks of the largest index run of a store (read only), then times, as nanoseconds an entry:
- a ranged decode with --keys-a-block keys of random values a block, as an add's batch probes a large run (eight
  and more keys a block read the run whole: runs.KEYS_A_BLOCK_UNFILTERED);
- a whole decode, as a merge reads a run;
- packing the decoded entries back into blocks, as a run is written.
Each is the median of --repeat runs, and both paths must give the same entries and bytes.

Usage (a store built by bench_query.py):
    python scripts/bench_blocks.py --db /tmp/q10m.db --blocks 2048
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dedupdb.storage import blocks as block_codec  # noqa: E402
from dedupdb.storage import decoding  # noqa: E402
from dedupdb.storage.entries import CONTENT_ID_BITS  # noqa: E402

STRETCH = 256  # blocks read a statement, as runs._READ_AT_ONCE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a store (only read)")
    parser.add_argument("--blocks", type=int, default=2048, help="blocks of the largest index run read")
    parser.add_argument("--keys-a-block", type=float, default=8.0, help="random keys a block for the ranged decode")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not args.db.exists():
        parser.error(f"no store at {args.db}")

    from dedupdb.storage import fastdecode

    conn = sqlite3.connect(f"{args.db.absolute().as_uri()}?mode=ro", uri=True)
    run = conn.execute("SELECT id, entries FROM runs WHERE family = 0 ORDER BY entries DESC LIMIT 1").fetchone()
    if run is None:
        sys.exit(f"{args.db} holds no index run")
    ids = [r[0] for r in conn.execute("SELECT id FROM run_blocks WHERE run = ? ORDER BY id LIMIT ?",
                                      (run[0], args.blocks))]
    stretches = []
    for start in range(0, len(ids), STRETCH):
        rows = conn.execute("SELECT first, entries, data FROM run_blocks WHERE id BETWEEN ? AND ? AND run = ? "
                            "ORDER BY id", (ids[start], ids[min(start + STRETCH, len(ids)) - 1], run[0])).fetchall()
        stretches.append((np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64),
                          [r[2] for r in rows]))
    conn.close()
    entries = int(sum(s[1].sum() for s in stretches))
    firsts = np.concatenate([s[0] for s in stretches])
    rng = np.random.default_rng(7)
    keys = np.unique(rng.integers(firsts[0] >> CONTENT_ID_BITS, (firsts[-1] >> CONTENT_ID_BITS) + 1,
                                  int(args.keys_a_block * len(ids))))
    lows = keys << CONTENT_ID_BITS
    highs = lows | ((1 << CONTENT_ID_BITS) - 1)
    print(f"{args.db}: run {run[0]} of {run[1]:,} entries, its first {len(ids):,} blocks, {entries:,} entries; "
          f"{len(keys):,} keys for the ranged decode", flush=True)

    def decode(ranged: bool) -> np.ndarray:
        parts = [block_codec.decode_blocks(f, c, b, lows, highs) if ranged else block_codec.decode_blocks(f, c, b)
                 for f, c, b in stretches]
        return np.concatenate(parts)

    whole = decode(False)

    def pack() -> list[bytes]:
        out = []
        for start in range(0, len(whole), 1 << 20):
            out += block_codec.packed_blocks(whole[start : start + (1 << 20)])[0]
        return out

    results = {}
    for path, decoder in (("numpy", None), ("compiled", fastdecode)):
        decoding.decoder = lambda d=decoder: d  # noqa: E731
        measured = {}
        for name, work in (("ranged decode", lambda: decode(True)), ("whole decode", lambda: decode(False)),
                           ("packing", pack)):
            work()  # compiled code loaded, pages read
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                out = work()
                times.append(time.perf_counter() - started)
            measured[name] = (statistics.median(times), out)
        results[path] = measured
    for name in ("ranged decode", "whole decode", "packing"):
        a, b = results["numpy"][name], results["compiled"][name]
        same = a[1] == b[1] if isinstance(a[1], list) else np.array_equal(a[1], b[1])
        print(f"{name:<14} numpy {a[0] / entries * 1e9:6.2f} ns an entry, compiled {b[0] / entries * 1e9:6.2f} "
              f"({a[0] / b[0]:.1f}x){'' if same else '  DIFFERENT RESULTS'}")


if __name__ == "__main__":
    main()
