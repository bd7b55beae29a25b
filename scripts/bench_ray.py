#!/usr/bin/env python
"""Benchmark the scale-out job (`dedupdb ray`) on a local Ray runtime against `dedupdb add` on the same input.

The input: the first N documents of en_imdb_aclImdb.jsonl.gz (ids kept) plus K edited variants of them (fixed
seed: a quarter are exact copies, the rest have 1-15% of their words deleted, inserted or swapped with a
neighbour, a fifth of them edits of an earlier variant, so there are chains), the variants scattered among the
originals, written as S JSONL shards (fields id and text) into a temporary folder.

For each worker count, a fresh subprocess starts a local Ray runtime of that many CPUs and runs
dedupdb.scaleout.job.run on the shards. Printed: each stage's seconds, output rows, rows/s (and per core) and its
output's size in the object store (Dataset.size_bytes of the materialized stage); the wall time of the
subprocess (Python start, imports, Ray start-up, job, shutdown) and docs/s on it; the peak memory of the whole
process tree (driver, raylet, gcs_server, Ray workers; PSS summed over the tree, sampled every 0.2 s from /proc,
as bench_add._tree_memory does); each stage's blocks, and the cores it kept busy (CPU seconds of the tree over the
stage's seconds, from the same samples).

Shuffle volume is measured, not estimated: in the benchmark's subprocess Dataset.groupby is wrapped so that each
block entering a groupby passes through a map_batches that appends its rows and Arrow bytes (Table.nbytes, the
measure Ray's size_bytes uses) to a file; the sum is the volume the sort-based shuffle partitions and moves (a
local runtime moves it through the object store, not a network). Shown per stage (texts, idf, candidates: 2
groupbys, verify: 2, clusters) and per document, beside the proxy "output size of the stage before".
--no-probe leaves groupby alone (the probe costs one fused map per block).

Beside it, in its own subprocess: `Database.add` of the same shards (default workers), docs/s and peak memory.
With --compare, the (a, b) document-key pairs of each job's pairs/ Parquet against Database.pairs() of the store.

Usage:
    python scripts/bench_ray.py --limit 5000                           # a quick run
    python scripts/bench_ray.py --compare --json /tmp/bench_ray.json   # 100,000 + 20,000 variants, 1 and 2 workers
    python scripts/bench_ray.py --workers 2 --variants 0 --shards 8
    python scripts/bench_ray.py --compare --retries 5   # on a shared machine: re-run what others disturbed
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_add import WARM_UP, _tree_memory, load_rows, version  # noqa: E402  (a script beside this one)

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"
CORPUS = "en_imdb_aclImdb.jsonl.gz"
SAMPLE_SECONDS = 0.2
SHUFFLING = ("texts", "idf", "candidates", "verify", "clusters")
# Cores other processes may use during a timed subprocess before its timings count as disturbed (an idle machine
# shows about 0.1 here: the kernel and the sampling itself), and the pause before a disturbed one is re-run.
DISTURBED = 0.25
RETRY_PAUSE = 20


# --- the input ------------------------------------------------------------------------------------------------------

def load_docs(limit: int) -> list[tuple[str, str]]:
    return [(f"imdb-{row['id']}", row["text"]) for row in load_rows(limit)]


def edited(rng: random.Random, text: str, vocabulary: list[str]) -> tuple[str, int]:
    """The text with 1-15% of its words deleted, inserted (a corpus word) or swapped with the next; (text, edits)."""
    tokens = text.split()
    edits = max(1, round(len(tokens) * rng.uniform(0.01, 0.15)))
    for _ in range(edits):
        op = rng.random()
        if op < 1 / 3 and len(tokens) > 1:
            del tokens[rng.randrange(len(tokens))]
        elif op < 2 / 3 or len(tokens) < 2:
            tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(vocabulary))
        else:
            at = rng.randrange(len(tokens) - 1)
            tokens[at], tokens[at + 1] = tokens[at + 1], tokens[at]
    return " ".join(tokens), edits


def with_variants(docs: list[tuple[str, str]], count: int, seed: int) -> tuple[list[tuple[str, str]], dict]:
    """The documents and `count` variants, each placed at a random position (the originals keep their order)."""
    rng = random.Random(seed)
    vocabulary = [w for _, text in docs[:2000] for w in text.split()]
    variants: list[tuple[str, str]] = []
    exact = chained = 0
    for j in range(count):
        if variants and rng.random() < 0.2:
            source = variants[rng.randrange(len(variants))][1]
            chained += 1
        else:
            source = docs[rng.randrange(len(docs))][1]
        if rng.random() < 0.25:
            text = source
            exact += 1
        else:
            text, _ = edited(rng, source, vocabulary)
        variants.append((f"var-{j}", text))
    keyed = [(float(i), item) for i, item in enumerate(docs)] + [(rng.uniform(0, len(docs)), v) for v in variants]
    keyed.sort(key=lambda pair: pair[0])
    return [item for _, item in keyed], {"variants": count, "exact_copies": exact, "of_variants": chained}


def write_shards(items: list[tuple[str, str]], folder: Path, shards: int) -> tuple[list[Path], int]:
    folder.mkdir(parents=True, exist_ok=True)
    shards = max(1, min(shards, len(items)))
    per = -(-len(items) // shards)
    paths, total = [], 0
    for s in range(shards):
        path = folder / f"shard-{s:03d}.jsonl"
        with open(path, "w", encoding="utf-8") as out:
            for rid, text in items[s * per:(s + 1) * per]:
                out.write(json.dumps({"id": rid, "text": text}, ensure_ascii=False) + "\n")
        paths.append(path.resolve())
        total += path.stat().st_size
    return paths, total


# --- the subprocesses -----------------------------------------------------------------------------------------------

def install_probe(path: str) -> None:
    """Wrap Dataset.groupby (in this process) so that every block entering a groupby appends
    'stage.n<TAB>rows<TAB>bytes' to path; the stage is the one the job is building when it calls groupby."""
    import ray.data

    from dedupdb.scaleout import job as jobs

    current = ["?"]
    rounds: dict[str, int] = {}
    stage, idf, groupby = jobs.Job._stage, jobs.Job._idf, ray.data.Dataset.groupby

    def _stage(self, name, build):
        current[0] = name
        return stage(self, name, build)

    def _idf(self, texts):
        current[0] = "idf"
        return idf(self, texts)

    def probed(self, key, num_partitions=None):
        rounds[current[0]] = rounds.get(current[0], 0) + 1
        label = f"{current[0]}.{rounds[current[0]]}"

        def measure(table, label=label, path=path):
            with open(path, "a") as fh:
                fh.write(f"{label}\t{table.num_rows}\t{table.nbytes}\n")
            return table

        return groupby(self.map_batches(measure, batch_format="pyarrow"), key, num_partitions)

    jobs.Job._stage, jobs.Job._idf, ray.data.Dataset.groupby = _stage, _idf, probed


def count_blocks(blocks: dict[str, int]) -> None:
    """Wrap Job._stage (in this process) to note the blocks of each materialized stage (beside the manifest)."""
    from dedupdb.scaleout import job as jobs

    stage = jobs.Job._stage

    def _stage(self, name, build):
        dataset = stage(self, name, build)
        blocks[name] = dataset.num_blocks()
        return dataset

    jobs.Job._stage = _stage


def child_ray(spec: dict) -> dict:
    code = version()  # the commit this process imports (others may commit meanwhile)
    started = time.time()
    import ray

    from dedupdb.config import Settings
    from dedupdb.database import candidate_scheme
    from dedupdb.ingest.records import RecordOptions
    from dedupdb.scaleout import job

    blocks: dict[str, int] = {}
    count_blocks(blocks)
    if spec["probe"]:
        install_probe(spec["probe"])
    imported = time.time()
    job.start_ray(None, spec["workers"])
    ray_started = time.time()
    ends: list[tuple[str, float]] = []

    def progress(stage: str, seconds: float, rows: int) -> None:
        ends.append((stage, time.time()))
        print(f"    [{spec['workers']} workers] {stage:<11} {seconds:8.2f} s {rows:>11,} rows", flush=True)

    settings = Settings()
    job_started = time.time()
    manifest = job.run(spec["inputs"], Path(spec["out"]), settings, candidate_scheme(settings),
                       RecordOptions(text_field="text", id_field="id"), workers=spec["workers"], progress=progress)
    finished = time.time()
    resources = ray.cluster_resources()
    ray.shutdown()
    return {"version": code, "started": started, "imports": imported - started, "ray_start": ray_started - imported,
            "job": finished - ray_started, "shutdown": time.time() - finished, "stage_ends": ends,
            "job_started": job_started, "blocks": blocks,
            "stages": manifest.stages, "counts": manifest.counts, "cpus": resources.get("CPU"),
            "object_store_bytes": resources.get("object_store_memory")}


def child_local(spec: dict) -> dict:
    code = version()  # the commit this process imports (others may commit meanwhile)
    started = time.time()
    from dedupdb import Database
    from dedupdb.ingest.records import RecordOptions

    db = Database.open(spec["db"])
    t0 = time.time()
    summary = db.add(spec["inputs"], records=RecordOptions(text_field="text", id_field="id"))
    seconds = time.time() - t0
    counts = db.store.counts()
    db.close()
    return {"version": code, "started": started, "add": seconds, "records": summary.records, "bad_records": summary.bad_record_count,
            "new_contents": summary.new_contents, "counts": counts}


def run_child(kind: str, spec: dict, workdir: Path) -> dict:
    """Run this script as a child of the given kind; its wall time, the peak memory of its process tree and the
    CPU seconds the tree had used at each sample (to tell how many cores each stage kept busy)."""
    result_path = workdir / f"result-{kind}-{spec.get('workers', 'local')}.json"
    spec = {**spec, "result": str(result_path)}
    command = [sys.executable, str(Path(__file__).resolve()), "--_child", kind, "--_spec", json.dumps(spec)]
    machine_before = _machine_cpu()
    started = time.time()
    process = subprocess.Popen(command)
    peak = {"rss": 0, "pss": 0, "at": 0.0}
    each: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    ticks: dict[int, int] = {}
    series: list[tuple[float, float]] = []  # (time, CPU seconds used by the tree so far)
    hertz = os.sysconf("SC_CLK_TCK")
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_SECONDS):
            rss, pss = _tree_memory(process.pid, each, ticks)
            series.append((time.time(), sum(ticks.values()) / hertz))
            if pss > peak["pss"]:
                peak.update(pss=pss, at=time.time())
            peak["rss"] = max(peak["rss"], rss)
            for pid in each:
                if pid not in names:
                    try:
                        names[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                            errors="replace").strip()[:200] or Path(f"/proc/{pid}/comm").read_text().strip()
                    except OSError:
                        names[pid] = "?"

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = process.wait()
    wall = time.time() - started
    machine = _machine_cpu() - machine_before
    done.set()
    sampler.join()
    left = [pid for pid in names if pid != process.pid and _alive_as(pid, names[pid])]
    for pid in left:  # processes of the child's tree that outlived it: ended by pid
        print(f"  note: process {pid} ({names[pid][:60]}) outlived the benchmark's subprocess; ending it")
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    if code != 0 or not result_path.exists():
        sys.exit(f"the {kind} subprocess failed (exit code {code})")
    result = json.loads(result_path.read_text())
    roles: dict[str, list[int]] = {}
    for pid, (rss, pss) in each.items():
        role = _role(names.get(pid, "?"), pid == process.pid)
        got = roles.setdefault(role, [0, 0, 0])
        got[0], got[1], got[2] = got[0] + 1, got[1] + rss, got[2] + pss
    result.update(wall=wall, peak_rss=peak["rss"], peak_pss=peak["pss"], peak_after=peak["at"] - started,
                  peak_stage=_stage_at(result, peak["at"]), roles=roles,
                  cpu_seconds=series[-1][1] if series else 0.0, busy=_busy(result, series),
                  clock=time.strftime("%H:%M:%S", time.localtime(started)))
    result["others"] = max(0.0, machine - result["cpu_seconds"]) / wall  # cores used by other processes meanwhile
    return result


def _machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (all processes, /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def settled(name: str, retries: int, clear, run) -> dict:
    """run(), again (after clear()) up to `retries` times while other processes disturb it; the last result,
    with the figures of the disturbed attempts' others in 'disturbed_attempts'."""
    attempts = []
    for attempt in range(retries + 1):
        clear()
        result = run()
        if result["others"] <= DISTURBED or attempt == retries:
            break
        attempts.append(result["others"])
        print(f"  {name}: other processes used {result['others']:.2f} cores meanwhile; re-running in "
              f"{RETRY_PAUSE} s ({attempt + 1} of {retries})", flush=True)
        time.sleep(RETRY_PAUSE)
    result["disturbed_attempts"] = attempts
    return result


