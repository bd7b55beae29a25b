#!/usr/bin/env python
"""Benchmark `dedupdb add` on the IMDB corpus against datasketch and simhash.

Writes the documents of en_imdb_aclImdb.jsonl.gz as one .txt file each into a
temporary folder, times `Database.add` on that folder through the library, and
in the same run times two peers on the same texts (already in memory, so the
peers pay no file I/O):

  * rensa 0.5 (Rust): lowercase, split on whitespace, word bigram shingles,
    RMinHash(num_perm=P).update, RMinHashLSH(threshold=0.5, num_perm=P,
    num_bands=B).query then insert, with P and B the permutations and bands dedupdb
    uses: in memory, one process, no verification;
  * datasketch: the same word bigrams encoded to bytes, MinHash(num_perm=P).update_batch,
    MinHashLSH(threshold=0.5, num_perm=P).query then insert (--peer-perms adds other
    values of P);
  * simhash: Simhash(text) (the package's default features: character 4-grams)
    and SimhashIndex(k=3).add, on a subset (--peer-limit), docs/s extrapolated.

Usage:
    python scripts/bench_add.py --limit 20000
    python scripts/bench_add.py                      # all 100,000 documents
    python scripts/bench_add.py --profile            # cProfile the dedupdb add, top 25 cumulative
    python scripts/bench_add.py --records-only --cli-workers 1 2
                                                     # one JSONL file only (no .txt files, datasketch or simhash),
                                                     # the command line's add with 1 and with 2 workers, beside rensa
    python scripts/bench_add.py --records-only --pairs 5
                                                     # five timing pairs: the command line's add, unwatched, then
                                                     # rensa, alternately; the ratio of each pair and their median

The command line's add is run twice over at least: once watched (its memory and each process's CPU, sampled every
50 ms by this process, which costs the machine some CPU of its own), and in the timing pairs unwatched, as a user
runs it, each pair beside a run of rensa made just after it (so a slower minute of a shared machine slows both).
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import json
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"
CORPUS = "en_imdb_aclImdb.jsonl.gz"
# Run in a process of its own before anything is timed: the compiled sketching, verifying and decoding compiled into
# numba's cache (or loaded from it) and marked there, as an add's background compile would. Importing the sketching
# alone left the mark unwritten after a change to the code, and the library add then took numpy's path beside a
# compile of everything (9.5 s against 6.4).
WARM_UP = "from dedupdb.ingest.workers import compile_everything; compile_everything()"
FILES_PER_FOLDER = 1000


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def version() -> str:
    """The dedupdb commit benchmarked (with '+dirty' when its tree has uncommitted changes)."""
    import subprocess

    import dedupdb

    root = Path(dedupdb.__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "dedupdb", "migrations"],
                               capture_output=True, text=True)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if rev.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def load_rows(limit: int | None) -> list[dict]:
    """The first limit records of the IMDB corpus (all with None), each with its id and text."""
    path = EVAL_DIR / CORPUS
    if not path.exists():
        sys.exit(f"corpus not found: {path}")
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if limit and len(rows) >= limit:
                break
    return rows


def load_texts(limit: int | None) -> list[str]:
    return [row["text"] for row in load_rows(limit)]


def write_files(texts: list[str], folder: Path, keep: bool) -> tuple[int, bool]:
    """One .txt file per text, 1,000 per subfolder; returns (bytes written, reused)."""
    marker = folder.with_name(folder.name + ".complete")
    if keep and marker.exists() and marker.read_text().strip() == str(len(texts)):
        return sum(len(t.encode("utf-8")) for t in texts), True
    if folder.exists():
        shutil.rmtree(folder)
    marker.unlink(missing_ok=True)
    total = 0
    for i, text in enumerate(texts):
        sub = folder / f"{i // FILES_PER_FOLDER:04d}"
        if i % FILES_PER_FOLDER == 0:
            sub.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        (sub / f"{i:06d}.txt").write_bytes(data)
        total += len(data)
    marker.write_text(str(len(texts)))
    return total, False


def db_bytes(db_path: Path) -> int:
    return sum(p.stat().st_size for p in (db_path, Path(f"{db_path}-wal")) if p.exists())


def bench_dedupdb(folder: Path, db_path: Path, profile: bool, profile_top: int) -> dict:
    import dedupdb

    for p in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
        if p.exists():
            p.unlink()
    started = time.perf_counter()
    db = dedupdb.open(db_path)
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    marks: list[tuple[int, float]] = []

    def progress(done: int, total: int) -> None:  # bytes read, of all found: a mark at every tenth
        if not marks or done * 10 // max(1, total) > marks[-1][0] * 10 // max(1, total) or done == total:
            marks.append((done, time.perf_counter()))

    add_started = time.perf_counter()
    summary = db.add([folder], progress=progress)
    add_seconds = time.perf_counter() - add_started
    if profiler:
        profiler.disable()
    counts = db.store.counts()
    db.close()
    wall = time.perf_counter() - started
    result = {
        "summary": summary,
        "add_seconds": add_seconds,
        "wall_seconds": wall,  # open + add + close
        "counts": counts,
        "db_bytes": db_bytes(db_path),
        "rss_mb": peak_rss_mb(),
        "marks": [(0, add_started)] + marks,
    }
    if profiler:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("cumulative").print_stats(profile_top)
        result["profile"] = out.getvalue()
    return result


def bench_dedupdb_records(texts: list[str], workdir: Path) -> dict:
    """The same documents as one JSON Lines file: the way a corpus usually arrives, without per-file costs."""
    import json

    import dedupdb
    from dedupdb.ingest.records import RecordOptions

    corpus = workdir / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n")
    db_path = workdir / "bench-records.db"
    for p in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
        if p.exists():
            p.unlink()
    db = dedupdb.open(db_path)
    started = time.perf_counter()
    summary = db.add([corpus], records=RecordOptions("jsonl", id_field="id"))
    seconds = time.perf_counter() - started
    db.close()
    return {"docs": summary.records, "seconds": seconds, "rss_mb": peak_rss_mb(), "db_bytes": db_bytes(db_path),
            "bytes": corpus.stat().st_size}


def _tree_memory(root_pid: int, each: dict[int, list[int]] | None = None,
                 ticks: dict[int, int] | None = None) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) in bytes of a process and all its descendants, from /proc (Linux). PSS shares
    each page among the processes mapping it, so forked workers are not counted twice for what they share.
    each, when given, keeps the peak [RSS, PSS] of every process by pid; ticks the CPU time (user + system,
    clock ticks) each has used so far, read from the same /proc/PID/stat as its parent."""
    import os

    children: dict[int, list[int]] = {}
    cpu: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                ppid, used = int(fields[1]), int(fields[11]) + int(fields[12])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
            cpu[int(entry)] = used
    rss = pss = 0
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        if ticks is not None and pid in cpu:
            ticks[pid] = max(ticks.get(pid, 0), cpu[pid])
        one = process_memory(pid)
        if one is None:
            continue
        rss, pss = rss + one[0], pss + one[1]
        if each is not None:
            peak = each.setdefault(pid, [0, 0])
            peak[0], peak[1] = max(peak[0], one[0]), max(peak[1], one[1])
    return rss, pss


