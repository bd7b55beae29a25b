#!/usr/bin/env python
"""Benchmark dedupdb query latency on a large store, against an in-memory datasketch MinHashLSH.

The store holds N documents synthesized from the evaluation corpora (IMDB,
Reuters, BBC, SophonPlus reviews, THUCNews titles): every corpus text once
(up to N/4 of them), then edited variants of those texts (random word and
character substitutions, deleted spans, appended suffixes) until N is reached.
Generation is deterministic for a given --seed, so a store built once can be
reused with --db.

The store is built as a user would build it: the documents are written as JSONL
record files of 50,000 records each, and each file is added by `dedupdb add FILE
--records jsonl --id-field id` in a process of its own (start-up included); the
build time counts the adds only, and the peak PSS of each add's process tree (the
add and its workers) is sampled. Each add is noted in PATH.pace.jsonl beside the
store, so an interrupted build with --db goes on where it stopped. Up to a
quarter of the documents are corpus texts, each the base of a family of about
four; past four times the corpora (about 900,000 documents) the bases beyond them
are remixes of corpus texts (three fifths of their words or characters replaced),
so that families stay the same size at ten million.

Then it times, in the same run:
  * Database.query over --queries texts (half edited versions of stored documents,
    half held-out corpus texts that were never stored), a pass with near-duplicates
    alone (containment=None) and one with the default containment: median, p90, p99,
    in a process of its own (after a warm-up) whose peak RSS is reported;
  * with --optimized, the same on an optimized copy of the store (`dedupdb optimize`), its query processes
    alternating with the store's as built (--passes of each), and whether both answer alike;
  * a cold `dedupdb query TEXT --db PATH` subprocess (new process; OS page cache warm), median of 5;
  * datasketch: MinHash(num_perm=128) + MinHashLSH(threshold=0.5).query on an
    in-memory index of a --ds-n subset (containing the sources of the edited queries).
  * optionally (--same-size) dedupdb on a store of that same subset.

Usage:
    python scripts/bench_query.py --n 20000
    python scripts/bench_query.py --n 1000000 --db /tmp/bench-1m.db    # built once, reused afterwards
    python scripts/bench_query.py --n 1000000 --db /tmp/bench-1m.db --optimized --passes 2
    python scripts/bench_query.py --n 400000 --order mixed --skip-datasketch --chart docs/img/add-pace.png

--chart PATH.png also draws the add's pace as the store grows: the documents/s of each record file against the
documents stored (needs matplotlib, from the bench extra; only when the store is built in this run).
"""

from __future__ import annotations

import argparse
import atexit
import gzip
import importlib.util
import json
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dedupdb
from dedupdb.config import QUERY_CONTAINMENT
from dedupdb.errors import InputError
from dedupdb.sketch.winnowing import Side
from dedupdb.text.normalize import normalize

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"
CORPORA = [
    "en_imdb_aclImdb.jsonl.gz",
    "en_reuters21578.jsonl.gz",
    "en_bbc_fulltext.jsonl.gz",
    "zh_sophonplus_reviews.jsonl.gz",
    "zh_thucnews_titles_devtest.jsonl.gz",
]
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
SUFFIXES_EN = [
    "\n\nSent from my phone {n}",
    "\n-- \nposted via https://example.com/r/{n}",
    " #review #movies #{n}",
    "\n\n(Updated {n})",
    "\nRead more: http://news.example.org/story/{n}.html",
]
SUFFIXES_ZH = ["（转载{n}）", "【来源：网络 {n}】", " #好评# {n}", "——发自手机客户端{n}", "，欢迎关注{n}"]
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the synthetic corpus ------------------------------------------------------------


def is_cjk(text: str) -> bool:
    sample = text[:2000]
    visible = sum(1 for ch in sample if not ch.isspace())
    return visible > 0 and 2 * len(CJK.findall(sample)) >= visible