def disturbed(r: dict) -> str:
    note = f"other processes used {r['others']:.2f} cores on average meanwhile"
    return note + (" (DISTURBED: timings not clean, re-run)" if r["others"] > DISTURBED else "")


def _cpu_at(series: list[tuple[float, float]], at: float) -> float:
    """The tree's CPU seconds at a time, interpolated between samples."""
    import bisect

    i = bisect.bisect_left(series, (at, -1.0))
    if i == 0:
        return series[0][1] if series else 0.0
    if i == len(series):
        return series[-1][1]
    (t0, c0), (t1, c1) = series[i - 1], series[i]
    return c0 + (c1 - c0) * (at - t0) / (t1 - t0) if t1 > t0 else c1


def _busy(result: dict, series: list[tuple[float, float]]) -> dict[str, float]:
    """CPU seconds of the whole tree over each stage's wall seconds: the cores the stage kept busy (at 0.2 s
    sampling: rough for stages under a second or two)."""
    if "stage_ends" not in result or len(series) < 2:
        return {}
    busy, start = {}, result["job_started"]
    for stage, end in result["stage_ends"]:
        if end - start > 0:
            busy[stage] = (_cpu_at(series, end) - _cpu_at(series, start)) / (end - start)
        start = end
    return busy


def _alive_as(pid: int, name: str) -> bool:
    try:
        now = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return False
    return bool(now) and now == name


