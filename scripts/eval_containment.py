#!/usr/bin/env python
"""Evaluate containment: truncated copies, merged documents and remembered passages among untouched distractors.

For each corpus of ../shared/eval/ a store is built from
  * untouched documents of the corpus (the distractors, and the originals of everything below);
  * truncated copies: 40-80% of an original's lines (sentences where it has few lines) kept, either its first
    ones ("head") or a random choice in order ("lines");
  * merged documents: two or three originals concatenated;
and then
  * pairs: `Database.pairs(containment=X)` (what `dedupdb pairs --containment X` prints) is scored against the
    truth computed exactly on the shingle sets dedupdb uses: recall of the generated pairs (truncated copy in its
    original, original in its merge) whose real containment (smaller text's shingles held by the larger) is at
    least X; and false containment pairs: pairs listed for their containment (reported >= X, and not a verified
    near-duplicate pair) whose real containment is below X. The Jaccard-only listing of today (`pairs`) is the
    baseline.
  * passages: one or two consecutive sentences from the middle third of a long original are given to
    `Database.query`; found when the original (or an exact copy of it) is among the first 10 hits. The query
    without containment (near-duplicates only) is the baseline.
  * cost: containment rows per text and the bytes of their blocks, against the database's, add speed.

With --peer, datasketch's MinHashLSHEnsemble (Zhu et al., VLDB 2016; 256 permutations, 16 partitions, the same
shingles) answers the same pair and passage questions from memory, unranked, for comparison.

Usage:
    python scripts/eval_containment.py                         # every corpus, default sizes
    python scripts/eval_containment.py --corpora bbc --quick
    python scripts/eval_containment.py --ngram 2 --window 8    # another winnowing (fixed when a store is made)
    python scripts/eval_containment.py --peer                  # also datasketch's LSH Ensemble
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import dedupdb
from dedupdb.text.hashing import content_hash
from dedupdb.text.normalize import normalize
from dedupdb.ingest.records import RecordOptions
from dedupdb.text.tokens import Tokenizer

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"
CORPORA = {
    "bbc": "en_bbc_fulltext.jsonl.gz",
    "reuters": "en_reuters21578.jsonl.gz",
    "imdb": "en_imdb_aclImdb.jsonl.gz",
    "sophonplus": "zh_sophonplus_reviews.jsonl.gz",
}
_EN_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_ZH_SENTENCE = re.compile(r"(?<=[。！？!?])")
CJK = re.compile(r"[\u4e00-\u9fff]")
_WORD = re.compile(r"\w")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load(name: str, limit: int) -> list[str]:
    path = EVAL_DIR / CORPORA[name]
    if not path.exists():
        sys.exit(f"corpus not found: {path}")
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            text = json.loads(line)["text"].replace("<br />", "\n").strip()
            if text:
                texts.append(text)
            if len(texts) >= limit:
                break
    return texts


def sentences(text: str) -> list[str]:
    """Sentences, across the line breaks of hard-wrapped text (Reuters); those without a letter or digit left out."""
    pattern = _ZH_SENTENCE if len(CJK.findall(text)) * 2 > len(text.split()) else _EN_SENTENCE
    return [s.strip() for s in pattern.split(" ".join(text.split())) if _WORD.search(s)]


def units(text: str) -> tuple[list[str], str]:
    """The lines of a text when it has at least five, else its sentences; and the separator to join them by."""
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines, "\n") if len(lines) >= 5 else (sentences(text), " ")


@dataclass
class Case:
    """A document made for the evaluation and the original(s) it relates to."""

    key: str
    text: str
    kind: str                 # head, lines, merged
    originals: list[str]      # keys of the originals in it (merged) or it is cut from (head, lines)


@dataclass
class Passage:
    source: str
    text: str
    words: int


@dataclass
class Corpus:
    name: str
    texts: dict[str, str]                       # every document of the store, by record id
    cases: list[Case] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)


def build_corpus(name: str, args, rng: random.Random) -> Corpus:
    docs = load(name, args.docs)
    order = list(range(len(docs)))
    rng.shuffle(order)
    corpus = Corpus(name, {f"d{i}": docs[i] for i in range(len(docs))})
    used: set[int] = set()

    def take(test) -> int | None:
        while order:
            i = order.pop()
            if i not in used and test(docs[i]):
                used.add(i)
                return i
        return None

    for n in range(args.truncated):
        i = take(lambda t: len(units(t)[0]) >= 4)
        if i is None:
            break
        parts, sep = units(docs[i])
        keep = max(1, round(len(parts) * rng.uniform(0.4, 0.8)))
        if n % 2 == 0:
            kind, kept = "head", parts[:keep]
        else:
            kind, kept = "lines", [parts[j] for j in sorted(rng.sample(range(len(parts)), keep))]
        key = f"t{n}"
        corpus.texts[key] = sep.join(kept)
        corpus.cases.append(Case(key, corpus.texts[key], kind, [f"d{i}"]))
    for n in range(args.merged):
        picked = [take(lambda t: len(t) >= 100) for _ in range(2 + n % 2)]
        if None in picked:
            break
        key = f"m{n}"
        corpus.texts[key] = "\n\n".join(docs[i] for i in picked)
        corpus.cases.append(Case(key, corpus.texts[key], "merged", [f"d{i}" for i in picked]))
    long_enough = [i for i in range(len(docs)) if len(sentences(docs[i])) >= 8]
    for i in rng.sample(long_enough, min(args.passages, len(long_enough))):
        parts = sentences(docs[i])
        start = rng.randrange(len(parts) // 3, 2 * len(parts) // 3)
        count = rng.choice((1, 2))
        text = " ".join(parts[start : start + count])
        corpus.passages.append(Passage(f"d{i}", text, len(text.split()) if not CJK.search(text) else len(text)))
    return corpus


# --- truth ----------------------------------------------------------------------------------------------------


class Shingles:
    """The shingle sets dedupdb compares, for exact containment."""

    def __init__(self, settings: dedupdb.Settings) -> None:
        self.tokenizer = Tokenizer(settings.word_ngram, settings.cjk_ngram)  # token n-grams: what containment counts
        self.sets: dict[str, np.ndarray] = {}

    def add(self, texts: dict[str, str]) -> None:
        keys = list(texts)
        for start in range(0, len(keys), 2000):
            chunk = keys[start : start + 2000]
            batch = self.tokenizer.batch([normalize(texts[k]) for k in chunk])
            self.sets.update(zip(chunk, self.tokenizer.shingle_sets(batch)))

    def containment(self, a: str, b: str) -> float:
        """Share of the smaller set's shingles found in the larger."""
        x, y = self.sets[a], self.sets[b]
        if len(x) > len(y):
            x, y = y, x
        return len(np.intersect1d(x, y, assume_unique=True)) / len(x) if len(x) else 0.0