def process_memory(pid: int) -> tuple[int, int] | None:
    """(RSS, PSS) in bytes of one process, from /proc/PID/smaps_rollup; None once it is gone."""
    one = [0, 0]
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Rss:"):
                    one[0] = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    one[1] = int(line.split()[1]) * 1024
    except OSError:
        return None
    return one[0], one[1]


def run_measured(command: list[str], label: str, each: dict[int, list[int]] | None = None,
                 ticks: dict[int, int] | None = None, interval: float = 0.05) -> dict:
    """Run a command in its own process: wall time and the peak RSS and PSS of its process tree, sampled every
    interval seconds (each process's own peaks into each, its CPU ticks into ticks, when given)."""
    import subprocess
    import threading

    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(interval):
            rss, pss = _tree_memory(process.pid, each, ticks)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    if process.returncode != 0:
        sys.exit(f"{label} failed ({process.returncode}): {err.decode(errors='replace')[-2000:]}")
    return {"seconds": seconds, "peak_rss": peak[0], "peak_pss": peak[1], "stderr": err.decode(errors="replace"),
            "pid": process.pid}


def bench_cli_memory(corpus: Path, workdir: Path, workers: int | None = None) -> dict:
    """`dedupdb add corpus.jsonl` as a user runs it, in a process of its own (with --workers when given): wall time
    and the peak memory of the whole process tree (the main process and its workers), sampled every 50 ms, and
    the CPU seconds of each."""
    import os

    db_path = workdir / "bench-cli.db"
    command = cli_add_command(corpus, db_path, workers)
    each: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    measured = run_measured(command, "dedupdb add", each, ticks)
    hertz = os.sysconf("SC_CLK_TCK")
    processes = [("main" if pid == measured["pid"] else "worker", rss, pss, ticks.get(pid, 0) / hertz)
                 for pid, (rss, pss) in each.items()]
    return {"seconds": measured["seconds"], "peak_rss": measured["peak_rss"], "peak_pss": measured["peak_pss"],
            "db_bytes": db_bytes(db_path), "processes": processes}