def _role(cmdline: str, main: bool) -> str:
    if main:
        return "driver" if "--_child ray" in cmdline else "main"
    for role in ("raylet", "gcs_server", "dashboard", "runtime_env", "log_monitor", "monitor.py"):
        if role in cmdline:
            return role
    if cmdline.startswith("ray::") or "default_worker.py" in cmdline:
        return "ray workers"
    return "other"


def _stage_at(result: dict, at: float) -> str:
    if "stage_ends" not in result:
        return "add"
    for stage, end in result["stage_ends"]:
        if at <= end:
            return stage
    return "after the last stage (counts, manifest, shutdown)"


# --- shuffle volume -------------------------------------------------------------------------------------------------

def shuffle_volume(probe: Path, stages: list[dict]) -> dict:
    measured: dict[str, dict[str, int]] = {}
    if probe.exists():
        for line in probe.read_text().splitlines():
            label, rows, nbytes = line.split("\t")
            got = measured.setdefault(label, {"rows": 0, "bytes": 0, "blocks": 0})
            got["rows"] += int(rows)
            got["bytes"] += int(nbytes)
            got["blocks"] += 1
    before = {}
    for previous, stage in zip(stages, stages[1:]):
        if stage["stage"] in SHUFFLING:
            before[stage["stage"]] = {"stage": previous["stage"], "bytes": previous["bytes"]}
    return {"groupbys": measured, "proxy": before}