class Corpus:
    """Deterministic: document i and every query depend only on the seed and i."""

    def __init__(self, n: int, seed: int, holdout: int) -> None:
        texts = []
        for name in CORPORA:
            path = EVAL_DIR / name
            if not path.exists():
                sys.exit(f"corpus not found: {path}")
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                texts += [t for t in (json.loads(line)["text"] for line in fh) if normalize(t)]
        random.Random(seed).shuffle(texts)
        self.unrelated = texts[:holdout]          # never stored, never a variant's source
        pool = texts[holdout:]
        self.n = n
        self.stored = n  # documents 0 .. stored - 1 are in the store (--stop-at)
        self.seed = seed
        # A quarter of the documents are distinct texts, each the base of a family of about four. Past four times
        # the corpora (some 900,000 documents), the bases beyond them are remixes of corpus texts (most of their
        # words or characters replaced: distinct texts of the same lengths and languages), so that families stay
        # about four documents at ten million instead of growing to forty.
        self.bases = math.ceil(n / 4)
        self.pool = pool[: self.bases]
        self.pool_cjk = [is_cjk(t) for t in self.pool]
        en_words, zh_chars = set(), set()
        for text, cjk in zip(self.pool[:5000], self.pool_cjk[:5000]):
            if cjk:
                zh_chars.update(CJK.findall(text))
            else:
                en_words.update(w.lower() for w in text.split() if w.isalpha())
        self.vocab_en = sorted(en_words) or ["word"]
        self.vocab_zh = sorted(zh_chars) or ["字"]

    def base_of(self, i: int) -> int:
        """The base (family) of stored document i."""
        return i if i < self.bases else random.Random(self.seed * 1_000_000_007 + i).randrange(self.bases)

    def base_text(self, base: int) -> tuple[str, bool]:
        """A base's text and whether it is Chinese: a corpus text, or past them a remix of one."""
        source = base % len(self.pool)
        text, cjk = self.pool[source], self.pool_cjk[source]
        if base < len(self.pool):
            return text, cjk
        rng = random.Random(self.seed * 998_244_353 + base)
        units = list(text) if cjk else text.split()
        places = rng.sample(range(len(units)), (len(units) * 3 + 4) // 5)  # three fifths replaced
        for place, unit in zip(places, rng.choices(self.vocab_zh if cjk else self.vocab_en, k=len(places))):
            units[place] = unit
        return ("".join(units) if cjk else " ".join(units)), cjk

    def document(self, i: int) -> tuple[str, int]:
        """Text of stored document i and the base text it comes from."""
        if i < self.bases:
            return self.base_text(i)[0], i
        rng = random.Random(self.seed * 1_000_000_007 + i)
        base = rng.randrange(self.bases)
        text, cjk = self.base_text(base)
        return self.mutate(text, rng, cjk), base

    def mutate(self, text: str, rng: random.Random, cjk: bool | None = None) -> str:
        """One to three edits: word substitutions, character typos, a deleted span, an appended suffix."""
        cjk = is_cjk(text) if cjk is None else cjk
        units = list(text) if cjk else text.split()
        ops = rng.sample(["words", "chars", "delete", "suffix"], rng.randint(1, 3))
        for op in ops:
            if not units:
                break
            n = len(units)
            if op == "words":
                for _ in range(max(1, round(n * rng.uniform(0.01, 0.08)))):
                    units[rng.randrange(n)] = rng.choice(self.vocab_zh if cjk else self.vocab_en)
            elif op == "chars":
                for _ in range(max(1, round(n * rng.uniform(0.01, 0.05)))):
                    p = rng.randrange(n)
                    if cjk:
                        units[p] = rng.choice(self.vocab_zh)
                    else:
                        w = units[p]
                        c = rng.randrange(len(w))
                        units[p] = w[:c] + rng.choice(LETTERS) + w[c + 1 :]
            elif op == "delete" and n > 5:
                k = max(1, round(n * rng.uniform(0.01, 0.06)))
                start = rng.randrange(n - k + 1)
                del units[start : start + k]
        out = "".join(units) if cjk else " ".join(units)
        if "suffix" in ops:
            out += rng.choice(SUFFIXES_ZH if cjk else SUFFIXES_EN).format(n=rng.randrange(10**6))
        return out

    def queries(self, count: int) -> list[tuple[str, str, int | None]]:
        """(kind, text, stored document it was edited from or None), shuffled."""
        rng = random.Random(self.seed + 7)
        out = []
        for _ in range(count - count // 2):
            while True:
                j = rng.randrange(self.stored)
                text, _ = self.document(j)
                q = self.mutate(text, rng)
                if normalize(q):
                    break
            out.append(("edited", q, j))
        out += [("unrelated", t, None) for t in self.unrelated[: count // 2]]
        rng.shuffle(out)
        return out


def version() -> str:
    """The dedupdb commit benchmarked (with '+dirty' when its tree has uncommitted changes)."""
    root = Path(dedupdb.__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "dedupdb", "migrations"],
                               capture_output=True, text=True)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if rev.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


SHARD_DOCS = 50_000  # documents per JSONL record file


def write_shard(path: Path, corpus: Corpus, ids: list[int]) -> None:
    if path.exists():
        return  # same seed, same ids: the same bytes
    tmp = path.with_suffix(f".{os.getpid()}.partial")  # a --shards-only process may write the same shard ahead
    with open(tmp, "w", encoding="utf-8") as fh:
        for i in ids:
            fh.write(json.dumps({"id": str(i), "text": corpus.document(i)[0]}, ensure_ascii=False) + "\n")
    tmp.rename(path)


def build_store(db_path: Path, corpus: Corpus, ids: list[int], shard_dir: Path, label: str, order: str,
                pace: list[tuple[int, float]] | None = None) -> float:
    """Index documents ids as a user would: `dedupdb add FILE --records jsonl --id-field id` in a process of its
    own for each JSONL record file of SHARD_DOCS documents, start-up included, the peak PSS of its process tree
    (the add and its workers) sampled. Each file's add is appended to a pace file beside the store, so an
    interrupted build resumes after the files it has. Prints the pace of each tenth: whether an add slows as the
    store grows. Each file this run indexed appends (documents, seconds of its add) to pace when given."""
    shard_dir.mkdir(parents=True, exist_ok=True)
    spent = write_seconds = 0.0
    done = 0
    shard_seconds: list[tuple[int, float]] = []
    peak_pss = 0
    pace_file = db_path.with_name(db_path.name + ".pace.jsonl")
    indexed = {}
    if pace_file.exists():
        for line in pace_file.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            indexed[entry["shard"]] = entry
    for k, first in enumerate(range(0, len(ids), SHARD_DOCS)):
        chunk = ids[first : first + SHARD_DOCS]
        done += len(chunk)
        if k in indexed:
            shard_seconds.append((len(chunk), indexed[k]["seconds"]))
            spent += indexed[k]["seconds"]
            peak_pss = max(peak_pss, indexed[k]["peak_pss_mib"] * 2**20)
            continue
        shard = shard_dir / f"shard-{k:04d}.jsonl"
        t0 = time.perf_counter()
        write_shard(shard, corpus, chunk)
        t1 = time.perf_counter()
        seconds, pss = add_measured(db_path, shard)
        write_seconds += t1 - t0
        spent += seconds
        peak_pss = max(peak_pss, pss)
        with open(pace_file, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"shard": k, "stored": done, "docs": len(chunk), "seconds": round(seconds, 3),
                                 "peak_pss_mib": round(pss / 2**20)}) + "\n")
        shard_seconds.append((len(chunk), seconds))
        if pace is not None:
            pace.append((len(chunk), seconds))
        log(f"[{label}] {done:>10,}/{len(ids):,} docs  add {spent:7.0f} s  this file {len(chunk) / seconds:,.0f} "
            f"docs/s  peak PSS of the add's processes {pss / 2**20:,.0f} MiB (of the build {peak_pss / 2**20:,.0f})  "
            f"load {os.getloadavg()[0]:.1f}")
    db = dedupdb.open(db_path)
    with db.store.transaction():
        db.store.write_meta({"bench.n": str(len(ids)), "bench.seed": str(corpus.seed), "bench.order": order})
    db.close()
    log(f"[{label}] generating and writing the JSONL shards took {write_seconds:.0f} s (not counted)")
    tenth = max(1, len(shard_seconds) // 10)
    first_rate = None
    for t in range(0, len(shard_seconds), tenth):
        part = shard_seconds[t : t + tenth]
        rate = sum(n for n, _ in part) / sum(s for _, s in part)
        first_rate = first_rate or rate
        log(f"[{label}] the {sum(n for n, _ in part):,} documents from {t * SHARD_DOCS:,}: {rate:,.0f} docs/s "
            f"({rate / first_rate:.0%} of the first's pace)")
    log(f"[{label}] peak PSS of the add's processes (an add and its workers) {peak_pss / 2**20:,.0f} MiB")
    return spent


def add_measured(db_path: Path, shard: Path) -> tuple[float, int]:
    """`dedupdb add` of one record file in a process of its own: (seconds, peak PSS of its process tree), the
    tree's memory sampled every 0.25 s from /proc (a scan of /proc costs milliseconds: often, it would slow the
    add it measures)."""
    from bench_add import run_measured

    command = [*cli_command(), "add", str(shard), "--db", str(db_path), "--records", "jsonl",
               "--text-field", "text", "--id-field", "id"]
    measured = run_measured(command, f"dedupdb add {shard}", interval=0.25)
    return measured["seconds"], measured["peak_pss"]


def open_or_build(path: Path, corpus: Corpus, ids: list[int], shard_dir: Path, label: str,
                  pace: list[tuple[int, float]] | None = None):
    db = dedupdb.open(path)
    meta = db.store.read_meta()
    order = "mixed" if ids != sorted(ids) else "generated"
    if "bench.n" in meta and meta.get("bench.order", "generated") != order:
        sys.exit(f"{path} was built in another --order; give a new --db")
    if meta.get("bench.n") == str(len(ids)) and meta.get("bench.seed") == str(corpus.seed):
        log(f"[{label}] reusing {path}")
        return db, None
    if meta.get("bench.seed", str(corpus.seed)) != str(corpus.seed):
        sys.exit(f"{path} was built with another --seed; give a new --db")
    db.close()
    spent = build_store(path, corpus, ids, shard_dir, label, order, pace)
    return dedupdb.open(path), spent


def check_pairs(db, corpus: Corpus, build_ids: list[int], shard_dir: Path, samples: int, controls: int) -> dict:
    """The stored pairs against brute force on a sample: each of `samples` documents is judged, as an add judges
    a candidate (sketch/verify.py judge: the Jaccard of the shingles with enough evidence), against every other
    member of its family and against `controls` documents drawn at random, all of them, with no index; the pairs
    it finds are looked for among the pairs the store holds, and the stored pairs among those documents that
    brute force does not confirm are counted false."""
    import numpy as np

    from dedupdb.sketch.verify import Signature, judge

    n = corpus.stored  # generated order: documents 0 .. n - 1 are stored
    rng = random.Random(corpus.seed + 17)
    position = np.empty(corpus.n, np.int64)
    position[np.asarray(build_ids)] = np.arange(len(build_ids))
    bases = np.fromiter((corpus.base_of(i) for i in range(n)), np.int64, n)
    order = np.argsort(bases, kind="stable")
    starts = np.searchsorted(bases[order], bases)
    sample = rng.sample(range(n), samples)
    control = rng.sample(range(n), controls)
    families = {}
    for i in sample:
        start = starts[i]
        end = np.searchsorted(bases[order], bases[i], side="right")
        families[i] = [int(j) for j in order[start:end] if j != i]
    wanted = set(sample) | set(control) | {j for f in families.values() for j in f}
    key_of = {i: f"{shard_dir}/shard-{position[i] // SHARD_DOCS:04d}.jsonl#{i}" for i in wanted}
    content = {key: cid for _, cid, key in db.store.documents_by_keys(list(key_of.values()))}
    missing = [i for i in wanted if key_of[i] not in content]
    stored = db.store.pair_scores(sorted(set(content.values())))
    settings = db.settings
    signature = {}
    for i in wanted:
        fp = db.fingerprinter.one(normalize(corpus.document(i)[0]))
        signature[i] = Signature(fp.sketch, fp.simhash)
    true = found = judged = same = 0
    false_stored = 0
    misses = []
    for i in sample:
        for j in set(families[i]) | set(control):
            if j == i or key_of[i] not in content or key_of[j] not in content:
                continue
            a, b = sorted((content[key_of[i]], content[key_of[j]]))
            if a == b:
                same += 1  # one text: an exact copy, no pair row
                continue
            judged += 1
            verdict = judge(signature[i], signature[j], settings.threshold, settings.simhash_distance,
                            settings.sketch_size)
            if verdict.duplicate:
                true += 1
                if (a, b) in stored:
                    found += 1
                else:
                    misses.append((i, j, verdict.jaccard))
            elif (a, b) in stored:
                false_stored += 1
    return {"samples": samples, "controls": controls, "judged": judged, "same_text": same, "true": true,
            "found": found, "misses": misses[:10], "false_stored": false_stored, "missing_documents": len(missing)}


def print_check(checked: dict | None, db_path: Path, counts: dict, n: int) -> None:
    """The result of check_pairs, on one line."""
    if not checked:
        return
    c = checked
    print(f"{db_path} ({n:,} documents): {counts}")
    print(f"pairs against brute force ({c['samples']:,} documents, each judged against its family and "
          f"{c['controls']:,} random documents, {c['judged']:,} pairs judged, {c['seconds']:.0f} s): "
          f"{c['found']:,} of {c['true']:,} duplicate pairs stored (recall {c['found'] / max(1, c['true']):.4f}); "
          f"{c['false_stored']} stored pairs brute force does not confirm; {c['same_text']} pairs of one text "
          f"(exact copies); {c['missing_documents']} documents not found by key")


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


# --- measuring ---------------------------------------------------------------------------


def percentiles(values: list[float]) -> tuple[float, float, float, float]:
    """median, p90, p99, max in milliseconds."""
    v = sorted(values)
    pick = lambda q: v[min(len(v) - 1, math.ceil(q * len(v)) - 1)]  # noqa: E731
    return statistics.median(v) * 1e3, pick(0.90) * 1e3, pick(0.99) * 1e3, v[-1] * 1e3


QUERY_KINDS = {"near": None, "default": QUERY_CONTAINMENT}  # containment: None is near-duplicates alone


def process_peak_mb() -> float:
    """This process's peak resident memory: the kernel's high-water mark of its own address space (ru_maxrss
    also counts what the process it was forked from held)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def time_dedupdb_queries(db, queries, warmup, rounds: int = 1, answers: Path | None = None) -> dict:
    """Times Database.query on every query, a pass of each kind (near-duplicates alone, then the default with
    containment), after the warm-up; with answers, writes every query's hits of each kind there (JSON lines)."""
    for _ in range(rounds):
        for _, text, _ in warmup:
            for containment in QUERY_KINDS.values():
                try:
                    db.query(text, containment=containment)
                except InputError:
                    pass
    out = {}
    kept = []
    for name, containment in QUERY_KINDS.items():
        times = {"edited": [], "unrelated": []}
        found = hits_total = errors = false_hits = 0
        for number, (kind, text, source) in enumerate(queries):
            t0 = time.perf_counter()
            try:
                hits = db.query(text, top=0, containment=containment)
            except InputError:
                errors += 1
                continue
            times[kind].append(time.perf_counter() - t0)
            hits_total += len(hits)
            if source is not None:
                found += any(h.record == str(source) for h in hits)
            elif hits:
                false_hits += 1
            if answers is not None:
                kept.append({"kind": name, "query": number, "hits": sorted(
                    [h.key, h.jaccard, h.hamming, h.exact, h.containment] for h in hits)})
        out[name] = {"times": times, "found": found, "hits": hits_total, "errors": errors, "false_hits": false_hits}
    if answers is not None:
        answers.write_text("".join(json.dumps(k) + "\n" for k in kept), encoding="utf-8")
    # Where the time goes: the same queries through the lower-level calls.
    parts = {"fingerprint": [], "search": [], "containment": [], "documents": []}
    finder = db.indexer.containment
    for _, text, _ in queries:
        t0 = time.perf_counter()
        normalized = normalize(text)
        if not normalized:
            continue
        fp = db.fingerprinter.one(normalized)
        if not fp.shingles:
            continue
        t1 = time.perf_counter()
        matches = db.indexer.search(fp)
        t2 = time.perf_counter()
        finder.search(Side(fp.shingles, fp.sketch, fp.fingerprints, fp.simhash), fp.fingerprints, QUERY_CONTAINMENT)
        t3 = time.perf_counter()
        db.store.documents_of_contents([m.content_id for m in matches])
        t4 = time.perf_counter()
        parts["fingerprint"].append(t1 - t0)
        parts["search"].append(t2 - t1)
        parts["containment"].append(t3 - t2)
        parts["documents"].append(t4 - t3)
    out["parts"] = {k: statistics.median(v) * 1e3 for k, v in parts.items()}
    out["process_peak_mb"] = process_peak_mb()
    return out


def query_process(db_path: Path, queries, warmup, rounds: int, answers: Path | None, tmpdir: Path) -> dict:
    """time_dedupdb_queries in a process of its own, which holds the store and the query texts only (not the
    corpora this one loaded): its peak memory is a query process's."""
    job = tmpdir / "queries.json"
    job.write_text(json.dumps({"db": str(db_path), "queries": queries, "warmup": warmup, "rounds": rounds,
                               "answers": str(answers) if answers else None}), encoding="utf-8")
    proc = subprocess.run([sys.executable, __file__, "--query-job", str(job)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the query process failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def optimized_copy(db_path: Path, tmpdir: Path) -> tuple[Path, float]:
    """A copy of the store (its file and write-ahead log, nothing writing them) optimized by `dedupdb optimize`,
    and the seconds that took."""
    copy = tmpdir / "optimized.db"
    for suffix in ("", "-wal"):
        source = Path(f"{db_path}{suffix}")
        if source.exists():
            shutil.copyfile(source, Path(f"{copy}{suffix}"))
    log(f"optimizing a copy of {db_path}")
    t0 = time.perf_counter()
    proc = subprocess.run(cli_command() + ["optimize", "--db", str(copy)], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"dedupdb optimize failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    log(proc.stdout.strip())
    return copy, seconds


def run_query_job(job: Path) -> None:
    spec = json.loads(job.read_text(encoding="utf-8"))
    db = dedupdb.open(Path(spec["db"]), create=False)
    result = time_dedupdb_queries(db, [tuple(q) for q in spec["queries"]], [tuple(w) for w in spec["warmup"]],
                                  spec["rounds"], Path(spec["answers"]) if spec["answers"] else None)
    result["compiled_sketching"] = "dedupdb.sketch.fastsketch" in sys.modules
    db.close()
    print(json.dumps(result))


def cli_command() -> list[str]:
    exe = Path(sys.executable).parent / "dedupdb"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dedupdb"]


def time_cli(db_path: Path, texts: list[str]) -> tuple[float, list[float], float]:
    """Median wall seconds of `dedupdb query TEXT --db PATH` (one per text) and of `dedupdb --help`. The package's
    bytecode is compiled first, as installing it does (an editable install run with PYTHONDONTWRITEBYTECODE
    would compile every module at every start)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(dedupdb.__file__).parent)], capture_output=True)
    walls = []
    for text in texts:
        t0 = time.perf_counter()
        proc = subprocess.run(cli_command() + ["query", text, "--db", str(db_path)], capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            log(f"CLI query failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    helps = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run(cli_command() + ["--help"], capture_output=True)
        helps.append(time.perf_counter() - t0)
    return statistics.median(walls), walls, statistics.median(helps)


def ds_minhash(text: str):
    from datasketch import MinHash

    words = text.lower().split()
    if len(words) >= 3:
        shingles = {" ".join(words[j : j + 3]).encode("utf-8") for j in range(len(words) - 2)}
    else:
        shingles = {" ".join(words).encode("utf-8")}
    m = MinHash(num_perm=128)
    m.update_batch(list(shingles))
    return m


def time_datasketch(corpus: Corpus, ids: list[int], queries) -> dict:
    from datasketch import MinHashLSH

    t0 = time.perf_counter()
    lsh = MinHashLSH(threshold=0.5, num_perm=128)
    for i in ids:
        lsh.insert(i, ds_minhash(corpus.document(i)[0]))
    build = time.perf_counter() - t0
    times = {"edited": [], "unrelated": []}
    found = candidates = 0
    for kind, text, source in queries:
        t0 = time.perf_counter()
        result = lsh.query(ds_minhash(text))
        times[kind].append(time.perf_counter() - t0)
        candidates += len(result)
        if source is not None:
            found += source in result
    return {"build": build, "times": times, "found": found, "candidates": candidates}


# --- chart -----------------------------------------------------------------------------------


def write_pace_chart(path: Path, pace: list[tuple[int, float]], caption: str) -> None:
    """A PNG of the add's pace as the store grows: each record file's documents/s drawn across the documents
    stored while it was added, and the whole build's average. matplotlib is imported here only (Agg, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    stored, edges, rates = 0, [0], []
    for docs, seconds in pace:
        stored += docs
        edges.append(stored)
        rates.append(docs / seconds if seconds > 0 else float("nan"))
    ax.stairs(rates, edges, baseline=None, color="tab:blue", linewidth=2, label="each record file's add")
    ax.plot([(a + b) / 2 for a, b in zip(edges, edges[1:])], rates, "o", color="tab:blue", markersize=4)
    total = sum(s for _, s in pace)
    if total > 0:
        ax.axhline(stored / total, color="tab:gray", linestyle="--", linewidth=1,
                   label=f"whole build: {stored / total:,.0f} documents/s")
    ax.set_xlim(0, stored)
    ax.set_ylim(0, max((r for r in rates if r == r), default=1) * 1.15)
    thousands = FuncFormatter(lambda v, _: f"{v:,.0f}")
    ax.xaxis.set_major_formatter(thousands)
    ax.yaxis.set_major_formatter(thousands)
    ax.set_xlabel("documents stored")
    ax.set_ylabel("documents added per second")
    ax.set_title("dedupdb add: pace as the store grows")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left")
    fig.text(0.01, 0.01, caption, fontsize=8, color="dimgray", family="monospace", va="bottom")
    fig.tight_layout(rect=(0, 0.025 * (caption.count("\n") + 2), 1, 1))
    fig.savefig(path, format="png")


def pace_tenths(pace_file: Path) -> tuple[int, list[float]]:
    """(documents, the documents/s of each tenth of them) from a build's pace file (build_store)."""
    entries = [json.loads(line) for line in pace_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    entries.sort(key=lambda e: e["shard"])
    total = sum(e["docs"] for e in entries)
    rates, seen, docs, seconds = [], 0, 0, 0.0
    for entry in entries:
        seen += entry["docs"]
        docs += entry["docs"]
        seconds += entry["seconds"]
        if seen >= total * (len(rates) + 1) / 10 - 1e-9:  # a file's add falls in the tenth where it ends
            rates.append(docs / seconds)
            docs, seconds = 0, 0.0
    return total, rates


def write_tenths_chart(path: Path, pace_files: list[Path], caption: str) -> None:
    """A PNG of the pace of each tenth of one or more builds (their pace files), the tenths side by side: whether an
    add slows as the store grows, at a million and at ten million."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.8 / len(pace_files)
    top = 1.0
    for number, pace_file in enumerate(pace_files):
        total, rates = pace_tenths(pace_file)
        at = [t + 1 - 0.4 + width * (number + 0.5) for t in range(len(rates))]
        ax.bar(at, rates, width, label=f"{total:,} documents: last tenth at {rates[-1] / rates[0]:.0%} of the first's pace")
        top = max(top, *rates)
    ax.set_xticks(range(1, 11), [f"{t}" for t in range(1, 11)])
    ax.set_xlabel("tenth of the build (in the order added)")
    ax.set_ylabel("documents added per second")
    ax.set_ylim(0, top * 1.2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_title("dedupdb add: the pace of each tenth of a build")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper right")
    fig.text(0.01, 0.01, caption, fontsize=8, color="dimgray", family="monospace", va="bottom")
    fig.tight_layout(rect=(0, 0.025 * (caption.count("\n") + 2), 1, 1))
    fig.savefig(path, format="png")


# --- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Time dedupdb queries on a store of N synthesized documents, against datasketch MinHashLSH.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="documents in the store")
    parser.add_argument("--db", type=Path, default=None,
                        help="store to reuse (or build there and keep); default: a temporary one, deleted afterwards")
    parser.add_argument("--queries", type=int, default=1000, help="queries: half edited stored documents, half unrelated")
    parser.add_argument("--ds-n", type=int, default=100_000, help="documents in the datasketch in-memory index")
    parser.add_argument("--same-size", action="store_true",
                        help="also time dedupdb on a store of the same --ds-n subset (built in a temporary file)")
    parser.add_argument("--skip-datasketch", action="store_true")
    parser.add_argument("--cli-runs", type=int, default=5, help="cold CLI query runs (median reported)")
    parser.add_argument("--keep-shards", action="store_true",
                        help="keep the JSONL record files the store is built from (next to the store, PATH.shards)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--order", choices=["generated", "mixed"], default="generated",
                        help="generated: the corpus texts first, then their edited variants (the last documents "
                             "added have near-duplicates, the first mostly not); mixed: a seeded shuffle, so every "
                             "part of the build holds both alike, and the first and last tenth differ only in the "
                             "size of the store they are added to")
    parser.add_argument("--warm-rounds", type=int, default=1,
                        help="times the warm-up queries are asked before timing: 30 makes the process one that has "
                             "answered many queries (and taken compiled sketching for single texts)")
    parser.add_argument("--answers", type=Path, default=None, metavar="PATH.jsonl",
                        help="write every query's hits (key, scores) of each kind there, one JSON line a query: "
                             "to check that two versions answer alike")
    parser.add_argument("--optimized", action="store_true",
                        help="also time an optimized copy of the store (`dedupdb optimize`, in a temporary folder), "
                             "its passes alternating with the store's as built, and compare their answers")
    parser.add_argument("--passes", type=int, default=1,
                        help="query processes per store (with --optimized, alternating between the stores)")
    parser.add_argument("--query-job", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--check-pairs", type=int, default=0, metavar="N",
                        help="check the stored pairs against brute force: N documents each judged against its "
                             "family and --check-controls random documents, with no index")
    parser.add_argument("--check-controls", type=int, default=2000)
    parser.add_argument("--check-only", action="store_true", help="with --check-pairs: build or reuse, check, stop")
    parser.add_argument("--stop-at", type=int, default=None, metavar="N",
                        help="build (or use) only the first N documents of the --n corpus, and measure that store: a "
                             "build cut short keeps the documents of the full corpus it was begun for")
    parser.add_argument("--shards-only", action="store_true",
                        help="only write the record files of --db's build, ahead of a build run beside it (e.g. "
                             "under nice 19: generating ten million documents takes some 15 minutes of a core)")
    parser.add_argument("--chart", type=Path, default=None, metavar="PATH.png",
                        help="also write a PNG of the add's pace as the store grows (needs matplotlib; only when "
                             "the store is built in this run)")
    parser.add_argument("--tenths-chart", type=Path, nargs="+", default=None, metavar=("PATH.png", "STORE.db"),
                        help="only draw the pace of each tenth of the builds of these stores (their .pace.jsonl "
                             "files) into PATH.png, side by side, and stop")
    args = parser.parse_args()
    if args.tenths_chart:
        if len(args.tenths_chart) < 2:
            parser.error("--tenths-chart takes PATH.png and at least one store")
        out, *stores = args.tenths_chart
        files = [store.with_name(store.name + ".pace.jsonl") for store in stores]
        for file in files:
            if not file.exists():
                parser.error(f"no pace file {file}: build the store with this script first")
        write_tenths_chart(out, files, f"python scripts/bench_query.py --tenths-chart {' '.join(map(str, args.tenths_chart))}\n"
                                       f"record files of {SHARD_DOCS:,} documents; dedupdb {dedupdb.__version__} at {version()}")
        log(f"wrote {out}")
        return
    if args.query_job:
        run_query_job(args.query_job)
        return
    if args.chart and importlib.util.find_spec("matplotlib") is None:
        parser.error("--chart needs matplotlib: pip install -e \".[bench]\"")

    measured = version()  # once: the tree may move on while the benchmark runs
    print(f"dedupdb {dedupdb.__version__} at commit {measured}, python {sys.version.split()[0]}", flush=True)
    t0 = time.perf_counter()
    corpus = Corpus(args.n, args.seed, holdout=args.queries // 2 + 50)
    log(f"corpora loaded in {time.perf_counter() - t0:.1f} s: {corpus.bases:,} distinct texts "
        f"({min(corpus.bases, len(corpus.pool)):,} corpus texts, the rest remixes of them), "
        f"{args.n - corpus.bases:,} edited variants")
    queries = corpus.queries(args.queries)
    warmup = [("unrelated", t, None) for t in corpus.unrelated[args.queries // 2 :]]

    tmpdir = Path(tempfile.mkdtemp(prefix="dedupdb-bench-query-"))
    atexit.register(shutil.rmtree, tmpdir, True)  # also on errors; a --db store lives outside it and is kept
    db_path = args.db or tmpdir / f"store-{args.n}.db"
    shard_dir = db_path.with_name(db_path.name + ".shards")
    build_ids = list(range(args.n))
    if args.order == "mixed":
        random.Random(args.seed + 13).shuffle(build_ids)
    if args.stop_at:
        if args.order != "generated" or not 0 < args.stop_at < args.n:
            parser.error("--stop-at takes a number of documents below --n, in the generated order")
        build_ids = build_ids[: args.stop_at]
        corpus.stored = args.stop_at
        queries = corpus.queries(args.queries)  # of the documents stored
    stored = len(build_ids)
    if args.shards_only:
        shard_dir.mkdir(parents=True, exist_ok=True)
        for k, first in enumerate(range(0, len(build_ids), SHARD_DOCS)):
            write_shard(shard_dir / f"shard-{k:04d}.jsonl", corpus, build_ids[first : first + SHARD_DOCS])
        return
    pace: list[tuple[int, float]] = []
    db, build_seconds = open_or_build(db_path, corpus, build_ids, shard_dir, f"dedupdb {stored:,}", pace)
    if not args.keep_shards:
        shutil.rmtree(shard_dir, ignore_errors=True)
    counts = db.store.counts()
    checked = None
    if args.check_pairs:
        t0 = time.perf_counter()
        checked = check_pairs(db, corpus, build_ids, shard_dir, args.check_pairs, args.check_controls)
        checked["seconds"] = time.perf_counter() - t0
        log(f"pairs against brute force: {checked}")
    db.close()
    if args.check_only:
        print_check(checked, db_path, counts, stored)
        return
    size = file_bytes(db_path)
    optimized = None
    if args.optimized:
        optimized, optimize_seconds = optimized_copy(db_path, tmpdir)
    stores = [("as built", db_path)] + ([("optimized", optimized)] if optimized else [])
    # The stores' query processes alternate, pass after pass, so that both meet the machine's load alike.
    passes: dict[str, list[dict]] = {label: [] for label, _ in stores}
    answer_files = {label: tmpdir / f"answers-{number}.jsonl" for number, (label, _) in enumerate(stores)}
    for number in range(args.passes):
        for label, path in stores:
            log(f"queries: pass {number + 1} on the store {label}")
            passes[label].append(query_process(path, queries, warmup, args.warm_rounds,
                                               answer_files[label] if number == 0 else None, tmpdir))
    if args.answers:
        shutil.copyfile(answer_files[stores[-1][0]], args.answers)
    same_answers = None
    if optimized:
        same_answers = answer_files["as built"].read_bytes() == answer_files["optimized"].read_bytes()
    dq = passes[stores[-1][0]][-1]
    if args.warm_rounds > 1:
        log(f"warmed up with {args.warm_rounds} x {len(warmup)} queries; compiled sketching "
            f"{'taken' if dq['compiled_sketching'] else 'not taken'}")
    cli_texts = [t for kind, t, _ in queries if kind == "edited" and not is_cjk(t)][: args.cli_runs]
    cli_median, cli_walls, help_median = time_cli(db_path, cli_texts) if cli_texts else (None, [], None)

    ds_ids = small = None
    if not args.skip_datasketch or args.same_size:
        rng = random.Random(args.seed + 11)
        sources = {s for _, _, s in queries if s is not None}
        rest = [i for i in rng.sample(range(args.n), min(args.n, args.ds_n + len(sources))) if i not in sources]
        ds_ids = sorted(sources | set(rest[: max(0, args.ds_n - len(sources))]))
    ds = None if args.skip_datasketch else time_datasketch(corpus, ds_ids, queries)
    if args.same_size:
        small_db, small_build = open_or_build(tmpdir / "same-size.db", corpus, ds_ids, tmpdir / "same-size.shards",
                                                  f"dedupdb {len(ds_ids):,}")
        small_db.close()
        small = query_process(tmpdir / "same-size.db", queries, warmup, args.warm_rounds, None, tmpdir)
        small["build"] = small_build

    print(f"\nstore: {db_path}  {counts}")
    if build_seconds is not None:
        print(f"built in {build_seconds:,.0f} s ({stored / build_seconds:,.0f} docs/s, `dedupdb add` of each JSONL record file)")
    print(f"database {size / 1e9:.2f} GB = {size / stored:,.0f} bytes/document; peak RSS of this process {peak_rss_mb():,.0f} MB")
    print_check(checked, db_path, counts, stored)
    print(f"queries: {len(queries)} ({sum(k == 'edited' for k, _, _ in queries)} edited stored documents, "
          f"{sum(k == 'unrelated' for k, _, _ in queries)} unrelated held-out texts)\n")
    header = f"{'engine':<46} {'index docs':>10} {'queries':>8} {'median ms':>10} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    print(header)
    print("-" * len(header))

    def rows(name, n, result):
        for kind in ("all", "edited", "unrelated"):
            t = result["times"]["edited"] + result["times"]["unrelated"] if kind == "all" else result["times"][kind]
            if t:
                med, p90, p99, mx = percentiles(t)
                print(f"{name + ' ' + kind:<46} {n:>10,} {len(t):>8} {med:>10.2f} {p90:>8.2f} {p99:>8.2f} {mx:>8.1f}")

    for name, label in (("near", "near-dups"), ("default", "default")):
        for store_label, results in passes.items():
            for number, result in enumerate(results):
                tag = (f"{store_label} " if len(passes) > 1 else "") + (f"#{number + 1}" if len(results) > 1 else "")
                rows(f"dedupdb query {label} {tag}".rstrip(), stored, result[name])
        if small:
            rows(f"dedupdb query {label}", len(ds_ids), small[name])
    if ds:
        rows("datasketch MinHashLSH", len(ds_ids), ds)
    if cli_walls:
        print(f"{'dedupdb CLI query (new process)':<46} {stored:>10,} {len(cli_walls):>8} {cli_median * 1e3:>10.0f}"
              f"   runs: {', '.join(f'{w * 1e3:.0f}' for w in cli_walls)} ms; `dedupdb --help` {help_median * 1e3:.0f} ms")

    edited = sum(1 for k, _, _ in queries if k == "edited")
    print(f"\nnear-dups: Database.query(text, containment=None); default: Database.query(text) (containment "
          f"{QUERY_CONTAINMENT}); a pass of each over the queries, in one warm process that does nothing else")
    for store_label, results in passes.items():
        print(f"dedupdb {stored:,} {store_label}: the query process's peak RSS "
              + ", ".join(f"{r['process_peak_mb']:,.0f}" for r in results) + " MB")
    if optimized:
        print(f"optimized copy: `dedupdb optimize` took {optimize_seconds:.1f} s; answers (keys and scores of every "
              f"hit, both kinds) {'identical' if same_answers else 'DIFFERENT'} to the store as built's")
    print(f"(below: the last pass{' on the optimized store' if optimized else ''})")
    print(f"dedupdb {stored:,}: median ms per step: " + ", ".join(f"{k} {v:.2f}" for k, v in dq["parts"].items()))
    for name in QUERY_KINDS:
        r = dq[name]
        print(f"dedupdb {stored:,} {name}: source found for {r['found']}/{edited} edited queries; {r['false_hits']} "
              f"unrelated queries had a hit; {r['hits'] / max(1, len(queries)):.1f} hits/query; {r['errors']} errors")
    if small:
        print(f"dedupdb {len(ds_ids):,}: source found for {small['default']['found']}/{edited}; built in "
              f"{small['build']:.0f} s ({len(ds_ids) / small['build']:,.0f} docs/s)")
    if ds:
        print(f"datasketch {len(ds_ids):,}: built in {ds['build']:.0f} s ({len(ds_ids) / ds['build']:,.0f} docs/s); "
              f"source among candidates for {ds['found']}/{edited}; {ds['candidates'] / len(queries):.1f} "
              f"unverified candidates/query (whitespace words: Chinese text becomes few long 'words')")
    print("latency includes normalizing and fingerprinting the query text; dedupdb verifies candidates, datasketch does not")
    if args.chart:
        if build_seconds is None or sum(n for n, _ in pace) != stored:
            log(f"no chart: {db_path} was not built from empty in this run")
        else:
            command = " ".join(["python scripts/bench_query.py", *sys.argv[1:]])
            write_pace_chart(args.chart, pace, f"{command}\nrecord files of {SHARD_DOCS:,} documents, order "
                                               f"{args.order}, dedupdb {dedupdb.__version__} at {measured}")
            log(f"wrote {args.chart}")


if __name__ == "__main__":
    main()
