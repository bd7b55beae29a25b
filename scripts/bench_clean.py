"""Time 'dedupdb clean' and 'dedupdb undo' per file for each action, as whole commands.

An archive of N originals is written to a temporary folder, each with a near-duplicate (two words changed: its
text leaves the index when it is cleaned, the costly case) and an exact copy (what a hard link can replace).
For each action the store is restored from a copy made after the add, the archive is rebuilt, and the clean
and its undo are timed; every file's bytes are compared before and after.

    python scripts/bench_clean.py --files 1000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(root: Path, originals: int, seed: int = 1) -> None:
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(6)) for _ in range(5000)]
    for i in range(originals):
        folder = root / f"d{i % 40}"
        folder.mkdir(parents=True, exist_ok=True)
        text = [rng.choice(words) for _ in range(200)]
        (folder / f"a{i}.txt").write_text(" ".join(text))
        (folder / f"copy{i}.txt").write_text(" ".join(text))
        text[5], text[50] = "edited", "changed"
        (folder / f"b{i}.txt").write_text(" ".join(text))
        for name in (f"a{i}.txt", f"copy{i}.txt", f"b{i}.txt"):  # the original is the oldest: it is kept
            os.utime(folder / name, ns=(10**18 + i * 3 * 10**9 + len(name),) * 2)


def hashes(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


def run(args: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dedupdb", *args], check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000, help="originals (each with a near-duplicate and a copy)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root, db, saved = work / "archive", work / "store.db", work / "saved.db"
        env = {**os.environ, "XDG_DATA_HOME": str(work / "data")}
        build(root, options.files)
        print(f"add of {3 * options.files} files: {run(['add', str(root), '--db', str(db)], env):.2f} s")
        shutil.copy(db, saved)
        print(f"{'action':<10}{'files':>7}{'clean s':>9}{'ms/file':>9}{'undo s':>8}{'ms/file':>9}  bytes kept")
        for action in ("move", "trash", "hardlink"):
            build(root, options.files)
            shutil.copy(saved, db)
            before = hashes(root)
            extra = ["--to", str(work / "moved")] if action == "move" else []
            if action != "hardlink":
                extra += ["--exact-only"]  # the same files for each action: the exact copies
            clean = run(["clean", "--action", action, "--yes", "--db", str(db), *extra], env)
            undo = run(["undo", "--db", str(db)], env)
            same = hashes(root) == before
            n = options.files
            print(f"{action:<10}{n:>7}{clean:>9.2f}{1000 * clean / n:>9.1f}{undo:>8.2f}{1000 * undo / n:>9.1f}  "
                  f"{'all' if same else 'NOT ALL'}")
        build(root, options.files)
        shutil.copy(saved, db)
        clean = run(["clean", "--action", "move", "--to", str(work / "moved2"), "--yes", "--db", str(db)], env)
        undo = run(["undo", "--db", str(db)], env)
        print(f"{'move, all':<10}{2 * options.files:>7}{clean:>9.2f}{500 * clean / options.files:>9.1f}{undo:>8.2f}"
              f"{500 * undo / options.files:>9.1f}  (near-duplicates too: their texts leave the index)")


if __name__ == "__main__":
    main()