# --- agreement ------------------------------------------------------------------------------------------------------

def compare(job_out: Path, db_path: Path, texts: dict[str, str], show: int = 10) -> dict:
    import pyarrow.dataset as ds

    from dedupdb import Database

    folder = job_out / "pairs"
    table = ds.dataset(folder, format="parquet").to_table(columns=["a", "b", "jaccard", "exact"]) \
        if any(folder.iterdir()) else None
    job = {} if table is None else {(a, b): (j, e) for a, b, j, e in zip(
        table.column("a").to_pylist(), table.column("b").to_pylist(), table.column("jaccard").to_pylist(),
        table.column("exact").to_pylist())}
    db = Database.open(db_path, readonly=True)
    try:
        local = {(p.a, p.b): (p.jaccard, p.exact) for p in db.pairs()}
        both = job.keys() & local.keys()
        union = len(job.keys() | local.keys())
        jaccard_differs = [(k, job[k][0], local[k][0]) for k in sorted(both) if abs(job[k][0] - local[k][0]) > 1e-9]
        exact_differs = sum(1 for k in both if job[k][1] != local[k][1])

        def examples(only: set, side: dict, other: str) -> list[dict]:
            out = []
            for a, b in sorted(only)[:show]:
                row = {"a": a, "b": b, "jaccard": side[(a, b)][0], "exact": side[(a, b)][1]}
                ta, tb = texts.get(a.rsplit("#", 1)[1]), texts.get(b.rsplit("#", 1)[1])
                row[f"{other}_recomputed"] = None if ta is None or tb is None else db.similarity(ta, tb)
                out.append(row)
            return out

        result = {
            "job": len(job), "local": len(local), "intersection": len(both), "union": union,
            "ratio": len(both) / union if union else 1.0,
            "job_only": len(job.keys() - local.keys()), "local_only": len(local.keys() - job.keys()),
            "jaccard_differs": len(jaccard_differs), "exact_differs": exact_differs,
            "jaccard_differs_examples": [{"a": k[0], "b": k[1], "job": x, "local": y} for k, x, y in jaccard_differs[:show]],
            "job_only_examples": examples(job.keys() - local.keys(), job, "local"),
            "local_only_examples": examples(local.keys() - job.keys(), local, "job"),
            "threshold": db.settings.threshold,
        }
    finally:
        db.close()
    return result