def cli_add_command(corpus: Path, db_path: Path, workers: int | None = None) -> list[str]:
    """`dedupdb add corpus.jsonl` as a user runs it, onto a store of its own (emptied first)."""
    for p in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
        if p.exists():
            p.unlink()
    command = [sys.executable, "-m", "dedupdb", "--db", str(db_path), "add", str(corpus), "--id-field", "id"]
    return command + (["--workers", str(workers)] if workers is not None else [])


def unwatched_seconds(command: list[str], label: str) -> float:
    """Wall time of a command in a process of its own, its output thrown away and nothing sampling it."""
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{label} failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")
    return seconds


def timing_pairs(texts: list[str], corpus: Path, workdir: Path, pairs: int, perms: int, bands: int) -> list[tuple[float, float]]:
    """(seconds of `dedupdb add corpus.jsonl` in a process of its own, unwatched, seconds of rensa just after it),
    `pairs` times over."""
    return [(unwatched_seconds(cli_add_command(corpus, workdir / "bench-timed.db"), "dedupdb add"),
             bench_rensa(texts, perms, bands)["seconds"]) for _ in range(pairs)]


def word_bigrams(text: str) -> list[str]:
    """The peers' shingles: lowercase word bigrams (one shingle of the whole text below two words)."""
    words = text.lower().split()
    if len(words) >= 2:
        return list({f"{words[j]} {words[j + 1]}" for j in range(len(words) - 1)})
    return [" ".join(words)]


def bench_datasketch(texts: list[str], num_perm: int) -> dict:
    from datasketch import MinHash, MinHashLSH

    started = time.perf_counter()
    lsh = MinHashLSH(threshold=0.5, num_perm=num_perm)
    candidates = 0
    for i, text in enumerate(texts):
        m = MinHash(num_perm=num_perm)
        m.update_batch([s.encode("utf-8") for s in word_bigrams(text)])
        candidates += len(lsh.query(m))
        lsh.insert(i, m)
    return {"seconds": time.perf_counter() - started, "docs": len(texts), "rss_mb": peak_rss_mb(),
            "banding": f"{lsh.b}x{lsh.r}", "candidates": candidates}


def bench_rensa(texts: list[str], num_perm: int, bands: int) -> dict:
    from rensa import RMinHash, RMinHashLSH

    started = time.perf_counter()
    lsh = RMinHashLSH(threshold=0.5, num_perm=num_perm, num_bands=bands)
    candidates = 0
    for i, text in enumerate(texts):
        m = RMinHash(num_perm=num_perm, seed=42)
        m.update(word_bigrams(text))
        candidates += len(lsh.query(m))
        lsh.insert(i, m)
    return {"seconds": time.perf_counter() - started, "docs": len(texts), "rss_mb": peak_rss_mb(),
            "banding": f"{bands}x{num_perm // bands}", "candidates": candidates}


