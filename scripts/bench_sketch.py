"""Sketching speed: the numpy path of Sketcher against the compiled one (dedupdb/fastsketch.py).

    .venv/bin/python scripts/bench_sketch.py --n 10000

Prints microseconds per text, the median of --repeat runs (wall time, and the process's CPU time, which the
other work of a shared machine disturbs less), on the first N IMDB reviews and N Chinese reviews of
../shared/eval (normalized first, sketched in batches of the ingest's size): for the whole of Sketcher.sketch,
and for the part the compiled path replaces (everything but content hashes, SimHash and Sketch objects). Then the time numba takes to compile the kernels into an empty cache, and to load them from it,
each in a fresh process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dedupdb.config import INGEST_BATCH, Settings  # noqa: E402
from dedupdb.sketch.fingerprint import Sketcher  # noqa: E402
from dedupdb.text.normalize import normalize  # noqa: E402

EVAL = ROOT.parent / "shared" / "eval"
CORPORA = {"IMDB": "en_imdb_aclImdb.jsonl.gz", "Chinese reviews": "zh_sophonplus_reviews.jsonl.gz"}

# Run in a fresh process: numba's import, compiling (or loading) the kernels, the character table.
_LOAD = """
import time
import dedupdb.sketch.fingerprint
started = time.perf_counter()
import numba
imported = time.perf_counter()
from dedupdb.sketch import fastsketch
loaded = time.perf_counter()
fastsketch.char_classes()
print(imported - started, loaded - imported, time.perf_counter() - loaded)
"""


def load(name: str, n: int) -> list[str]:
    texts = []
    with gzip.open(EVAL / name, "rt", encoding="utf-8") as lines:
        for line in lines:
            texts.append(normalize(json.loads(line)["text"]))
            if len(texts) == n:
                break
    return texts


def per_text(run, texts: list[str], repeat: int) -> tuple[float, float]:
    """Medians over repeats of the microseconds per text run takes over texts, a batch at a time: wall, CPU."""
    walls, cpus = [], []
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        for at in range(0, len(texts), INGEST_BATCH):
            run(texts[at : at + INGEST_BATCH])
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1e6 / len(texts), statistics.median(cpus) * 1e6 / len(texts)


def startup(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        runs = []
        for _ in range(1 + repeat):
            out = subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True, check=True)
            runs.append([float(x) for x in out.stdout.split()])
    first, cached = runs[0], runs[1:]
    print(f"compile into an empty cache: {first[1]:.2f} s (numba import {first[0]:.2f} s, table {first[2]:.2f} s)")
    print(f"load from the cache, median of {repeat}: {statistics.median(r[1] for r in cached):.2f} s "
          f"(numba import {statistics.median(r[0] for r in cached):.2f} s, "
          f"table {statistics.median(r[2] for r in cached):.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10000, help="texts of each corpus")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement; the median is shown")
    args = parser.parse_args()

    startup(args.repeat)
    settings = Settings()
    numpy_path = Sketcher(settings)
    numpy_path.FAST_BATCH = 1 << 62  # every batch takes the numpy path, even once it has earned the compiled one
    numpy_path.FAST_AFTER_SECONDS = float("inf")
    fast_path = Sketcher(settings)
    fast = fast_path._fast()
    if fast is None:
        sys.exit("numba cannot be imported")

    def fast_parts(batch: list[str]):
        return fast.sketch_parts(batch, settings.word_ngram, settings.cjk_ngram, settings.char_ngram,
                                 settings.containment_ngram, settings.winnow_window, fast_path.minhasher.multipliers,
                                 fast_path.minhasher.offsets)

    for label, name in CORPORA.items():
        if not (EVAL / name).exists():
            print(f"{label}: {EVAL / name} missing")
            continue
        texts = load(name, args.n)
        fast_path.sketch(texts[:INGEST_BATCH])  # warm: the character table, first touches
        numpy_path.sketch(texts[:INGEST_BATCH])  # warm: jieba's dictionary
        chars = sum(map(len, texts)) / len(texts)
        print(f"\n{label}: {len(texts)} texts, {chars:.0f} characters each on average (us per text: wall, CPU)")
        rows = [("Sketcher.sketch", numpy_path.sketch, fast_path.sketch),
                ("  replaced part", numpy_path._parts, fast_parts)]
        for what, slow, quick in rows:
            (a, a_cpu), (b, b_cpu) = per_text(slow, texts, args.repeat), per_text(quick, texts, args.repeat)
            print(f"{what:18s} numpy {a:8.1f} {a_cpu:8.1f}   compiled {b:8.1f} {b_cpu:8.1f}   {a / b:5.1f}x")


if __name__ == "__main__":
    main()