# --- printing -------------------------------------------------------------------------------------------------------

def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def print_ray(r: dict, docs: int) -> None:
    w = r["workers"]
    print(f"\nRay job, {w} worker{'s' if w > 1 else ''} (local runtime, {r['cpus']:.0f} CPUs, object store "
          f"{mib(r['object_store_bytes'] or 0)}): {r['counts']}")
    print(f"  {'stage':<11} {'seconds':>8} {'share':>6} {'rows':>11} {'rows/s':>10} {'rows/s/core':>11} "
          f"{'docs/s':>9} {'out MB':>8} {'blocks':>6} {'busy cores':>10}")
    total = sum(s["seconds"] for s in r["stages"])
    for s in r["stages"]:
        sec = s["seconds"]
        rate = s["rows"] / sec if sec else 0.0
        blocks = r.get("blocks", {}).get(s["stage"])
        busy = r.get("busy", {}).get(s["stage"])
        print(f"  {s['stage']:<11} {sec:8.2f} {sec / r['job'] * 100:5.1f}% {s['rows']:>11,} {rate:>10,.0f} "
              f"{rate / w:>11,.0f} {docs / sec if sec else 0:>9,.0f} {s['bytes'] / 1e6:>8.1f} "
              f"{'-' if blocks is None else blocks:>6} {'-' if busy is None else f'{busy:.2f}':>10}")
    print(f"  {'(stages)':<11} {total:8.2f} {total / r['job'] * 100:5.1f}%   job outside the stages (counts, filters): "
          f"{r['job'] - total:.2f} s")
    print(f"  wall {r['wall']:.1f} s = imports {r['imports']:.1f} + Ray start {r['ray_start']:.1f} + job {r['job']:.1f} "
          f"+ shutdown {r['shutdown']:.1f} + process start/exit {r['wall'] - r['imports'] - r['ray_start'] - r['job'] - r['shutdown']:.1f}")
    print(f"  CPU used by the process tree: {r['cpu_seconds']:.1f} s over the {r['wall']:.1f} s wall "
          f"(busy cores: CPU seconds of the whole tree, Ray's daemons included, over a stage's seconds)")
    print(f"  started {r['clock']}, dedupdb at {r['version']}; {disturbed(r)}")
    print(f"  {docs / r['wall']:,.0f} docs/s on the wall time ({docs / r['wall'] / w:,.0f} per core); "
          f"{docs / r['job']:,.0f} docs/s on the job alone ({docs / r['job'] / w:,.0f} per core)")
    print(f"  peak memory of the process tree: PSS {mib(r['peak_pss'])} (RSS summed {mib(r['peak_rss'])}), "
          f"{r['peak_after']:.0f} s in, during '{r['peak_stage']}'")
    print("  peak PSS by role (each process's own peak, summed; not simultaneous): " + "; ".join(
        f"{role} x{n} {mib(pss)}" for role, (n, _, pss) in sorted(r["roles"].items(), key=lambda x: -x[1][2])))
    v = r["shuffle"]
    if v["groupbys"] or v["proxy"]:
        print("  shuffle volume (measured: Arrow bytes of the blocks entering each groupby; proxy: the previous "
              "stage's output size):")
        print(f"    {'groupby':<14} {'blocks':>7} {'rows':>12} {'MB':>9} {'bytes/doc':>10}   proxy")
        measured_total = 0
        for stage in SHUFFLING:
            labels = sorted(k for k in v["groupbys"] if k.split(".")[0] == stage)
            proxy = v["proxy"].get(stage)
            proxy_text = f"{proxy['stage']} out {proxy['bytes'] / 1e6:.1f} MB" if proxy else "-"
            for i, label in enumerate(labels):
                g = v["groupbys"][label]
                measured_total += g["bytes"]
                print(f"    {label:<14} {g['blocks']:>7,} {g['rows']:>12,} {g['bytes'] / 1e6:>9.1f} "
                      f"{g['bytes'] / docs:>10,.0f}   {proxy_text if i == 0 else ''}")
            if not labels and proxy:
                print(f"    {stage:<14} {'-':>7} {'-':>12} {'-':>9} {'-':>10}   {proxy_text}")
        proxy_total = sum(p["bytes"] for p in v["proxy"].values())
        print(f"    {'total':<14} {'':>7} {'':>12} {measured_total / 1e6:>9.1f} {measured_total / docs:>10,.0f}   "
              f"{proxy_total / 1e6:.1f} MB, {proxy_total / docs:,.0f} bytes/doc")
        r["shuffle"]["measured_bytes"], r["shuffle"]["proxy_bytes"] = measured_total, proxy_total
        print("    (the proxy misses where a map makes the groupby's input: idf groups bucket counts, not texts; "
              "candidates groups band rows, not signatures; clusters groups the documents, not components)")