# --- one corpus ------------------------------------------------------------------------------------------------


def run_bytes(path: Path) -> dict[int, int]:
    """Bytes of the blocks of each family of runs (0: LSH and SimHash rows, 1: containment rows; see
    migrations/0005_runs.sql): what each index costs the database."""
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT r.family, sum(length(b.data)) FROM run_blocks b JOIN runs r ON r.id = b.run "
                                 "GROUP BY r.family").fetchall())
    finally:
        conn.close()


def evaluate(corpus: Corpus, args, workdir: Path) -> dict:
    settings = {"containment_ngram": args.ngram, "winnow_window": args.window}
    records = workdir / f"{corpus.name}.jsonl"
    with open(records, "w", encoding="utf-8") as out:
        for key, text in corpus.texts.items():
            out.write(json.dumps({"id": key, "text": text}, ensure_ascii=False) + "\n")
    db_path = workdir / f"{corpus.name}.db"
    db_path.unlink(missing_ok=True)
    prefix = f"{records}#"
    result: dict = {"corpus": corpus.name, "documents": len(corpus.texts)}
    with dedupdb.open(db_path, **settings) as db:
        started = time.perf_counter()
        db.add([records], records=RecordOptions("jsonl", text_field="text", id_field="id"), workers=args.workers)
        result["add_seconds"] = time.perf_counter() - started
        result["contents"] = db.store.counts()["contents"]
        result["containment_rows"] = db.store.containment_rows()
        result["index_rows"] = db.store.index_rows()
        truth = Shingles(db.settings)
        truth.add(corpus.texts)
        x = args.containment

        # pairs: the generated ones whose real containment reaches X
        targets = {}
        for case in corpus.cases:
            for original in case.originals:
                real = truth.containment(case.key, original)
                targets[frozenset((case.key, original))] = (case.kind, real)
        started = time.perf_counter()
        listed = {}
        for p in db.pairs(containment=x):
            listed[frozenset((p.a.removeprefix(prefix), p.b.removeprefix(prefix)))] = p
        result["pairs_seconds"] = time.perf_counter() - started
        baseline = {frozenset((p.a.removeprefix(prefix), p.b.removeprefix(prefix))) for p in db.pairs()}
        kinds: dict[str, list[int]] = {}
        small = db.settings.winnow_window + db.settings.containment_ngram - 2  # fewer shingles: never contained
        result["missed_small"] = 0
        for pair, (kind, real) in targets.items():
            if real >= x:
                row = kinds.setdefault(kind, [0, 0, 0])
                row[0] += 1
                row[1] += pair in listed
                row[2] += pair in baseline
                result["missed_small"] += pair not in listed and min(len(truth.sets[k]) for k in pair) < small
        result["targets"] = kinds
        result["targets_below"] = sum(1 for _, real in targets.values() if real < x)
        by_containment = [(pair, p) for pair, p in listed.items()
                          if not p.exact and p.containment is not None and p.containment >= x and pair not in baseline]
        false = [(pair, p, truth.containment(*pair)) for pair, p in by_containment]
        false = [(pair, p, real) for pair, p, real in false if real < x]
        result["listed"] = len(listed)
        result["listed_by_containment"] = len(by_containment)
        result["false_containment"] = len(false)
        result["false_examples"] = [(sorted(pair), p.containment, round(real, 3)) for pair, p, real in false[:5]]
        errors = [abs(p.containment - truth.containment(*pair)) for pair, p in listed.items()
                  if p.containment is not None and not p.exact]
        result["containment_error_p95"] = float(np.percentile(errors, 95)) if errors else None

        # passages
        found = base_found = 0
        ranks, times, misses = [], [], []
        window = args.ngram + args.window - 1  # tokens of a run the winnowing is sure to find
        long_total = long_found = 0
        source_hash = {key: content_hash(normalize(text)) for key, text in corpus.texts.items()}
        for passage in corpus.passages:
            started = time.perf_counter()
            hits = db.query(passage.text, top=10)
            times.append(time.perf_counter() - started)
            keys = [source_hash[h.key.removeprefix(prefix)] for h in hits]
            want = source_hash[passage.source]
            tokens = len(truth.tokenizer.stream(normalize(passage.text)).tokens)
            long_total += tokens >= window
            if want in keys:
                found += 1
                long_found += tokens >= window
                ranks.append(keys.index(want) + 1)
            else:
                misses.append(passage)
            base = db.query(passage.text, top=10, containment=None)
            base_found += want in [source_hash[h.key.removeprefix(prefix)] for h in base]
        result["passages"] = len(corpus.passages)
        result["passages_found"] = found
        result["passages_baseline"] = base_found
        result["passages_long"] = (long_found, long_total, window)
        result["passage_words_median"] = statistics.median(p.words for p in corpus.passages) if corpus.passages else 0
        result["passage_rank_1"] = sum(1 for r in ranks if r == 1)
        result["query_ms_median"] = 1000 * statistics.median(times) if times else None
        result["missed_examples"] = [(m.words, m.text[:90]) for m in misses[:3]]
    sizes = run_bytes(db_path)
    result["db_bytes"] = db_path.stat().st_size
    result["containment_bytes"] = sizes.get(1, 0)
    result["index_bytes"] = sizes.get(0, 0)
    if args.peer:
        result["peer"] = lsh_ensemble(corpus, truth, targets, x)
    return result