def bench_simhash(texts: list[str], features: str) -> dict:
    import logging

    from simhash import Simhash, SimhashIndex

    # SimhashIndex logs a warning for every bucket over 200 entries.
    quiet = logging.getLogger("simhash-bench")
    quiet.setLevel(logging.ERROR)
    started = time.perf_counter()
    index = SimhashIndex([], k=3, log=quiet)
    for i, text in enumerate(texts):
        value = Simhash(text) if features == "text" else Simhash(text.lower().split())
        index.add(str(i), value)
    return {"seconds": time.perf_counter() - started, "docs": len(texts), "rss_mb": peak_rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Time `dedupdb add` on IMDB reviews written as .txt files, against rensa, datasketch MinHashLSH and simhash.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--limit", type=int, default=None, help="use only the first N documents (default: all 100,000)")
    parser.add_argument("--peer-limit", type=int, default=20000,
                        help="documents for the simhash peer (docs/s extrapolated); 0 for all")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dedupdb-bench-add",
                        help="folder for the .txt files and the database")
    parser.add_argument("--keep-dir", action="store_true",
                        help="reuse the .txt files from a previous run with the same --limit, and keep them afterwards")
    parser.add_argument("--skip-peers", action="store_true", help="time dedupdb only")
    parser.add_argument("--peer-perms", type=int, nargs="*", default=[],
                        help="datasketch permutations besides dedupdb's own (which is always run, and is the baseline)")
    parser.add_argument("--simhash-features", choices=["text", "words"], default="text",
                        help="simhash features: the package default (char 4-grams of the text) or lowercase words")
    parser.add_argument("--records-only", action="store_true",
                        help="time only the adds of one JSONL file (library and command line) and rensa: no .txt files, "
                             "datasketch or simhash")
    parser.add_argument("--cli-workers", type=int, nargs="*", default=[],
                        help="run the command line's add once with each of these --workers (default: once, with its "
                             "default)")
    parser.add_argument("--pairs", type=int, default=3,
                        help="timing pairs of the command line's add (unwatched) and rensa, alternately (0: none; odd counts have a median pair)")
    parser.add_argument("--profile", action="store_true", help="run the dedupdb add under cProfile and print hotspots")
    parser.add_argument("--profile-top", type=int, default=25, help="rows of the cProfile listing")
    args = parser.parse_args()

    import dedupdb  # imported before anything is timed, so the version printed is the code measured

    print(f"dedupdb {dedupdb.__version__} at commit {version()}, python {sys.version.split()[0]}", flush=True)
    t0 = time.perf_counter()
    texts = load_texts(args.limit)
    load_seconds = time.perf_counter() - t0
    folder = args.workdir / "docs"
    db_path = args.workdir / "bench.db"
    args.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.records_only:
        total_bytes, reused = sum(len(t.encode("utf-8")) for t in texts), False
    else:
        total_bytes, reused = write_files(texts, folder, args.keep_dir)
    write_seconds = time.perf_counter() - t0
    print(f"corpus: {EVAL_DIR / CORPUS}: {len(texts):,} documents, {total_bytes / 1e6:.1f} MB "
          f"(loaded in {load_seconds:.1f} s)")
    if not args.records_only:
        print(f"files:  {folder} ({'reused' if reused else f'written in {write_seconds:.1f} s'}); "
              f"peak RSS after loading: {peak_rss_mb():.0f} MB")

    # Compiled code is cached per machine (and per copy of the source): a first run compiles it (WARM_UP), which is
    # timed here, once, so that no add below pays for it.
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", WARM_UP], check=True)
    print(f"compiled sketching, verifying and decoding loaded (or compiled, on a first run) in a process "
          f"of its own: "
          f"{time.perf_counter() - t0:.1f} s")

    rows = []
    if not args.records_only:
        d = bench_dedupdb(folder, db_path, args.profile, args.profile_top)
        s = d["summary"]
        n_added = len(s.added)
        print(f"\ndedupdb add: {s.counts()}, new contents {s.new_contents:,}, bytes read {s.bytes_read / 1e6:.1f} MB")
        print(f"  add {d['add_seconds']:.1f} s (AddSummary.seconds {s.seconds:.1f}), open+add+close {d['wall_seconds']:.1f} s")
        print(f"  {n_added / d['add_seconds']:,.0f} docs/s, {s.bytes_read / 1e6 / d['add_seconds']:.2f} MB/s")
        marks = d["marks"]
        if len(marks) > 2:
            # Files are read ahead of the batch being written, so these rates lag the mark by up to one batch.
            rates = [f"{(b[0] - a[0]) / 1e6 / (b[1] - a[1]):.1f}" for a, b in zip(marks, marks[1:]) if b[1] > a[1]]
            print(f"  MB/s per successive tenth of the bytes: {', '.join(rates)}")
        print(f"  store: {d['counts']}")
        print(f"  database {d['db_bytes'] / 1e6:.1f} MB (.db + -wal after close) = "
              f"{d['db_bytes'] / max(1, n_added):,.0f} bytes/document "
              f"({d['db_bytes'] / max(1, s.bytes_read):.2f}x the text)")
        print(f"  peak RSS so far: {d['rss_mb']:.0f} MB")
        if d.get("profile"):
            print("\n" + d["profile"])

        rows.append(("dedupdb add (files on disk)", n_added, d["add_seconds"], d["rss_mb"], False))
    r = bench_dedupdb_records(texts, args.workdir)
    print(f"\ndedupdb add of one JSONL file: {r['docs']:,} records in {r['seconds']:.1f} s, "
          f"{r['bytes'] / 1e6 / r['seconds']:.2f} MB/s, database {r['db_bytes'] / max(1, r['docs']):,.0f} bytes/document")
    rows.append(("dedupdb add (one JSONL file)", r["docs"], r["seconds"], r["rss_mb"], False))
    if sys.platform.startswith("linux"):
        for workers in args.cli_workers or [None]:
            m = bench_cli_memory(args.workdir / "corpus.jsonl", args.workdir, workers)
            rate = r["docs"] / m["seconds"]
            label = "default workers" if workers is None else f"--workers {workers}"
            print(f"`dedupdb add corpus.jsonl` ({label}) in a process of its own: {rate:,.0f} docs/s, {m['seconds']:.1f} s "
                  f"(start-up included); peak memory of the process and its workers: RSS {m['peak_rss'] / 2**20:,.0f} "
                  f"MiB summed, PSS {m['peak_pss'] / 2**20:,.0f} MiB (shared pages counted once); "
                  f"database {m['db_bytes'] / max(1, r['docs']):,.0f} bytes/document")
            print("  peak of each process: " + "; ".join(f"{role} RSS {rss / 2**20:,.0f} MiB, PSS {pss / 2**20:,.0f} MiB"
                                                         for role, rss, pss, _ in m["processes"]))
            # The process that writes the store and the workers that sketch overlap: the busier one sets the pace.
            print("  CPU seconds of each process (to its last sample, 50 ms apart): "
                  + "; ".join(f"{role} {cpu:.1f} s" for role, _, _, cpu in m["processes"]))
            main_cpu = sum(cpu for role, _, _, cpu in m["processes"] if role == "main")
            worker_cpu = sum(cpu for role, _, _, cpu in m["processes"] if role == "worker")
            print(f"  the writing process's CPU: {main_cpu / m['seconds']:.0%} of the wall time")
            # With one core for the writer and the rest for workers, whichever side has more CPU a core sets the
            # pace; the writer's own CPU bounds it however many workers there are.
            for cores in (8, 16):
                pace = max(main_cpu, worker_cpu / (cores - 1))
                print(f"  projected from this CPU on {cores} cores ({cores - 1} workers): {r['docs'] / pace:,.0f} docs/s "
                      f"({'writer' if main_cpu >= worker_cpu / (cores - 1) else 'workers'}-bound, start-up excluded)")
            rows.append((f"dedupdb add CLI ({label})", r["docs"], m["seconds"], m["peak_rss"] / 2**20, False))
    if not args.skip_peers:
        own = dedupdb.Settings().num_perm
        from dedupdb.index.lsh import optimal_banding

        # rensa's bands must divide the permutations: dedupdb's rows per band, as many bands as fit.
        bands = own // optimal_banding(dedupdb.Settings().threshold, own).rows
        rs = bench_rensa(texts, own, bands)
        rows.append((f"rensa RMinHash+LSH {own} perm ({rs['banding']})", rs["docs"], rs["seconds"], rs["rss_mb"], False))
        if args.pairs > 0 and sys.platform.startswith("linux"):
            timed = timing_pairs(texts, args.workdir / "corpus.jsonl", args.workdir, args.pairs, own, bands)
            print("\ntiming pairs, `dedupdb add corpus.jsonl` (default workers, unwatched) then rensa: "
                  + "; ".join(f"{a:.2f} s / {b:.2f} s = {b / a:.2f}x" for a, b in timed))
            ratios = sorted(b / a for a, b in timed)
            middle = sorted(timed, key=lambda pair: pair[1] / pair[0])[len(timed) // 2]
            print(f"  `dedupdb add corpus.jsonl` against rensa, the median of {len(timed)} pairs: "
                  f"{ratios[len(ratios) // 2]:.2f}x (from {ratios[0]:.2f}x to {ratios[-1]:.2f}x)")
            rows.append((f"dedupdb add CLI, unwatched (median pair of {len(timed)})", r["docs"], middle[0], float("nan"),
                         False))
            rows.append(("rensa, that pair's run", r["docs"], middle[1], float("nan"), False))
        for perms in [] if args.records_only else [own] + [p for p in args.peer_perms if p != own]:
            ds = bench_datasketch(texts, perms)
            rows.append((f"datasketch MinHash+LSH {perms} perm ({ds['banding']})", ds["docs"], ds["seconds"],
                         ds["rss_mb"], False))
        if not args.records_only:
            peer_texts = texts[: args.peer_limit] if args.peer_limit else texts
            sh = bench_simhash(peer_texts, args.simhash_features)
            rows.append((f"simhash Simhash+Index k=3 ({args.simhash_features})", sh["docs"], sh["seconds"],
                         sh["rss_mb"], len(peer_texts) < len(texts)))

    base = next((r for r in rows if r[0].startswith("datasketch")), None)
    rensa = next((r for r in rows if r[0].startswith("rensa")), None)
    if rensa:
        print("\n" + "; ".join(f"{name}: {docs / seconds / (rensa[1] / rensa[2]):.2f}x rensa"
                               for name, docs, seconds, _, _ in rows if name.startswith("dedupdb") and "unwatched" not in name))
    base_rate = base[1] / base[2] if base else None
    print(f"\n{'tool':<40} {'docs':>8} {'seconds':>9} {'docs/s':>9} {'vs datasketch':>14} {'peak RSS MB':>12}")
    print("-" * 96)
    for name, docs, seconds, rss, extrapolated in rows:
        rate = docs / seconds if seconds else float("nan")
        ratio = f"{rate / base_rate:.2f}x" if base_rate else "-"
        note = f" (extrapolated: {len(texts) / rate:.0f} s for {len(texts):,})" if extrapolated else ""
        print(f"{name:<40} {docs:>8,} {seconds:>9.1f} {rate:>9,.0f} {ratio:>14} {rss:>12,.0f}{note}")
    print("peak RSS is the process high-water mark after each step (cumulative; the texts stay in memory throughout)")
    print("peers work on texts already in memory; dedupdb walks, reads, decodes and normalizes the files itself")

    if not args.keep_dir:
        shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