def print_compare(c: dict, workers: int) -> None:
    print(f"\nagreement, job ({workers} workers) pairs/ against Database.pairs() of the local store (document keys):")
    print(f"  |job| {c['job']:,}  |local| {c['local']:,}  |intersection| {c['intersection']:,}  |union| {c['union']:,}  "
          f"intersection/union {c['ratio']:.6f}")
    print(f"  job only {c['job_only']:,}, local only {c['local_only']:,}; of the common pairs, jaccard differs by more "
          f"than 1e-9: {c['jaccard_differs']:,}, exact flag differs: {c['exact_differs']:,}")
    short = lambda key: key.rsplit("/", 1)[-1]  # noqa: E731
    for name, other in (("job_only", "local"), ("local_only", "job")):
        for e in c[f"{name}_examples"]:
            print(f"    {name.replace('_', ' ')}: {short(e['a'])} ~ {short(e['b'])}: jaccard {e['jaccard']:.4f}"
                  f"{' exact' if e['exact'] else ''}; {other} side not listed, Database.similarity of the texts "
                  f"{e[f'{other}_recomputed']}")
    for e in c["jaccard_differs_examples"]:
        print(f"    jaccard differs: {short(e['a'])} ~ {short(e['b'])}: job {e['job']!r}, local {e['local']!r}")