def lsh_ensemble(corpus: Corpus, truth: Shingles, targets: dict, x: float) -> dict:
    """datasketch's MinHashLSHEnsemble on the same shingles: recall of the pairs and passages, candidates per query."""
    from datasketch import MinHash, MinHashLSHEnsemble

    def minhash(values: np.ndarray) -> MinHash:
        m = MinHash(num_perm=256, seed=1)
        m.update_batch([int(v).to_bytes(4, "little") for v in values])
        return m

    started = time.perf_counter()
    hashes = {key: minhash(s) for key, s in truth.sets.items() if len(s)}
    index = MinHashLSHEnsemble(threshold=x, num_perm=256, num_part=16)
    index.index((key, m, len(truth.sets[key])) for key, m in hashes.items())
    build = time.perf_counter() - started
    found = total = candidates = 0
    for pair, (kind, real) in targets.items():
        if real < x:
            continue
        small, large = sorted(pair, key=lambda k: len(truth.sets[k]))
        got = set(index.query(hashes[small], len(truth.sets[small])))
        found += large in got
        total += 1
        candidates += len(got)
    tokenizer = truth.tokenizer
    passages_found = passage_candidates = 0
    started = time.perf_counter()
    for passage in corpus.passages:
        values = tokenizer.shingle_sets(tokenizer.batch([normalize(passage.text)]))[0]
        got = set(index.query(minhash(values), len(values))) if len(values) else set()
        passages_found += passage.source in got
        passage_candidates += len(got)
    return {"build_seconds": build, "pairs_found": found, "pairs": total, "pair_candidates": candidates / max(1, total),
            "passages_found": passages_found, "passage_candidates": passage_candidates / max(1, len(corpus.passages)),
            "query_ms": 1000 * (time.perf_counter() - started) / max(1, len(corpus.passages))}


