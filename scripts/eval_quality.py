#!/usr/bin/env python
"""Measure dedupdb's near-duplicate quality on the real corpora in ../shared/eval.

A  fidelity  Exact ground truth: every pair of distinct normalized texts whose true Jaccard (on the very
             shingles dedupdb uses: Tokenizer(word_ngram, cjk_ngram).shingles) reaches the threshold, found by
             an exact all-pairs join (prefix filtering over an inverted index: it returns exactly the pairs
             sharing at least one shingle with J >= threshold). Compared with the pairs a store built through
             the library reports: recall, share of reported Jaccards within 0.05 of the truth, precision, and
             the pairs reported through SimHash alone (reported Jaccard below the threshold) on their own.
B  edits     Known edits: originals sampled from each corpus plus untouched distractors are stored; light
             variants (<= 5% of tokens changed, plus width/case/whitespace noise, signatures, hashtags, URLs)
             and heavy variants (10-20% token substitutions, insertions, deletions; tokens = words in English,
             characters in Chinese) are queried with db.query(top=N). Recall = the variant finds its original.
             False pairs = stored pairs among the untouched documents whose true Jaccard is below --false-j.
C  sweep     A and B over threshold x word_ngram x cjk_ngram, checked against the quality targets.

Only the public library is used to build stores (Database, Indexer.add_documents inside store.transaction()).
Temporary databases go under a temporary directory (removed at the end unless --keep).

    python scripts/eval_quality.py --quick                 # a couple of minutes
    python scripts/eval_quality.py --parts A,B             # one setting, full samples
    python scripts/eval_quality.py --parts C               # the sweep (tens of minutes)
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import re
import shutil
import sqlite3
import string
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

import dedupdb
from dedupdb.config import INGEST_BATCH, Settings
from dedupdb.sketch.fingerprint import sketch_texts
from dedupdb.text.hashing import content_hash
from dedupdb.index.indexer import NewDocument
from dedupdb.index.lsh import band_keys, optimal_banding
from dedupdb.sketch.minhash import sketch_jaccard
from dedupdb.text.normalize import normalize
from dedupdb.text.tokens import Tokenizer

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"
LANG = {
    "en_reuters21578": "en",
    "en_bbc_fulltext": "en",
    "en_imdb_aclImdb": "en",
    "zh_sophonplus_reviews": "zh",
    "zh_thucnews_titles_devtest": "zh",
}
FIDELITY_CORPORA = ["en_reuters21578", "zh_sophonplus_reviews"]
EDIT_CORPORA = list(LANG)
SHORT = {
    "en_reuters21578": "reuters",
    "en_bbc_fulltext": "bbc",
    "en_imdb_aclImdb": "imdb",
    "zh_sophonplus_reviews": "sophon",
    "zh_thucnews_titles_devtest": "thucnews",
}
TARGETS = {"fid_recall": 0.95, "within05": 0.98, "light": 0.98, "heavy": 0.90, "false": 0.01}

_T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


# --- plain tables -------------------------------------------------------------------------------------


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.3f}"
    return str(value)


def table(title: str, headers: list[str], rows: list[list]) -> None:
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    sys.stdout.flush()


def ratio(num: int, den: int) -> float:
    return num / den if den else float("nan")


# --- corpora --------------------------------------------------------------------------------------------

_CORPUS_CACHE: dict[str, list[tuple[str, str]]] = {}


def load_corpus(name: str) -> list[tuple[str, str]]:
    """(id, raw text) of every record, in file order."""
    if name not in _CORPUS_CACHE:
        path = EVAL_DIR / f"{name}.jsonl.gz"
        if not path.exists():
            sys.exit(f"corpus not found: {path}")
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            _CORPUS_CACHE[name] = [(str(r["id"]), r["text"]) for r in map(json.loads, fh)]
        log(f"loaded {name}: {len(_CORPUS_CACHE[name]):,} records")
    return _CORPUS_CACHE[name]


def distinct_texts(name: str, limit: int, seed: int) -> list[tuple[str, str, str]]:
    """(id, raw, normalized) of distinct non-empty normalized texts (first id of each text kept), randomly
    sampled down to limit (0 = all) with the seed, returned in file order."""
    seen: set[str] = set()
    out = []
    for rid, raw in load_corpus(name):
        text = normalize(raw)
        if text and text not in seen:
            seen.add(text)
            out.append((rid, raw, text))
    if limit and len(out) > limit:
        keep = sorted(random.Random(seed).sample(range(len(out)), limit))
        out = [out[i] for i in keep]
    return out


# --- shingles and exact Jaccard ----------------------------------------------------------------------


def shingle_set(tokenizer: Tokenizer, normalized: str) -> frozenset[int]:
    return frozenset(np.unique(tokenizer.shingles(tokenizer.stream(normalized))).tolist())


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def similar_pairs(sets: list[frozenset[int]], t: float) -> dict[tuple[int, int], float]:
    """Exactly the pairs (i < j) with Jaccard >= t (t > 0): an all-pairs join with prefix and size filtering.

    Shingles are ordered rarest first; a set of size n keeps a prefix of n - ceil(t n) + 1 of them, and two
    sets with Jaccard >= t must share a shingle within both prefixes, so every such pair is found and then
    verified on the full sets. Sets are visited by increasing size so too-small partners are skipped."""
    freq: Counter = Counter()
    for s in sets:
        freq.update(s)
    sizes = [len(s) for s in sets]
    prefixes = []
    for s in sets:
        toks = sorted(s, key=lambda x: (freq[x], x))
        keep = len(toks) - math.ceil(t * len(toks) - 1e-9) + 1
        prefixes.append(toks[:keep])
    index: dict[int, list[int]] = {}
    start: dict[int, int] = {}
    out: dict[tuple[int, int], float] = {}
    for x in sorted(range(len(sets)), key=sizes.__getitem__):
        sx = sizes[x]
        if sx == 0:
            continue
        smallest = t * sx - 1e-9
        cand: set[int] = set()
        for tok in prefixes[x]:
            posting = index.get(tok)
            if posting is None:
                index[tok] = [x]
                continue
            st = start.get(tok, 0)
            while st < len(posting) and sizes[posting[st]] < smallest:
                st += 1
            start[tok] = st
            cand.update(posting[st:])
            posting.append(x)
        sx_set = sets[x]
        for y in cand:
            inter = len(sx_set & sets[y])
            union = sx + sizes[y] - inter
            if inter >= t * union - 1e-9:
                out[(x, y) if x < y else (y, x)] = inter / union
    return out


# --- building stores through the library --------------------------------------------------------------


@dataclass
class Config:
    threshold: float
    word_ngram: int
    cjk_ngram: int
    extra: dict = field(default_factory=dict)  # other Settings fields (--set)
    fn_weight: float | None = None             # experiment: recall-weighted LSH banding (None = library's)

    def key(self) -> tuple:
        return (self.threshold, self.word_ngram, self.cjk_ngram, tuple(sorted(self.extra.items())), self.fn_weight)

    def settings(self) -> dict:
        return {"threshold": self.threshold, "word_ngram": self.word_ngram, "cjk_ngram": self.cjk_ngram, **self.extra}


class Workspace:
    def __init__(self, keep: bool) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dedupdb-eval-"))
        self.keep = keep
        self.count = 0

    def new_path(self, label: str) -> Path:
        self.count += 1
        return self.dir / f"{self.count:03d}-{label}.sqlite"

    def discard(self, path: Path) -> None:
        if not self.keep:
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)

    def close(self) -> None:
        if self.keep:
            log(f"databases kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def build_store(ws: Workspace, label: str, docs: list[tuple[str, str]], cfg: Config):
    """A fresh database holding docs (key, normalized text); returns (db, path). Keys double as record ids."""
    path = ws.new_path(label)
    db = dedupdb.open(path, **cfg.settings())
    if cfg.fn_weight is not None:
        banding = optimal_banding(cfg.threshold, db.settings.num_perm, 1.0 - cfg.fn_weight, cfg.fn_weight)
        with db.store.transaction():
            db.store.write_meta({"lsh.bands": str(banding.bands), "lsh.rows": str(banding.rows)})
        db.close()
        db = dedupdb.open(path)
    store = db.store
    with store.transaction():
        file_id = _save_file(store, f"eval://{label}")
    for start in range(0, len(docs), INGEST_BATCH):
        part = docs[start : start + INGEST_BATCH]
        sketches = {s.content_hash: s for s in sketch_texts(db.settings, [text for _, text in part])}
        batch = [
            NewDocument(key, file_id, key, content_hash(text), len(text.encode("utf-8")), 0, text[:160])
            for key, text in part
        ]
        with store.transaction():
            db.indexer.add_documents(batch, sketches)
    return db, path


def _save_file(store, path: str) -> int:
    """One 'records' file row to hang the documents on. The Store API has changed shape more than once
    (save_file, then save_files with 6 and with 8 columns), so try the known shapes in turn."""
    if not hasattr(store, "save_files"):
        return store.save_file(path, 0, 0, "eval", "indexed", kind="records")
    base = (path, 0, 0, "eval", "indexed", "records")
    for extra in ((0, None), ()):  # (records, options) since record files became resumable
        try:
            return store.save_files([base + extra])[path]
        except sqlite3.ProgrammingError:
            continue
    raise RuntimeError("cannot create a file row with this version of dedupdb.storage.store.Store.save_files")


def reported_pairs(db) -> list[tuple[str, str, float, int | None]]:
    return [(p.a, p.b, p.jaccard, p.hamming) for p in db.pairs(by="content")]  # one key per distinct text


# --- A: fidelity to exact Jaccard ----------------------------------------------------------------------


@dataclass
class FidelityData:
    keys: list[str]
    texts: list[str]
    sets: list[frozenset[int]]
    truth: dict[tuple[int, int], float]  # pairs with J >= truth_floor
    truth_floor: float


_FID_DATA: dict[tuple, FidelityData] = {}
_FID_RESULT: dict[tuple, dict] = {}


def fidelity_data(corpus: str, cfg: Config, floor: float, args) -> FidelityData:
    key = (corpus, cfg.word_ngram, cfg.cjk_ngram)
    have = _FID_DATA.get(key)
    if have is not None and have.truth_floor <= floor:
        return have
    docs = distinct_texts(corpus, args.fidelity_max, args.seed)
    tok = Tokenizer(cfg.word_ngram, cfg.cjk_ngram)
    keys, texts, sets = [], [], []
    for rid, _, text in docs:
        s = shingle_set(tok, text)
        if s:  # texts of punctuation only have nothing to compare
            keys.append(rid)
            texts.append(text)
            sets.append(s)
    started = time.perf_counter()
    truth = similar_pairs(sets, floor)
    log(
        f"{corpus} w{cfg.word_ngram} c{cfg.cjk_ngram}: {len(sets):,} distinct texts, {len(truth):,} pairs with "
        f"J >= {floor} (exact join {time.perf_counter() - started:.1f}s)"
    )
    data = FidelityData(keys, texts, sets, truth, floor)
    _FID_DATA[key] = data
    return data


def fidelity(corpus: str, cfg: Config, args, ws: Workspace, floor: float | None = None) -> dict:
    rkey = (corpus, cfg.key())
    if rkey in _FID_RESULT:
        return _FID_RESULT[rkey]
    t = cfg.threshold
    data = fidelity_data(corpus, cfg, min(t, floor or t), args)
    index = {k: i for i, k in enumerate(data.keys)}
    started = time.perf_counter()
    db, path = build_store(ws, f"fid-{SHORT.get(corpus, corpus)}", list(zip(data.keys, data.texts)), cfg)
    build_s = time.perf_counter() - started
    pairs = reported_pairs(db)
    true_pairs = {p for p, j in data.truth.items() if j >= t - 1e-12}
    found = set()
    within = mh_within = mh = mh_true = mh_near = sim_only = sim_true = sim_low = low = 0
    sim_js = []
    for ka, kb, rep_j, ham in pairs:
        i, j = index[ka], index[kb]
        p = (i, j) if i < j else (j, i)
        true_j = data.truth.get(p)
        if true_j is None:
            true_j = jaccard(data.sets[i], data.sets[j])
        found.add(p)
        close = abs(rep_j - true_j) <= 0.05 + 1e-9
        within += close
        low += true_j < args.false_j
        if rep_j >= t - 1e-12:
            mh += 1
            mh_within += close
            mh_true += true_j >= t - 1e-12
            mh_near += true_j >= t - 0.05
        else:
            sim_only += 1
            sim_true += true_j >= t - 1e-12
            sim_low += true_j < args.false_j
            sim_js.append(true_j)
    missed = true_pairs - found
    # Why were true pairs missed? Recompute what the store holds for both sides with the library itself.
    lsh_miss = sketch_miss = 0
    buckets = Counter()
    bucket_hits = Counter()
    edges = [t, t + 0.05, t + 0.1, t + 0.2, 1.0]
    for p in true_pairs:
        j = data.truth[p]
        b = next((f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(edges, edges[1:]) if lo - 1e-12 <= j < hi), "1.00")
        buckets[b] += 1
        bucket_hits[b] += p in found
    if missed:
        sample = sorted(missed)
        fps = {}
        for i in {x for p in sample for x in p}:
            fps[i] = db.fingerprinter.one(data.texts[i])
        for i, j in sample:
            a, b = fps[i], fps[j]
            keys = band_keys(np.stack([a.minhash, b.minhash]), db.banding)
            if not np.any(keys[0] == keys[1]):
                lsh_miss += 1
            elif sketch_jaccard(a.sketch, b.sketch, db.settings.sketch_size) < t:
                sketch_miss += 1
    result = {
        "corpus": corpus,
        "docs": len(data.keys),
        "bands": f"{db.banding.bands}x{db.banding.rows}",
        "true": len(true_pairs),
        "reported": len(pairs),
        "recall": ratio(len(true_pairs & found), len(true_pairs)),
        "within05": ratio(within, len(pairs)),
        "mh": mh,
        "mh_within05": ratio(mh_within, mh),
        "precision": ratio(mh_true, mh),
        "precision_lenient": ratio(mh_near, mh),
        "sim_only": sim_only,
        "sim_true": ratio(sim_true, sim_only),
        "sim_low": ratio(sim_low, sim_only),
        "sim_median_j": float(np.median(sim_js)) if sim_js else float("nan"),
        "false": low,
        "missed": len(missed),
        "lsh_miss": lsh_miss,
        "sketch_miss": sketch_miss,
        "buckets": {b: (buckets[b], ratio(bucket_hits[b], buckets[b])) for b in buckets},
        "build_s": build_s,
    }
    db.close()
    ws.discard(path)
    log(
        f"A {corpus} t={t} w{cfg.word_ngram} c{cfg.cjk_ngram}: recall {result['recall']:.3f}, within05 "
        f"{result['within05']:.3f} ({len(pairs):,} reported, build {build_s:.1f}s)"
    )
    _FID_RESULT[rkey] = result
    return result


# --- B: known edits ----------------------------------------------------------------------------------

_ASCII_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_TO_FULL = {ord(c): chr(ord(c) + 0xFEE0) for c in _ASCII_PUNCT}
_ZH_TO_HALF = {ord(a): b for a, b in zip("，！？：；（）“”、。", ",!?:;()\"\",.")}
_ALNUM = string.ascii_letters + string.digits


# The CJK ranges dedupdb.text.tokens treats as one-character tokens.
_CJK_RE = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002ffff]")


def is_cjk_char(ch: str) -> bool:
    return _CJK_RE.match(ch) is not None


@dataclass
class Variant:
    original: str  # key
    level: str     # light | heavy
    kind: str
    text: str      # raw
    edit_share: float


def _space_noise(text: str, rng: random.Random, lang: str) -> str:
    if lang == "en":
        parts = text.split(" ")
        glue = [rng.choice(["  ", "\n", "\t", " \n "]) if rng.random() < 0.15 else " " for _ in parts[1:]]
        out = parts[0] + "".join(g + p for g, p in zip(glue, parts[1:]))
    else:
        chars = list(text)
        # only next to a CJK character, so that no Latin word or number is split in two
        spots = [i for i in range(len(chars) + 1)
                 if (i > 0 and is_cjk_char(chars[i - 1])) or (i < len(chars) and is_cjk_char(chars[i]))]
        for pos in sorted(rng.sample(spots, min(3, len(spots))), reverse=True):
            chars.insert(pos, rng.choice([" ", "  ", "\n", "\u3000"]))
        out = "".join(chars)
    return "\n " + out + " \n\n"


_ALNUM_TO_FULL = {ord(c): chr(ord(c) + 0xFEE0) for c in string.ascii_letters + string.digits}


def _case_noise(text: str, rng: random.Random, lang: str) -> str:
    if lang == "zh":  # Chinese has no case: upper-case any Latin letters and write letters and digits full-width
        return text.upper().translate(_ALNUM_TO_FULL)
    if rng.random() < 0.5:
        return text.upper()
    return " ".join(w.capitalize() if rng.random() < 0.5 else w for w in text.split(" "))


def _width_noise(text: str, rng: random.Random, lang: str) -> str:
    if lang == "zh":
        return text.translate(_ZH_TO_HALF).translate(_TO_FULL) if rng.random() < 0.5 else text.translate(_TO_FULL)
    return text.translate(_TO_FULL)


FORMAT_NOISE = {"width": _width_noise, "case": _case_noise, "whitespace": _space_noise}

# (text appended, tokens it adds)
SIGNATURES = {
    "en": [("\n\n--\nSent from my iPhone", 4), ("\n\nRegards,\nThe Editor", 3), ("\n\nThanks, Mike", 2)],
    "zh": [("\n——发自我的手机", 6), ("\n—来自微博", 4), ("（转）", 1)],
}
HASHTAGS = {"en": [" #news", " #mustread", " #tbt"], "zh": [" #好评", " #赞", " #推荐"]}


def _url(rng: random.Random) -> tuple[str, int]:
    tail = "".join(rng.choice(_ALNUM) for _ in range(7))
    return rng.choice([(f" https://t.co/{tail}", 4), (f" t.co/{tail}", 3)])


def _edit_units(raw: str, lang: str) -> tuple[list[str], list[int]]:
    """Editable units and their positions: whitespace words (English) or CJK characters (Chinese)."""
    if lang == "en":
        units = raw.split()
        return units, list(range(len(units)))
    units = list(raw)
    return units, [i for i, ch in enumerate(units) if is_cjk_char(ch)]


def _apply_edits(raw: str, lang: str, count: int, ops: list[str], pool: list[str], rng: random.Random) -> str:
    units, editable = _edit_units(raw, lang)
    positions = sorted(rng.sample(editable, min(count, len(editable))), reverse=True)
    for pos in positions:
        op = rng.choice(ops)
        if op == "sub":
            new = rng.choice(pool)
            while new == units[pos] and len(set(pool)) > 1:
                new = rng.choice(pool)
            units[pos] = new
        elif op == "ins":
            units.insert(pos, rng.choice(pool))
        else:
            del units[pos]
    return " ".join(units) if lang == "en" else "".join(units)


def make_variants(key: str, raw: str, lang: str, pool: list[str], rng: random.Random) -> list[Variant]:
    units, editable = _edit_units(raw, lang)
    n = len(editable)
    budget = math.floor(0.05 * n + 1e-9)  # light edits change at most 5% of the tokens (none below 20 tokens)
    # light: one primary kind, sometimes one more kind of token-neutral format noise
    kinds = ["width", "case", "whitespace", "signature", "hashtag", "url", "substitute"]
    kind = rng.choice(kinds)
    if kind not in FORMAT_NOISE and budget == 0:
        kind = rng.choice(list(FORMAT_NOISE))  # too short for any token change within 5%
    text, changed = raw, 0
    if kind in FORMAT_NOISE:
        text = FORMAT_NOISE[kind](text, rng, lang)
    else:
        options = []
        if kind == "signature":
            options = [s for s in SIGNATURES[lang] if s[1] <= budget]
        elif kind == "hashtag":
            options = [(h, 1) for h in HASHTAGS[lang]]
        elif kind == "url":
            options = [u for u in [_url(rng)] if u[1] <= budget]
        if options:
            add, changed = rng.choice(options)
            text = text.rstrip() + add
        else:
            kind = "substitute"
            changed = rng.randint(1, budget)
            text = _apply_edits(text, lang, changed, ["sub"], pool, rng)
        if rng.random() < 0.5:
            text = FORMAT_NOISE[rng.choice(list(FORMAT_NOISE))](text, rng, lang)
    light = Variant(key, "light", kind, text, changed / n)
    # 10-20% of the tokens: a whole number of edits inside that band when one exists (short texts)
    lo, hi = math.ceil(0.10 * n - 1e-9), math.floor(0.20 * n + 1e-9)
    count = rng.randint(lo, hi) if lo <= hi else max(1, round(0.15 * n))
    heavy = Variant(key, "heavy", "sub/ins/del", _apply_edits(raw, lang, count, ["sub", "ins", "del"], pool, rng), count / n)
    return [light, heavy]


@dataclass
class EditData:
    untouched: list[tuple[str, str]]  # (key, normalized): originals then distractors
    originals: int
    variants: list[Variant]


_EDIT_DATA: dict[str, EditData] = {}
_EDIT_RESULT: dict[tuple, dict] = {}
_SETS: dict[tuple, dict[str, frozenset[int]]] = {}


def edit_data(corpus: str, args) -> EditData:
    """Originals, distractors and variants: independent of the settings under test (seeded)."""
    if corpus in _EDIT_DATA:
        return _EDIT_DATA[corpus]
    lang = LANG.get(corpus, "zh" if corpus.startswith("zh") else "en")
    docs = distinct_texts(corpus, 0, args.seed)
    order = list(range(len(docs)))
    rng = random.Random(f"{args.seed}-{corpus}")
    rng.shuffle(order)
    originals, distractors = [], []
    for i in order:
        rid, raw, text = docs[i]
        if len(originals) < args.originals:
            if len(_edit_units(raw, lang)[1]) >= args.min_tokens:
                originals.append(i)
                continue
        if len(distractors) < args.distractors:
            distractors.append(i)
        if len(originals) >= args.originals and len(distractors) >= args.distractors:
            break
    # Replacement words / characters come from the distractors: real vocabulary at real frequencies.
    pool: list[str] = []
    for i in distractors[:2000]:
        units, editable = _edit_units(docs[i][1], lang)
        pool += [units[p] for p in editable]
    variants = []
    for i in originals:
        variants += make_variants(docs[i][0], docs[i][1], lang, pool, rng)
    untouched = [(docs[i][0], docs[i][2]) for i in originals + distractors]
    data = EditData(untouched, len(originals), variants)
    _EDIT_DATA[corpus] = data
    log(f"{corpus}: {len(originals)} originals, {len(distractors)} distractors, {len(variants)} variants")
    return data


def edits(corpus: str, cfg: Config, args, ws: Workspace) -> dict:
    rkey = (corpus, cfg.key())
    if rkey in _EDIT_RESULT:
        return _EDIT_RESULT[rkey]
    t = cfg.threshold
    data = edit_data(corpus, args)
    tok = Tokenizer(cfg.word_ngram, cfg.cjk_ngram)
    skey = (corpus, cfg.word_ngram, cfg.cjk_ngram)
    if skey not in _SETS:
        _SETS[skey] = {k: shingle_set(tok, text) for k, text in data.untouched}
    sets = _SETS[skey]
    db, path = build_store(ws, f"edit-{SHORT.get(corpus, corpus)}", data.untouched, cfg)
    started = time.perf_counter()
    per_level: dict[str, Counter] = defaultdict(Counter)
    per_kind: dict[str, Counter] = defaultdict(Counter)
    jsum: dict[str, float] = defaultdict(float)
    for v in data.variants:
        vset = shingle_set(tok, normalize(v.text))
        true_j = jaccard(vset, sets[v.original])
        hits = db.query(v.text, top=args.top, containment=None)  # near-duplicates only, as measured here
        mine = next((h for h in hits if h.key == v.original), None)
        ok = mine is not None
        c = per_level[v.level]
        c["n"] += 1
        c["found"] += ok
        c["within"] += ok and abs(mine.jaccard - true_j) <= 0.05 + 1e-9
        c["reach"] += true_j >= t - 1e-12
        c["reach_found"] += ok and true_j >= t - 1e-12
        c["hits"] += len(hits)
        c["false_hits"] += sum(1 for h in hits if h.key != v.original and jaccard(vset, sets[h.key]) < args.false_j)
        jsum[v.level] += true_j
        c["edit_share_x1000"] += round(1000 * v.edit_share)
        if v.level == "light":
            per_kind[v.kind]["n"] += 1
            per_kind[v.kind]["found"] += ok
    query_s = time.perf_counter() - started
    pairs = reported_pairs(db)
    false_pairs = sum(1 for ka, kb, _, _ in pairs if jaccard(sets[ka], sets[kb]) < args.false_j)
    result = {"corpus": corpus, "untouched": len(data.untouched), "pairs": len(pairs), "false_pairs": false_pairs}
    for level, c in per_level.items():
        result[level] = {
            "n": c["n"],
            "recall": ratio(c["found"], c["n"]),
            "recall_reach": ratio(c["reach_found"], c["reach"]),
            "reach": ratio(c["reach"], c["n"]),
            "mean_j": jsum[level] / c["n"],
            "edit_share": c["edit_share_x1000"] / 1000 / c["n"],
            "false_hits": ratio(c["false_hits"], c["hits"]),
            "found": c["found"],
            "within05": ratio(c["within"], c["found"]),
        }
    result["kinds"] = {k: (c["n"], c["found"]) for k, c in per_kind.items()}
    db.close()
    ws.discard(path)
    log(
        f"B {corpus} t={t} w{cfg.word_ngram} c{cfg.cjk_ngram}: light {result['light']['recall']:.3f}, heavy "
        f"{result['heavy']['recall']:.3f}, false pairs {false_pairs}/{len(pairs)} (queries {query_s:.1f}s)"
    )
    _EDIT_RESULT[rkey] = result
    return result


# --- reports -----------------------------------------------------------------------------------------


def report_fidelity(results: list[dict], cfg: Config) -> None:
    t = cfg.threshold
    rows = []
    for r in results:
        rows.append([SHORT.get(r["corpus"], r["corpus"]), r["docs"], r["bands"], r["true"], r["reported"], r["recall"],
                     r["within05"], r["mh"], r["precision"], r["precision_lenient"], r["mh_within05"], r["missed"],
                     r["lsh_miss"], r["sketch_miss"], round(r["build_s"], 1)])
    table(
        f"A. Fidelity to exact Jaccard (threshold {t}, word_ngram {cfg.word_ngram}, cjk_ngram {cfg.cjk_ngram})",
        ["corpus", "texts", "bands", "true>=t", "reported", "recall", "within.05", "minhash", "prec", "prec(t-.05)",
         "mh.within.05", "missed", "miss:lsh", "miss:sketch", "build.s"],
        rows,
    )
    rows = [[SHORT.get(r["corpus"], r["corpus"]), r["sim_only"], r["sim_true"], r["sim_low"], r["sim_median_j"],
             r["false"], ratio(r["false"], r["reported"])] for r in results]
    table(
        "A. Pairs reported by SimHash alone (reported Jaccard < threshold), and all reported pairs with true J < "
        f"{ARGS.false_j}",
        ["corpus", "simhash-only", "trueJ>=t", f"trueJ<{ARGS.false_j}", "median trueJ", "all:lowJ", "all:lowJ share"],
        rows,
    )
    labels = sorted({b for r in results for b in r["buckets"]})
    rows = [[SHORT.get(r["corpus"], r["corpus"])] + [f"{r['buckets'][b][1]:.3f} ({r['buckets'][b][0]})"
                                                     if b in r["buckets"] else "-" for b in labels] for r in results]
    table("A. Recall by true Jaccard (pairs in bucket)", ["corpus"] + labels, rows)


def report_edits(results: list[dict], cfg: Config) -> None:
    rows = []
    for r in results:
        for level in ("light", "heavy"):
            x = r[level]
            rows.append([SHORT.get(r["corpus"], r["corpus"]), level, x["n"], x["edit_share"], x["mean_j"], x["reach"],
                         x["recall"], x["recall_reach"], x["within05"], x["false_hits"],
                         r["pairs"] if level == "light" else "", r["false_pairs"] if level == "light" else "",
                         ratio(r["false_pairs"], r["pairs"]) if level == "light" else ""])
    table(
        f"B. Known edits (threshold {cfg.threshold}, word_ngram {cfg.word_ngram}, cjk_ngram {cfg.cjk_ngram}; "
        f"query top={ARGS.top}; false = true J < {ARGS.false_j})",
        ["corpus", "level", "variants", "edit.share", "mean.trueJ", "J>=t", "recall", "recall|J>=t", "within.05", "falsehit%",
         "pairs", "false", "false%"],
        rows,
    )
    kinds = sorted({k for r in results for k in r["kinds"]})
    rows = []
    for r in results:
        rows.append([SHORT.get(r["corpus"], r["corpus"])] + [
            f"{ratio(r['kinds'][k][1], r['kinds'][k][0]):.3f} ({r['kinds'][k][0]})" if k in r["kinds"] else "-"
            for k in kinds])
    table("B. Light-edit recall by kind (variants)", ["corpus"] + kinds, rows)


def summary_row(fid: list[dict], eds: list[dict]) -> dict:
    def mn(values):
        values = [v for v in values if not math.isnan(v)]
        return min(values) if values else float("nan")
    pairs = sum(r["reported"] for r in fid) + sum(r["pairs"] for r in eds)
    false = sum(r["false"] for r in fid) + sum(r["false_pairs"] for r in eds)
    worst_false = max([ratio(r["false"], r["reported"]) for r in fid if r["reported"]] +
                      [ratio(r["false_pairs"], r["pairs"]) for r in eds if r["pairs"]] or [0.0])
    light_n = sum(r["light"]["n"] for r in eds)
    heavy_n = sum(r["heavy"]["n"] for r in eds)
    return {
        "fid_recall": mn([r["recall"] for r in fid]),
        "within05": mn([r["within05"] for r in fid]),
        "light": mn([r["light"]["recall"] for r in eds]),
        "light_pooled": ratio(sum(r["light"]["found"] for r in eds), light_n),
        "heavy": mn([r["heavy"]["recall"] for r in eds]),
        "heavy_pooled": ratio(sum(r["heavy"]["found"] for r in eds), heavy_n),
        "false": ratio(false, pairs),
        "false_worst": worst_false,
        "hit_within05": ratio(sum(r["light"]["within05"] * r["light"]["found"] + r["heavy"]["within05"] * r["heavy"]["found"]
                                  for r in eds), sum(r["light"]["found"] + r["heavy"]["found"] for r in eds)),
        "build_s": sum(r["build_s"] for r in fid),
    }


def verdict(s: dict) -> str:
    fails = []
    if not s["fid_recall"] >= TARGETS["fid_recall"]:
        fails.append("fid")
    if not s["within05"] >= TARGETS["within05"]:
        fails.append(".05")
    if not s["light"] >= TARGETS["light"]:
        fails.append("light")
    if not s["heavy"] >= TARGETS["heavy"]:
        fails.append("heavy")
    if not s["false_worst"] <= TARGETS["false"]:
        fails.append("false")
    return "MEETS" if not fails else "no: " + ",".join(fails)


def run_sweep(args, ws: Workspace) -> None:
    fid_corpora = [c for c in args.fidelity_corpora]
    edit_corpora = [c for c in args.edit_corpora]
    en_fid = [c for c in fid_corpora if LANG.get(c) == "en"]
    zh_fid = [c for c in fid_corpora if LANG.get(c) == "zh"]
    en_ed = [c for c in edit_corpora if LANG.get(c) == "en"]
    zh_ed = [c for c in edit_corpora if LANG.get(c) == "zh"]
    floor = min(args.sweep_thresholds)
    parts: dict[tuple, dict] = {}
    # English results depend on (threshold, word_ngram) only, Chinese on (threshold, cjk_ngram) only
    # (the other n-gram size is held at its --word-ngram / --cjk-ngram value), so each is run once.
    for lang, sizes, fcs, ecs in (("en", args.sweep_word_ngrams, en_fid, en_ed), ("zh", args.sweep_cjk_ngrams, zh_fid, zh_ed)):
        for n in sizes:
            for t in args.sweep_thresholds:
                cfg = Config(t, n if lang == "en" else args.word_ngram, n if lang == "zh" else args.cjk_ngram,
                             args.extra, args.fn_weight)
                fid = [fidelity(c, cfg, args, ws, floor) for c in fcs]
                eds = [edits(c, cfg, args, ws) for c in ecs]
                parts[(lang, t, n)] = {"fid": fid, "eds": eds, "sum": summary_row(fid, eds)}
    for lang, label in (("en", "word_ngram"), ("zh", "cjk_ngram")):
        rows = []
        for (lg, t, n), p in sorted(parts.items()):
            if lg != lang:
                continue
            s = p["sum"]
            per = {SHORT[r["corpus"]]: r for r in p["eds"]}
            rows.append([t, n, s["fid_recall"], s["within05"]]
                        + [per[k]["light"]["recall"] for k in per] + [per[k]["heavy"]["recall"] for k in per]
                        + [s["false_worst"], verdict(s)])
            names = list(per)
        if rows:
            table(f"C. Sweep, {lang} corpora (fidelity on {', '.join(SHORT[c] for c in (en_fid if lang == 'en' else zh_fid))})",
                  ["thr", label, "fid.recall", "within.05"] + [f"light:{k}" for k in names]
                  + [f"heavy:{k}" for k in names] + ["false.worst", "targets"], rows)
    rows = []
    for t in args.sweep_thresholds:
        for w in args.sweep_word_ngrams:
            for c in args.sweep_cjk_ngrams:
                en, zh = parts.get(("en", t, w)), parts.get(("zh", t, c))
                fid = (en["fid"] if en else []) + (zh["fid"] if zh else [])
                eds = (en["eds"] if en else []) + (zh["eds"] if zh else [])
                s = summary_row(fid, eds)
                rows.append([t, w, c, s["fid_recall"], s["within05"], s["hit_within05"], s["light"], s["light_pooled"],
                             s["heavy"], s["heavy_pooled"], s["false"], s["false_worst"], round(s["build_s"]), verdict(s)])
    table(
        "C. Sweep, all corpora (min = worst corpus; targets: fid.recall>=0.95, within.05>=0.98, light>=0.98, "
        "heavy>=0.90, false<=1% in every store)",
        ["thr", "word", "cjk", "fid.recall", "within.05", "B.within.05", "light.min", "light.all", "heavy.min",
         "heavy.all", "false.all", "false.worst", "A.build.s", "targets"],
        rows,
    )


# --- command line ------------------------------------------------------------------------------------


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Evaluate dedupdb against exact Jaccard (A), known edits (B) and a settings sweep (C).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--parts", default="A,B,C", help="which parts to run: any of A (fidelity), B (edits), C (sweep)")
    p.add_argument("--corpus", action="append", default=None,
                   help="restrict parts A and B to this corpus (repeatable; file name without .jsonl.gz)")
    p.add_argument("--threshold", type=float, default=Settings.threshold, help="Jaccard threshold for A and B")
    p.add_argument("--word-ngram", type=int, default=Settings.word_ngram, help="word shingle size for A and B")
    p.add_argument("--cjk-ngram", type=int, default=Settings.cjk_ngram, help="CJK character shingle size for A and B")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="any other dedupdb setting, e.g. --set num_perm=256 --set simhash_distance=0")
    p.add_argument("--fn-weight", type=float, default=None,
                   help="experiment: override the LSH banding with optimal_banding(threshold, num_perm, "
                        "fp_weight=1-W, fn_weight=W) instead of the library's 0.5/0.5 choice")
    p.add_argument("--fidelity-max", type=int, default=30000,
                   help="A: at most this many distinct texts per corpus, randomly sampled (0 = all)")
    p.add_argument("--originals", type=int, default=1000, help="B: originals per corpus (each gets a light and a heavy variant)")
    p.add_argument("--distractors", type=int, default=5000, help="B: untouched other documents per corpus")
    p.add_argument("--min-tokens", type=int, default=10, help="B: originals need at least this many words / CJK characters")
    p.add_argument("--top", type=int, default=50, help="B: hits asked of db.query per variant")
    p.add_argument("--false-j", type=float, default=0.3, help="a reported pair below this true Jaccard counts as false")
    p.add_argument("--sweep-thresholds", type=floats, default=[0.4, 0.5, 0.6, 0.7])
    p.add_argument("--sweep-word-ngrams", type=ints, default=[2, 3])
    p.add_argument("--sweep-cjk-ngrams", type=ints, default=[2, 3])
    p.add_argument("--seed", type=int, default=1, help="sampling and edit seed")
    p.add_argument("--quick", action="store_true",
                   help="small samples (fidelity 3000 texts, 200 originals + 1000 distractors) and a 2x2x1 sweep")
    p.add_argument("--keep", action="store_true", help="keep the temporary databases")
    args = p.parse_args(argv)
    if args.quick:
        args.fidelity_max = min(args.fidelity_max or 3000, 3000)
        args.originals = min(args.originals, 200)
        args.distractors = min(args.distractors, 1000)
        args.sweep_thresholds = args.sweep_thresholds[:2] if len(args.sweep_thresholds) > 2 else args.sweep_thresholds
        args.sweep_cjk_ngrams = args.sweep_cjk_ngrams[:1]
    args.parts = {x.strip().upper() for x in args.parts.split(",") if x.strip()}
    if not args.parts <= {"A", "B", "C"}:
        p.error("--parts takes A, B and/or C")
    args.fidelity_corpora = args.corpus or FIDELITY_CORPORA
    args.edit_corpora = args.corpus or EDIT_CORPORA
    args.extra = {}
    names = {f.name: f for f in fields(Settings)}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in names or name in ("threshold", "word_ngram", "cjk_ngram") or not value:
            p.error(f"--set {item}: expected NAME=VALUE with NAME one of the other Settings fields")
        args.extra[name] = float(value) if names[name].type in ("float", float) else int(value)
    return args


ARGS = None


def _revision() -> str:
    """The git commit of the checkout being measured (the library changes often), if git can tell."""
    import subprocess

    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(dedupdb.__file__).parent,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "no git"
    except (OSError, subprocess.SubprocessError):
        return "no git"


def main(argv=None) -> None:
    global ARGS
    args = ARGS = parse_args(argv)
    ws = Workspace(args.keep)
    started = time.perf_counter()
    print(f"dedupdb {dedupdb.__version__} ({_revision()}); corpora from {EVAL_DIR}; seed {args.seed}")
    print(f"A: at most {args.fidelity_max or 'all'} distinct texts per corpus; B: {args.originals} originals + "
          f"{args.distractors} distractors per corpus, min {args.min_tokens} tokens; extra settings {args.extra or '-'}; "
          f"banding {'library' if args.fn_weight is None else f'fn_weight={args.fn_weight}'}")
    try:
        cfg = Config(args.threshold, args.word_ngram, args.cjk_ngram, args.extra, args.fn_weight)
        if "A" in args.parts:
            report_fidelity([fidelity(c, cfg, args, ws) for c in args.fidelity_corpora], cfg)
        if "B" in args.parts:
            report_edits([edits(c, cfg, args, ws) for c in args.edit_corpora], cfg)
        if "C" in args.parts:
            run_sweep(args, ws)
    finally:
        ws.close()
    print(f"\ndone in {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