# --- main -----------------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(
        description="Time the scale-out job on a local Ray runtime (per worker count) against `dedupdb add`.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--limit", type=int, default=100_000, help="documents of the corpus (N)")
    parser.add_argument("--variants", type=int, default=None, help="edited variants added (K; default 20%% of N)")
    parser.add_argument("--shards", type=int, default=4, help="JSONL shards the input is split into")
    parser.add_argument("--workers", default="1,2", help="worker counts (CPUs of the local Ray runtime), comma-separated")
    parser.add_argument("--seed", type=int, default=1, help="seed of the variants")
    parser.add_argument("--compare", action="store_true", help="compare each job's pairs with the local store's")
    parser.add_argument("--skip-local", action="store_true", help="no local add (and so no --compare)")
    parser.add_argument("--no-probe", action="store_true", help="do not measure the blocks entering each groupby")
    parser.add_argument("--retries", type=int, default=0,
                        help="re-run a timed subprocess up to this many times while other processes use more than "
                             f"{DISTURBED} cores meanwhile (a shared machine)")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument("--workdir", type=Path, default=None, help="folder for the shards and outputs (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder afterwards")
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    parser.add_argument("--_spec", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args._child:
        spec = json.loads(args._spec)
        result = child_ray(spec) if args._child == "ray" else child_local(spec)
        Path(spec["result"]).write_text(json.dumps(result))
        return

    import dedupdb

    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    variants = args.variants if args.variants is not None else args.limit // 5
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dedupdb-bench-ray-"))
    marker = workdir / ".bench_ray"  # a folder this script made: the only kind it empties or removes
    if args.workdir and workdir.exists() and any(workdir.iterdir()):
        if not marker.exists():
            sys.exit(f"{workdir}: not empty and not a folder of this script's; give a new or empty --workdir")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    marker.touch()
    print(f"dedupdb {dedupdb.__version__} at commit {version()}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs; work folder {workdir}", flush=True)
    report: dict = {"version": version(), "limit": args.limit, "shards": args.shards, "workers": workers}
    try:
        t0 = time.perf_counter()
        docs = load_docs(args.limit)
        items, made = with_variants(docs, variants, args.seed)
        inputs, size = write_shards(items, workdir / "input", args.shards)
        n = len(items)
        report.update(documents=n, originals=len(docs), variants=made, input_bytes=size)
        print(f"input: first {len(docs):,} of {EVAL_DIR / CORPUS} + {variants:,} variants ({made['exact_copies']:,} "
              f"exact copies, {made['of_variants']:,} of an earlier variant) = {n:,} documents, {size / 1e6:.1f} MB "
              f"of JSONL in {len(inputs)} shards ({time.perf_counter() - t0:.1f} s)", flush=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", WARM_UP], check=True)
        print(f"compiled sketching, verifying and decoding loaded (or compiled) in a process of its own: "
              f"{time.perf_counter() - t0:.1f} s",
              flush=True)
        del docs

        local = None
        if not args.skip_local:
            print("\nlocal add ...", flush=True)
            db = workdir / "local.db"

            def clear_db() -> None:
                for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
                    path.unlink(missing_ok=True)

            local = settled("local add", args.retries, clear_db,
                            lambda: run_child("local", {"inputs": [str(p) for p in inputs], "db": str(db)}, workdir))
            report["local"] = local
            print(f"local `Database.add` (default workers, {os.cpu_count()} CPUs): {local['records']:,} records, "
                  f"{local['counts']}")
            print(f"  add {local['add']:.1f} s: {n / local['add']:,.0f} docs/s ({n / local['add'] / os.cpu_count():,.0f} "
                  f"per core); wall {local['wall']:.1f} s (process start, imports, open, add, close): "
                  f"{n / local['wall']:,.0f} docs/s; peak memory of the process tree: PSS {mib(local['peak_pss'])} "
                  f"(RSS summed {mib(local['peak_rss'])}); CPU {local['cpu_seconds']:.1f} s "
                  f"({local['cpu_seconds'] / local['wall']:.2f} busy cores)", flush=True)
            print(f"  started {local['clock']}, dedupdb at {local['version']}; {disturbed(local)}", flush=True)

        runs = []
        for w in workers:
            print(f"\nRay job, {w} workers ...", flush=True)
            probe = workdir / f"probe-{w}.tsv"
            out = workdir / f"out-{w}"

            def clear_out(out: Path = out, probe: Path = probe) -> None:
                shutil.rmtree(out, ignore_errors=True)
                probe.unlink(missing_ok=True)

            r = settled(f"Ray job, {w} workers", args.retries, clear_out, lambda w=w, out=out, probe=probe: run_child(
                "ray", {"workers": w, "inputs": [str(p) for p in inputs], "out": str(out),
                        "probe": None if args.no_probe else str(probe)}, workdir))
            r["workers"] = w
            r["shuffle"] = shuffle_volume(probe, r["stages"])
            print_ray(r, n)
            runs.append(r)
        report["ray"] = runs

        print(f"\nsummary ({n:,} documents)")
        print(f"  {'run':<26} {'wall s':>8} {'docs/s':>9} {'per core':>9} {'work s':>8} {'docs/s':>9} {'peak PSS':>10} "
              f"{'others':>7}")
        if local:
            c = os.cpu_count() or 1
            print(f"  {'local add':<26} {local['wall']:>8.1f} {n / local['wall']:>9,.0f} {n / local['wall'] / c:>9,.0f} "
                  f"{local['add']:>8.1f} {n / local['add']:>9,.0f} {mib(local['peak_pss']):>10} {local['others']:>7.2f}")
        for r in runs:
            name = f"ray job, {r['workers']} worker{'s' if r['workers'] > 1 else ''}"
            print(f"  {name:<26} {r['wall']:>8.1f} {n / r['wall']:>9,.0f} {n / r['wall'] / r['workers']:>9,.0f} "
                  f"{r['job']:>8.1f} {n / r['job']:>9,.0f} {mib(r['peak_pss']):>10} {r['others']:>7.2f}")
        print("  (work s: the add call, or job.run after Ray start-up; local add uses every core: per core is over "
              f"{os.cpu_count()}; others: cores other processes used meanwhile, above {DISTURBED} the timings are "
              "disturbed)")

        if args.compare and local:
            texts = {rid: text for rid, text in items}
            report["compare"] = {}
            for r in runs:
                c = compare(workdir / f"out-{r['workers']}", workdir / "local.db", texts)
                report["compare"][str(r["workers"])] = c
                print_compare(c, r["workers"])
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
            print(f"\nfigures written to {args.json}")
    finally:
        if args.keep:
            print(f"work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