def report(r: dict, x: float) -> None:
    print(f"\n== {r['corpus']}: {r['documents']:,} documents ({r['contents']:,} texts), added in {r['add_seconds']:.1f}s")
    rows = r["containment_rows"] / max(1, r["contents"])
    print(f"containment rows: {r['containment_rows']:,} ({rows:.1f} a text; LSH/SimHash rows "
          f"{r['index_rows'] / max(1, r['contents']):.1f}); {r['containment_bytes'] / max(1, r['documents']):.0f} "
          f"bytes a document of {r['db_bytes'] / max(1, r['documents']):.0f} "
          f"({100 * r['containment_bytes'] / max(1, r['db_bytes']):.1f}% of the database)")
    found = sum(v[1] for v in r["targets"].values())
    total = sum(v[0] for v in r["targets"].values())
    base = sum(v[2] for v in r["targets"].values())
    print(f"pairs at containment >= {x}: recall {found / max(1, total):.3f} ({found}/{total}); Jaccard pairs alone "
          f"{base / max(1, total):.3f}; by kind: "
          + ", ".join(f"{k} {v[1]}/{v[0]}" for k, v in sorted(r["targets"].items()))
          + f" ({r['targets_below']} generated pairs fall below {x} and are not counted; "
          f"{r['missed_small']} missed are of a text shorter than one window)")
    print(f"listed {r['listed']:,} pairs in {r['pairs_seconds']:.1f}s, {r['listed_by_containment']:,} by containment alone; "
          f"false containment pairs (real containment < {x}): {r['false_containment']}; "
          f"|reported - real| p95 {r['containment_error_p95']}")
    for example in r["false_examples"]:
        print(f"    false: {example}")
    print(f"passages: found in top 10 {r['passages_found']}/{r['passages']} "
          f"({r['passages_found'] / max(1, r['passages']):.3f}; first {r['passage_rank_1']}); near-duplicates "
          f"alone {r['passages_baseline']}; median {r['passage_words_median']} words (characters for Chinese); "
          f"median query {r['query_ms_median']:.1f} ms")
    long_found, long_total, window = r["passages_long"]
    print(f"    passages of at least {window} tokens: {long_found}/{long_total}; shorter ones: "
          f"{r['passages_found'] - long_found}/{r['passages'] - long_total}")
    for words, text in r["missed_examples"]:
        print(f"    missed ({words}): {text}")
    if "peer" in r:
        p = r["peer"]
        print(f"datasketch MinHashLSHEnsemble (256 perms, 16 parts, in memory, built in {p['build_seconds']:.1f}s): pairs "
              f"{p['pairs_found']}/{p['pairs']} ({p['pair_candidates']:.1f} candidates a query), passages "
              f"{p['passages_found']}/{len(range(r['passages']))} ({p['passage_candidates']:.1f} candidates, unranked, "
              f"{p['query_ms']:.1f} ms a query)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="*", default=list(CORPORA), choices=list(CORPORA))
    parser.add_argument("--docs", type=int, default=20000, help="documents read from each corpus (default 20,000)")
    parser.add_argument("--truncated", type=int, default=500, help="truncated copies per corpus")
    parser.add_argument("--merged", type=int, default=300, help="merged documents per corpus (of 2 or 3 originals)")
    parser.add_argument("--passages", type=int, default=500, help="passages queried per corpus")
    parser.add_argument("--containment", type=float, default=0.8, help="X of pairs --containment X")
    parser.add_argument("--ngram", type=int, default=dedupdb.Settings().containment_ngram)
    parser.add_argument("--window", type=int, default=dedupdb.Settings().winnow_window)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--peer", action="store_true", help="also datasketch's MinHashLSHEnsemble")
    parser.add_argument("--quick", action="store_true", help="5,000 documents, 200 of each case")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.docs, args.truncated, args.merged, args.passages = 5000, 200, 200, 200
    print(f"containment ngram {args.ngram}, window {args.window} (any shared run of {args.ngram + args.window - 1} "
          f"tokens is found); X = {args.containment}; seed {args.seed}")
    results = []
    with tempfile.TemporaryDirectory(prefix="dedupdb-containment-") as tmp:
        for name in args.corpora:
            rng = random.Random(f"{args.seed}-{name}")
            corpus = build_corpus(name, args, rng)
            log(f"{name}: {len(corpus.texts):,} documents, {len(corpus.cases)} cases, {len(corpus.passages)} passages")
            result = evaluate(corpus, args, Path(tmp))
            report(result, args.containment)
            results.append(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
