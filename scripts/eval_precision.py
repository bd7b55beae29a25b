#!/usr/bin/env python
"""Known-edit recall and strict false-pair rate of dedupdb at its default settings, beside datasketch.

For each corpus, originals are sampled among untouched distractors and every original gets one variant per
edit level:

  format   two of: case, whitespace and line ends, full-width/half-width characters, punctuation spacing,
           a small punctuation change (one or two marks swapped or dropped, "!!" or "……" appended)
  light    at most 5% of the tokens substituted, inserted or deleted, or an appended signature (its words
           count towards the 5%), hashtag or link; in English also typos (one letter changed in at most 5% of
           the words, at least one)
  heavy    10-20% of the tokens substituted, inserted or deleted
  repost   retweet / Weibo style: "RT @user: " or "转发微博 //@name: " prefixes, "//@name:" chains,
           #hashtags# (Chinese) or #hashtags (English), @mentions and short links

Tokens are whitespace-separated words in English and CJK characters in Chinese. Originals, distractors and
variants are written to one JSONL file and added to a fresh dedupdb store through the library
(db.add(..., records=RecordOptions("jsonl", "text", "id"))). Pairs are read at document level from the store
itself: two documents are a pair when their contents are a stored pair (pairs table) or when they share one
content (exact copies after dedupdb's normalization).

  recall      per level, the share of variants paired directly with their own original
  strict false pairs
              each document stands for its source text (a variant for its original, anything else for
              itself); a reported pair is false when the character 4-gram Jaccard of the two source texts,
              after NFKC, case folding and removing all punctuation and whitespace, is below 0.5. A variant
              and its own original are never false. rate = false pairs / all reported pairs. One false pair
              of source texts counts once per combination of their documents (up to 25 with both originals'
              variants), so the table also gives the distinct source pairs behind the false pairs (src).

datasketch runs in the same process on the same documents: MinHashLSH(threshold=0.5, num_perm=128), every
document queried after all are inserted, candidates kept when the MinHash estimate is >= 0.5. Two shingle
schemes, both on NFKC + case-folded text:
  ds:char3    character 3-grams of the text with whitespace runs collapsed to one space
  ds:word     English: word unigrams and bigrams (runs of \\w); Chinese: character bigrams of the text with
              punctuation and whitespace removed (no jieba)

Corpora (../shared/eval): reuters, bbc, imdb (sampled), sophon, thucnews, sentences (derived: the BBC and
Reuters articles split into sentences of 6-40 words at . ! ? before a capital or digit, exact copies
removed) and clough (Clough & Stevenson: recall of the cut / light / heavy answers against their task's source;
false pairs are pairs across tasks or with a `non` answer, plus the strict measure above with each reused
answer standing for its task's source).

    python scripts/eval_precision.py                      # every corpus, about 4 minutes on 2 cores
    python scripts/eval_precision.py --quick              # small samples, under a minute
    python scripts/eval_precision.py --corpora sophon,thucnews --examples 5 --json out.json
    python scripts/eval_precision.py --presets banding,super-shingles   # both candidate schemes, same documents
    python scripts/eval_precision.py --quick --chart recall.png         # also a PNG of the figures (matplotlib)

--chart PATH.png draws recall per edit level and the strict false-pair rate of every system, pooled over the
edited corpora (Clough & Stevenson, with its own levels, is left out of the chart).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import itertools
import json
import math
import random
import re
import string
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dedupdb  # noqa: E402
from dedupdb.ingest.records import RecordOptions  # noqa: E402

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval"

# short name -> (source file or None for derived corpora, language)
CORPORA = {
    "reuters": ("en_reuters21578", "en"),
    "bbc": ("en_bbc_fulltext", "en"),
    "imdb": ("en_imdb_aclImdb", "en"),
    "sophon": ("zh_sophonplus_reviews", "zh"),
    "thucnews": ("zh_thucnews_titles_devtest", "zh"),
    "sentences": (None, "en"),
    "clough": (None, "en"),
}
LEVELS = ("format", "light", "heavy", "repost")
SYSTEMS = ("dedupdb", "ds:char3", "ds:word")
TARGETS = {"format": 0.99, "light": 0.99, "heavy": 0.90, "repost": 0.98, "false_rate": 0.005}
STRICT_GRAM = 4
STRICT_FALSE_BELOW = 0.5
DS_THRESHOLD = 0.5
DS_PERM = 128
SENTENCE_WORDS = (6, 40)
MISSED_KEPT = 20  # missed variants per level kept in --json

_T0 = time.perf_counter()


def log(message: str) -> None:
    """Progress to stderr with the time since start."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


# --- text measures ---------------------------------------------------------------------------------------


def strict_key(text: str) -> str:
    """NFKC, case folding, and every punctuation and whitespace character removed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if not ch.isspace() and not unicodedata.category(ch).startswith("P"))


def char_grams(text: str, n: int) -> frozenset[str]:
    """Character n-grams of text (the text itself when it is shorter than n)."""
    if len(text) < n:
        return frozenset([text]) if text else frozenset()
    return frozenset(text[i : i + n] for i in range(len(text) - n + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    """Jaccard similarity of two sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class StrictJudge:
    """Decides whether a reported pair joins genuinely different source texts (4-gram Jaccard < 0.5)."""

    def __init__(self, texts: dict[str, str], source: dict[str, str]) -> None:
        self.texts = texts
        self.source = source
        self._grams: dict[str, frozenset[str]] = {}

    def grams(self, doc_id: str) -> frozenset[str]:
        """The strict 4-gram set of a source document (cached)."""
        if doc_id not in self._grams:
            self._grams[doc_id] = char_grams(strict_key(self.texts[doc_id]), STRICT_GRAM)
        return self._grams[doc_id]

    def similarity(self, a: str, b: str) -> float:
        """4-gram Jaccard of the source texts behind documents a and b (1.0 for one source)."""
        sa, sb = self.source.get(a, a), self.source.get(b, b)
        return 1.0 if sa == sb else jaccard(self.grams(sa), self.grams(sb))

    def is_false(self, a: str, b: str) -> bool:
        """The pair's source texts are genuinely different (strict 4-gram Jaccard below 0.5)."""
        return self.similarity(a, b) < STRICT_FALSE_BELOW


# --- corpora ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def read_jsonl_gz(stem: str) -> list[tuple[str, str]]:
    """(id, text) of every record of ../shared/eval/STEM.jsonl.gz (read once; not to be modified)."""
    path = EVAL_DIR / f"{stem}.jsonl.gz"
    if not path.exists():
        sys.exit(f"corpus not found: {path}")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        records = [(str(r["id"]), r["text"]) for r in map(json.loads, fh)]
    log(f"read {stem}: {len(records):,} records")
    return records


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')]?\s+(?=[\"'(]?[A-Z0-9])")


def news_sentences() -> list[tuple[str, str]]:
    """The BBC and Reuters articles split into sentences of 6-40 words, exact copies (strict key) removed."""
    out, seen = [], set()
    for stem in ("en_bbc_fulltext", "en_reuters21578"):
        for rid, text in read_jsonl_gz(stem):
            flat = " ".join(text.split())
            for k, sentence in enumerate(_SENTENCE_END.split(flat)):
                words = len(sentence.split())
                key = strict_key(sentence)
                if SENTENCE_WORDS[0] <= words <= SENTENCE_WORDS[1] and key not in seen:
                    seen.add(key)
                    out.append((f"{stem[3:7]}-{rid}-{k}", sentence))
    log(f"derived sentences: {len(out):,} distinct sentences of {SENTENCE_WORDS[0]}-{SENTENCE_WORDS[1]} words")
    return out


def load_corpus(name: str) -> list[tuple[str, str]]:
    """(id, text) records of a corpus by short name."""
    stem = CORPORA[name][0]
    return news_sentences() if name == "sentences" else read_jsonl_gz(stem)


# --- edits -----------------------------------------------------------------------------------------------

_CJK_RE = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002ffff]")
_ASCII_TO_FULL = {ord(c): chr(ord(c) + 0xFEE0) for c in string.ascii_letters + string.digits + string.punctuation}
_ZH_TO_HALF = {ord(a): b for a, b in zip("，！？：；（）“”、。", ",!?:;()\"\",.")}
_PUNCT_SWAP = {
    "en": {",": ";", ".": "!", "!": ".", "?": "!", ";": ",", ":": " -"},
    "zh": {"，": "、", "。": "！", "！": "。", "？": "！", "、": "，", "：": "，"},
}
_PUNCT_TAIL = {"en": ["!!", "...", " !"], "zh": ["！！", "……", "。。。"]}
SIGNATURES = {
    "en": ["Sent from my iPhone", "Regards, The Editor", "Thanks, Mike", "-- Posted via mobile"],
    "zh": ["——发自我的手机", "—来自微博", "（转）", "发自iPhone"],
}
_HANDLE_CHARS = string.ascii_lowercase + string.digits + "_"
_LINK_CHARS = string.ascii_letters + string.digits


def edit_units(text: str, lang: str) -> tuple[list[str], list[int]]:
    """Editable units and their positions: whitespace words (English) or CJK characters (Chinese)."""
    if lang == "en":
        units = text.split()
        return units, list(range(len(units)))
    units = list(text)
    return units, [i for i, ch in enumerate(units) if _CJK_RE.match(ch)]


def apply_token_edits(text: str, lang: str, count: int, ops: tuple[str, ...], pool: list[str],
                      rng: random.Random) -> str:
    """count substitutions / insertions / deletions (ops) at distinct token positions, new tokens from pool."""
    units, editable = edit_units(text, lang)
    for pos in sorted(rng.sample(editable, min(count, len(editable))), reverse=True):
        op = rng.choice(ops)
        if op == "sub":
            new = rng.choice(pool)
            while new == units[pos] and len(pool) > 1:
                new = rng.choice(pool)
            units[pos] = new
        elif op == "ins":
            units.insert(pos, rng.choice(pool))
        else:
            del units[pos]
    return " ".join(units) if lang == "en" else "".join(units)


def _case(text: str, lang: str, rng: random.Random) -> str:
    """English: upper case, lower case or random capitalized words; Chinese: Latin letters upper-cased."""
    if lang == "zh":
        return text.upper()
    choice = rng.random()
    if choice < 0.35:
        return text.upper()
    if choice < 0.7:
        return text.lower()
    return " ".join(w.capitalize() if rng.random() < 0.5 else w for w in text.split(" "))


def _whitespace(text: str, lang: str, rng: random.Random) -> str:
    """Extra spaces, tabs and line breaks, CRLF line ends, padding at both ends."""
    if lang == "en":
        parts = text.split(" ")
        glue = [rng.choice(["  ", "\n", "\t", " \r\n "]) if rng.random() < 0.15 else " " for _ in parts[1:]]
        text = parts[0] + "".join(g + p for g, p in zip(glue, parts[1:]))
    else:  # only beside a CJK character, so no Latin word or number is split
        chars = list(text)
        spots = [i for i in range(len(chars) + 1)
                 if (i > 0 and _CJK_RE.match(chars[i - 1])) or (i < len(chars) and _CJK_RE.match(chars[i]))]
        for pos in sorted(rng.sample(spots, min(3, len(spots))), reverse=True):
            chars.insert(pos, rng.choice([" ", "  ", "\n", "\u3000"]))
        text = "".join(chars)
    return "\r\n " + text.replace("\n", "\r\n") + " \r\n"


def _width(text: str, lang: str, rng: random.Random) -> str:
    """ASCII letters, digits and punctuation to full width (Chinese: sometimes its punctuation to half width)."""
    if lang == "zh" and rng.random() < 0.5:
        return text.translate(_ZH_TO_HALF)
    return text.translate(_ASCII_TO_FULL)


def _punct_spacing(text: str, lang: str, rng: random.Random) -> str:
    """A space before punctuation marks, or none after them."""
    marks = ",.;:!?" if lang == "en" else "，。；：！？,.!?"
    if rng.random() < 0.5:
        return re.sub(f"([{re.escape(marks)}])", r" \1", text)
    return re.sub(f"([{re.escape(marks)}]) +", r"\1", text)


def _punct_change(text: str, lang: str, rng: random.Random) -> str:
    """One or two punctuation marks swapped for others or dropped, or an emphatic tail appended."""
    swap = _PUNCT_SWAP[lang]
    spots = [i for i, ch in enumerate(text) if ch in swap]
    if not spots or rng.random() < 0.3:
        return text.rstrip() + rng.choice(_PUNCT_TAIL[lang])
    chars = list(text)
    for i in rng.sample(spots, min(len(spots), rng.randint(1, 2))):
        chars[i] = swap[chars[i]] if rng.random() < 0.7 else ""
    return "".join(chars)


FORMAT_EDITS = {"case": _case, "whitespace": _whitespace, "width": _width,
                "punct_spacing": _punct_spacing, "punct_change": _punct_change}


def _handle(rng: random.Random, lang: str, pool: list[str]) -> str:
    """A user name: an ASCII handle, or for Chinese sometimes 2-4 CJK characters."""
    if lang == "zh" and rng.random() < 0.5:
        return "".join(rng.choice(pool) for _ in range(rng.randint(2, 4)))
    return "".join(rng.choice(_HANDLE_CHARS) for _ in range(rng.randint(4, 10)))


def _link(rng: random.Random, lang: str) -> str:
    """A short link (t.cn for Chinese, t.co or bit.ly for English)."""
    host = "http://t.cn/" if lang == "zh" else rng.choice(["https://t.co/", "http://bit.ly/"])
    return host + "".join(rng.choice(_LINK_CHARS) for _ in range(7))


def _hashtag(rng: random.Random, lang: str, pool: list[str]) -> str:
    """A Weibo #topic# of pool characters (Chinese) or a Twitter #word (English)."""
    if lang == "zh":
        return "#" + "".join(rng.choice(pool) for _ in range(rng.randint(2, 5))) + "#"
    return "#" + (re.sub(r"\W", "", rng.choice(pool)).lower() or "news")


def format_variant(text: str, lang: str, rng: random.Random) -> tuple[str, str]:
    """Two different format edits, applied in turn."""
    kinds = rng.sample(sorted(FORMAT_EDITS), 2)
    for kind in kinds:
        text = FORMAT_EDITS[kind](text, lang, rng)
    return text, "+".join(kinds)


def light_variant(text: str, lang: str, pool: list[str], rng: random.Random) -> tuple[str, str]:
    """At most 5% of the tokens edited, or a signature (within the 5%), hashtag or link appended."""
    budget = math.floor(0.05 * len(edit_units(text, lang)[1]) + 1e-9)
    signatures = [s for s in SIGNATURES[lang] if len(edit_units(s, lang)[1]) <= budget]
    kinds = ["hashtag", "link"] + (["edit", "edit"] if budget else []) + (["signature"] if signatures else [])
    kinds += ["typo", "typo"] if lang == "en" else []
    kind = rng.choice(kinds)
    if kind == "edit":
        return apply_token_edits(text, lang, rng.randint(1, budget), ("sub", "ins", "del"), pool, rng), kind
    if kind == "typo":
        return typos(text, max(1, budget), rng), kind
    sep = rng.choice([" ", "\n"])
    if kind == "signature":
        return text.rstrip() + "\n" + rng.choice(signatures), kind
    if kind == "hashtag":
        return text.rstrip() + sep + _hashtag(rng, lang, pool), kind
    return text.rstrip() + sep + _link(rng, lang), kind


def typos(text: str, count: int, rng: random.Random) -> str:
    """One letter substituted, inserted, dropped or swapped with the next in each of `count` words of at least
    three letters (a light edit: a word changes, the text does not)."""
    words = text.split(" ")
    candidates = [i for i, w in enumerate(words) if sum(ch.isalpha() for ch in w) >= 3]
    for i in rng.sample(candidates, min(count, len(candidates))):
        word = list(words[i])
        at = rng.choice([j for j, ch in enumerate(word) if ch.isalpha()])
        op = rng.choice(("sub", "ins", "del", "swap"))
        letter = rng.choice(string.ascii_lowercase)
        if op == "sub":
            word[at] = letter
        elif op == "ins":
            word.insert(at, letter)
        elif op == "del" and len(word) > 1:
            del word[at]
        elif at + 1 < len(word):
            word[at], word[at + 1] = word[at + 1], word[at]
        words[i] = "".join(word)
    return " ".join(words)


def heavy_variant(text: str, lang: str, pool: list[str], rng: random.Random) -> tuple[str, str]:
    """10-20% of the tokens substituted, inserted or deleted (a whole number inside the band when one exists)."""
    n = len(edit_units(text, lang)[1])
    lo, hi = math.ceil(0.10 * n - 1e-9), math.floor(0.20 * n + 1e-9)
    count = rng.randint(lo, hi) if lo <= hi else max(1, round(0.15 * n))
    return apply_token_edits(text, lang, count, ("sub", "ins", "del"), pool, rng), f"{count}/{n}"


def repost_variant(text: str, lang: str, pool: list[str], rng: random.Random) -> tuple[str, str]:
    """A repost marker or chain in front, and one or two of hashtags, mentions and links around the text."""
    user = _handle(rng, lang, pool)
    if lang == "en":
        prefix = rng.choice([f"RT @{user}: ", f"RT @{user}: RT @{_handle(rng, lang, pool)}: ", f"//@{user}: "])
    else:
        prefix = rng.choice([f"转发微博 //@{user}: ", f"//@{user}://@{_handle(rng, lang, pool)}: ",
                             f"转发 @{user}：", "转发微博 "])
    extras = rng.sample(["hashtag", "mention", "link"], rng.randint(1, 2))
    head, tail = "", ""
    for extra in extras:
        if extra == "hashtag":
            tag = " ".join(_hashtag(rng, lang, pool) for _ in range(rng.randint(1, 2)))
            if lang == "zh" and rng.random() < 0.5:
                head += tag + " "
            else:
                tail += " " + tag
        elif extra == "mention":
            tail += f" @{_handle(rng, lang, pool)}"
        else:
            tail += " " + _link(rng, lang)
    return prefix + head + text.strip() + tail, "+".join(["prefix", *extras])


def make_variants(text: str, lang: str, pool: list[str], rng: random.Random) -> dict[str, tuple[str, str]]:
    """level -> (variant text, kind of edit) for one original."""
    return {
        "format": format_variant(text, lang, rng),
        "light": light_variant(text, lang, pool, rng),
        "heavy": heavy_variant(text, lang, pool, rng),
        "repost": repost_variant(text, lang, pool, rng),
    }


# --- the documents of one corpus -------------------------------------------------------------------------


@dataclass
class Sample:
    """The documents of one evaluation store and what each of them is."""

    name: str
    lang: str
    texts: dict[str, str]                  # doc id -> raw text, in insertion order
    source: dict[str, str]                 # variant id -> its original's id
    level: dict[str, str]                  # variant id -> edit level
    kind: dict[str, str]                   # variant id -> kind of edit
    originals: int
    distractors: int


def build_sample(name: str, args) -> Sample:
    """Originals (>= --min-tokens tokens) and distractors, distinct by strict key, each original with one
    variant per level; seeded by --seed and the corpus name."""
    lang = CORPORA[name][1]
    records = load_corpus(name)
    rng = random.Random(f"{args.seed}-{name}")
    order = list(range(len(records)))
    rng.shuffle(order)
    originals, distractors, seen = [], [], set()
    for i in order:
        text = records[i][1]
        key = strict_key(text)
        if not key or key in seen:
            continue
        seen.add(key)
        if len(originals) < args.originals and len(edit_units(text, lang)[1]) >= args.min_tokens:
            originals.append(text)
        elif len(distractors) < args.distractors:
            distractors.append(text)
        if len(originals) >= args.originals and len(distractors) >= args.distractors:
            break
    # Replacement words / characters and user names come from the distractors: real vocabulary.
    pool = [u for text in distractors[:2000] for units, editable in [edit_units(text, lang)] for u in
            (units[p] for p in editable)]
    texts, source, level, kind = {}, {}, {}, {}
    for i, text in enumerate(originals):
        texts[f"o{i}"] = text
    for i, text in enumerate(distractors):
        texts[f"d{i}"] = text
    for i, text in enumerate(originals):
        for lvl, (variant, how) in make_variants(text, lang, pool, rng).items():
            vid = f"v{i}-{lvl}"
            texts[vid], source[vid], level[vid], kind[vid] = variant, f"o{i}", lvl, how
    log(f"{name}: {len(originals)} originals, {len(distractors)} distractors, {len(source)} variants")
    return Sample(name, lang, texts, source, level, kind, len(originals), len(distractors))


# --- the systems -----------------------------------------------------------------------------------------

PairScores = dict[tuple[str, str], dict]


def ordered(a: str, b: str) -> tuple[str, str]:
    """The key of an unordered pair of document ids."""
    return (a, b) if a < b else (b, a)


def dedupdb_pairs(texts: dict[str, str], workdir: Path, threshold: float | None,
                  preset: str | None = None, **settings) -> tuple[PairScores, dict]:
    """Document-level pairs of a fresh dedupdb store holding texts, made with the given preset (None: the
    library's default): pairs of contents (jaccard, hamming from the pairs table) and documents sharing one
    content ("exact"). Also returns the store's settings, candidate scheme and index rows; settings: other
    settings of the store (char_ngram=0, ...)."""
    corpus = workdir / "docs.jsonl"
    with corpus.open("w", encoding="utf-8") as fh:
        for doc_id, text in texts.items():
            fh.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
    db_path = workdir / "store.sqlite"
    with dedupdb.open(db_path, threshold=threshold, preset=preset, **settings) as db:
        summary = db.add([corpus], records=RecordOptions("jsonl", "text", "id"))
        failed = summary.counts().get("failed", 0)
        if failed:
            raise RuntimeError(f"dedupdb failed on {failed} input(s)")
        conn = db.store.conn
        docs = conn.execute("SELECT record, content_id FROM documents").fetchall()
        shingles = dict(conn.execute("SELECT id, shingles FROM contents").fetchall())
        rows = conn.execute("SELECT a, b, jaccard, hamming, template FROM pairs").fetchall()
        info = {"threshold": db.settings.threshold, "preset": db.settings.preset, "scheme": db.banding.describe(),
                "index_rows": db.store.index_rows(), "documents": len(docs), "contents": len(shingles),
                "content_pairs": len(rows)}
    missing = set(texts) - {d for d, _ in docs}
    if missing:
        raise RuntimeError(f"{len(missing)} documents are not in the store, e.g. {sorted(missing)[:3]}")
    by_content: dict[int, list[str]] = defaultdict(list)
    for doc_id, content_id in docs:
        by_content[content_id].append(doc_id)
    pairs: PairScores = {}
    for content_id, members in by_content.items():
        for a, b in itertools.combinations(members, 2):
            pairs[ordered(a, b)] = {"score": "exact", "shingles": [shingles[content_id]] * 2}
    for a, b, jac, ham, template in rows:
        for da in by_content.get(a, ()):
            for db_ in by_content.get(b, ()):
                pairs[ordered(da, db_)] = {"jaccard": round(jac, 4), "hamming": ham,
                                           "shingles": [shingles[a], shingles[b]], "template": bool(template)}
    return pairs, info


_WORD = re.compile(r"\w+")


def ds_shingles(text: str, lang: str, scheme: str) -> list[bytes]:
    """The datasketch shingles of a text (see the module docstring)."""
    folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    if scheme == "ds:char3":
        grams = char_grams(folded, 3)
    elif lang == "en":
        words = _WORD.findall(folded)
        grams = set(words) | {f"{a} {b}" for a, b in zip(words, words[1:])}
    else:
        grams = char_grams(strict_key(folded), 2)
    return [g.encode("utf-8") for g in grams]


def datasketch_pairs(texts: dict[str, str], lang: str, scheme: str) -> PairScores:
    """Document-level pairs from datasketch's MinHashLSH, verified by the MinHash estimate."""
    from datasketch import MinHash, MinHashLSH

    ids = list(texts)
    sigs = MinHash.bulk((ds_shingles(texts[i], lang, scheme) for i in ids), num_perm=DS_PERM)
    lsh = MinHashLSH(threshold=DS_THRESHOLD, num_perm=DS_PERM)
    with lsh.insertion_session() as session:
        for doc_id, sig in zip(ids, sigs):
            session.insert(doc_id, sig, check_duplication=False)
    values = {doc_id: sig.hashvalues for doc_id, sig in zip(ids, sigs)}
    pairs: PairScores = {}
    for doc_id, sig in zip(ids, sigs):
        for other in lsh.query(sig):
            if other <= doc_id:
                continue
            estimate = float(np.mean(values[doc_id] == values[other]))
            if estimate >= DS_THRESHOLD:
                pairs[ordered(doc_id, other)] = {"estimate": round(estimate, 4)}
    return pairs


def dedupdb_system(preset: str) -> str:
    """The name a dedupdb preset's figures go under: 'dedupdb' for the default banding."""
    return "dedupdb" if preset == dedupdb.config.PRESET_BANDING else f"dedupdb:{preset}"


def run_systems(texts: dict[str, str], lang: str, args, label: str) -> dict[str, tuple[PairScores, dict, float]]:
    """system -> (pairs, info, seconds) for dedupdb (one store per preset) and both datasketch schemes on the same
    documents."""
    out = {}
    for preset in args.presets:
        system = dedupdb_system(preset)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="dedupdb-precision-") as tmp:
            chosen = {} if args.char_ngram is None else {"char_ngram": args.char_ngram}
            pairs, info = dedupdb_pairs(texts, Path(tmp), args.threshold, preset, **chosen)
        out[system] = (pairs, info, time.perf_counter() - started)
        log(f"{label}: {system} {len(pairs):,} document pairs ({out[system][2]:.1f}s, {info['scheme']}, "
            f"{info['index_rows']:,} index rows)")
    if args.no_datasketch:
        return out
    for scheme in SYSTEMS[1:]:
        started = time.perf_counter()
        pairs = datasketch_pairs(texts, lang, scheme)
        out[scheme] = (pairs, {}, time.perf_counter() - started)
        log(f"{label}: {scheme} {len(pairs):,} document pairs ({out[scheme][2]:.1f}s)")
    return out


# --- scoring ---------------------------------------------------------------------------------------------


def snippet(text: str, width: int = 110) -> str:
    """text on one line, cut to width characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def false_pair_examples(false: list[tuple[str, str]], pairs: PairScores, judge: StrictJudge, texts: dict[str, str],
                        limit: int, rng: random.Random) -> tuple[list[dict], int]:
    """False pairs grouped by the pair of source texts behind them (a source pair shows up once per combination
    of its variants), and up to limit sampled groups, each shown by one document pair (the sources themselves
    when they were paired) with both texts (truncated), the strict similarity and what the system scored.
    Returns (examples, number of groups)."""
    groups: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for a, b in false:
        groups[ordered(judge.source.get(a, a), judge.source.get(b, b))].append((a, b))
    examples = []
    for key in sorted(rng.sample(sorted(groups), min(limit, len(groups)))):
        a, b = key if key in groups[key] else groups[key][0]
        examples.append({"a": a, "b": b, "doc_pairs": len(groups[key]), "strict_j4": round(judge.similarity(a, b), 3),
                         **pairs[(a, b)], "text_a": snippet(texts[a], 300), "text_b": snippet(texts[b], 300)})
    return examples, len(groups)


def score_sample(sample: Sample, pairs: PairScores, args) -> tuple[dict, list[tuple[str, str]]]:
    """Recall per level (with the first missed variants), reported pairs and strict false pairs (with sampled
    examples); also the false pairs themselves."""
    judge = StrictJudge(sample.texts, sample.source)
    result: dict = {"recall": {}, "found": {}, "variants": {}, "missed": {}}
    for lvl in LEVELS:
        vids = [v for v, l in sample.level.items() if l == lvl]
        missed = [v for v in vids if ordered(v, sample.source[v]) not in pairs]
        result["found"][lvl], result["variants"][lvl] = len(vids) - len(missed), len(vids)
        result["recall"][lvl] = (len(vids) - len(missed)) / len(vids) if vids else float("nan")
        result["missed"][lvl] = [{"variant": v, "kind": sample.kind[v], "text": snippet(sample.texts[v], 300),
                                  "original": snippet(sample.texts[sample.source[v]], 300)}
                                 for v in missed[:MISSED_KEPT]]
    result["found_as_template"] = {lvl: sum(1 for v, l in sample.level.items() if l == lvl and
                                            pairs.get(ordered(v, sample.source[v]), {}).get("template"))
                                   for lvl in LEVELS}
    false = [p for p in pairs if judge.is_false(*p)]
    result["pairs"] = len(pairs)
    result["false"] = result["example_pool"] = len(false)
    result["rate"] = len(false) / len(pairs) if pairs else 0.0
    # dedupdb marks template pairs (kind "template", grouped only when asked): their false pairs count apart.
    templates = sum(1 for p in pairs.values() if p.get("template"))
    result["template_pairs"] = templates
    result["false_templates"] = sum(1 for p in false if pairs[p].get("template"))
    result["rate_apart"] = ((len(false) - result["false_templates"]) / (len(pairs) - templates)
                            if len(pairs) > templates else 0.0)
    result["false_with_variant"] = sum(1 for a, b in false if a in sample.source or b in sample.source)
    result["examples"], result["false_sources"] = false_pair_examples(false, pairs, judge, sample.texts,
                                                                      args.examples, random.Random(args.seed))
    return result, false


def dedupdb_breakdown(false: list[tuple[str, str]], pairs: PairScores, threshold: float) -> dict:
    """How dedupdb's false pairs were reported: exact copies after its normalization, a stored Jaccard below the
    threshold (SimHash alone), and pairs where either side has fewer than 20 distinct shingles."""
    return {
        "false_exact": sum(1 for p in false if pairs[p].get("score") == "exact"),
        "false_simhash_only": sum(1 for p in false if pairs[p].get("jaccard", 1.0) < threshold),
        "false_few_shingles": sum(1 for p in false if min(pairs[p]["shingles"]) < 20),
    }


def evaluate_corpus(name: str, args) -> dict[str, dict]:
    """system -> scores for one edited corpus."""
    sample = build_sample(name, args)
    out = {}
    for system, (pairs, info, seconds) in run_systems(sample.texts, sample.lang, args, name).items():
        scores, false = score_sample(sample, pairs, args)
        if system.startswith("dedupdb"):
            scores.update(dedupdb_breakdown(false, pairs, info["threshold"]))
        out[system] = {"documents": len(sample.texts), "originals": sample.originals,
                       "distractors": sample.distractors, "seconds": round(seconds, 1), **info, **scores}
        log(f"{name} {system}: recall " + " ".join(f"{lvl} {scores['recall'][lvl]:.3f}" for lvl in LEVELS)
            + f"; false {scores['false']}/{scores['pairs']} ({100 * scores['rate']:.2f}%)")
    return out


# --- Clough & Stevenson ----------------------------------------------------------------------------------


def read_text_file(path: Path) -> str:
    """A Clough-Stevenson file: UTF-8 when it decodes, else Windows-1252."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def evaluate_clough(args) -> dict[str, dict]:
    """Recall of cut / light / heavy answers against their task's source; false pairs among the rest, both as
    pairs across tasks or with a `non` answer ("unrelated") and by the strict measure, where a reused answer
    stands for its task's source as a variant does for its original."""
    folder = EVAL_DIR / "clough_stevenson"
    with (folder / "file_information.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    texts, task, category = {}, {}, {}
    for row in rows:
        doc_id = Path(row["File"]).stem
        texts[doc_id] = read_text_file(folder / row["File"])
        task[doc_id], category[doc_id] = row["Task"], row["Category"]
    reused = {"cut", "light", "heavy"}
    source = {d: f"orig_task{task[d]}" for d, c in category.items() if c in reused}
    missing = set(source.values()) - set(texts)
    if missing:
        sys.exit(f"clough: sources missing from file_information.csv: {sorted(missing)}")
    log(f"clough: {sum(1 for c in category.values() if c != 'orig')} answers and "
        f"{sum(1 for c in category.values() if c == 'orig')} sources")
    judge = StrictJudge(texts, source)
    out = {}
    for system, (pairs, info, seconds) in run_systems(texts, "en", args, "clough").items():
        result: dict = {"documents": len(texts), "seconds": round(seconds, 1), **info, "recall": {}, "found": {}}
        for cat in ("cut", "light", "heavy"):
            answers = [d for d, c in category.items() if c == cat]
            found = sum(1 for d in answers if ordered(d, source[d]) in pairs)
            result["found"][cat] = found
            result["recall"][cat] = found / len(answers)
        non = [d for d, c in category.items() if c == "non"]
        result["non_with_source"] = sum(1 for d in non if ordered(d, f"orig_task{task[d]}") in pairs)
        result["non_answers"] = len(non)
        unrelated = [p for p in pairs if task[p[0]] != task[p[1]] or "non" in (category[p[0]], category[p[1]])]
        strict = [p for p in pairs if judge.is_false(*p)]
        result.update(pairs=len(pairs), unrelated=len(unrelated), false=len(strict),
                      rate=len(strict) / len(pairs) if pairs else 0.0)
        pool = sorted(set(unrelated) | set(strict))
        result["example_pool"] = len(pool)
        result["examples"], result["example_sources"] = false_pair_examples(pool, pairs, judge, texts, args.examples,
                                                                            random.Random(args.seed))
        out[system] = result
    return out


# --- output ----------------------------------------------------------------------------------------------


def cell(value: float, target: float, higher_is_better: bool = True, percent: bool = False) -> str:
    """A figure, starred when it misses its target."""
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    miss = value < target if higher_is_better else value > target
    text = f"{100 * value:.2f}" if percent else f"{value:.3f}"
    return text + ("*" if miss else " ")


def print_table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    """A plain table: the first two columns left-aligned, the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))


def report(results: dict[str, dict], args) -> None:
    """The main table, the Clough-Stevenson table and, with --examples, false pairs."""
    rows = []
    for name, per_system in results.items():
        if name == "clough":
            continue
        for system, r in per_system.items():
            rows.append([name, system, f"{r['documents']:,}"]
                        + [cell(r["recall"][lvl], TARGETS[lvl]) for lvl in LEVELS]
                        + [f"{r['pairs']:,}", f"{r['false']:,}", f"{r['false_sources']:,}",
                           cell(r["rate"], TARGETS["false_rate"], False, True),
                           f"{r.get('template_pairs', 0):,}", f"{r.get('false_templates', 0):,}",
                           cell(r.get("rate_apart", r["rate"]), TARGETS["false_rate"], False, True),
                           f"{r['seconds']:.0f}"])
    if rows:
        print_table(
            f"Known edits and strict false pairs (targets: recall format >= {TARGETS['format']}, light >= "
            f"{TARGETS['light']}, heavy >= {TARGETS['heavy']}, repost >= {TARGETS['repost']}; false-pair rate <= "
            f"{100 * TARGETS['false_rate']}%; * = misses; false = strict false document pairs, src = distinct pairs "
            "of source texts behind them; tmpl = pairs dedupdb marks as templates, of them false; rate% apart = "
            "false pairs not so marked over pairs not so marked; s = seconds)",
            ["corpus", "system", "docs", "format", "light", "heavy", "repost", "pairs", "false", "src", "rate%",
             "tmpl", "false", "rate% apart", "s"],
            rows)
    for name, per_system in results.items():
        for system, r in per_system.items():
            if r.get("found_as_template") and any(r["found_as_template"].values()):
                print(f"{name} / {system}: variants found as template pairs: " + ", ".join(
                    f"{lvl} {r['found_as_template'][lvl]}" for lvl in LEVELS))
    if "clough" in results:
        rows = []
        for system, r in results["clough"].items():
            rows.append([system, f"{r['documents']}"] + [f"{r['recall'][c]:.3f} ({r['found'][c]})"
                                                         for c in ("cut", "light", "heavy")]
                        + [f"{r['non_with_source']}/{r['non_answers']}", str(r["pairs"]), str(r["unrelated"]),
                           str(r["false"]), f"{100 * r['rate']:.2f}"])
        print_table("Clough & Stevenson (recall = answer paired with its task's source; unrelated = pairs across "
                    "tasks or with a `non` answer; false = strict 4-gram measure)",
                    ["system", "docs", "cut", "light", "heavy", "non~source", "pairs", "unrelated", "false",
                     "rate%"], rows)
    if args.examples:
        for name, per_system in results.items():
            for system, r in per_system.items():
                if not r["examples"]:
                    continue
                groups = r.get("false_sources", r.get("example_sources"))
                print(f"\n{name} / {system}: {len(r['examples'])} of {groups} source pairs behind "
                      f"{r['example_pool']} false document pairs")
                for ex in r["examples"]:
                    score = " ".join(f"{k}={ex[k]}" for k in ("doc_pairs", "score", "jaccard", "hamming", "estimate",
                                                              "shingles") if k in ex)
                    print(f"  strict_j4={ex['strict_j4']:.3f} {score}  [{ex['a']} | {ex['b']}]")
                    print(f"    A: {snippet(ex['text_a'])}")
                    print(f"    B: {snippet(ex['text_b'])}")
    sys.stdout.flush()


SYSTEM_LABELS = {"dedupdb": "dedupdb (banding)", "dedupdb:super-shingles": "dedupdb (super-shingles)",
                 "ds:char3": "datasketch, char 3-grams", "ds:word": "datasketch, words"}


LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


def write_chart(path: Path, results: dict[str, dict], caption: str) -> None:
    """A PNG of grouped bars: recall per edit level of every system, pooled over the edited corpora of each
    language (variants found / variants), and the strict false-pair rate pooled the same way (false pairs /
    reported pairs). matplotlib is imported here only (Agg, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    corpora = [name for name in results if name != "clough"]
    systems = list(dict.fromkeys(system for name in corpora for system in results[name]))
    languages = list(dict.fromkeys(CORPORA[name][1] for name in corpora))
    by_language = {lang: [n for n in corpora if CORPORA[n][1] == lang] for lang in languages}

    def pooled(names: list[str], system: str, level: str) -> float:
        found = sum(results[n][system]["found"][level] for n in names if system in results[n])
        return found / max(1, sum(results[n][system]["variants"][level] for n in names if system in results[n]))

    def false_rate(names: list[str], system: str) -> float:
        false = sum(results[n][system]["false"] for n in names if system in results[n])
        return false / max(1, sum(results[n][system]["pairs"] for n in names if system in results[n]))

    fig = Figure(figsize=(4.2 * len(languages) + 3.2, 5.0), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(languages) + 1, gridspec_kw={"width_ratios": [4] * len(languages) + [2.6]})
    width = 0.8 / max(1, len(systems))
    colors = {system: f"C{i}" for i, system in enumerate(systems)}
    offsets = {system: (k - (len(systems) - 1) / 2) * width for k, system in enumerate(systems)}
    for ax, lang in zip(axes, languages):
        for system in systems:
            values = [pooled(by_language[lang], system, lvl) for lvl in LEVELS]
            bars = ax.bar([i + offsets[system] for i in range(len(LEVELS))], values, width, color=colors[system],
                          label=SYSTEM_LABELS.get(system, system))
            ax.bar_label(bars, labels=[f"{v:.3f}" for v in values], fontsize=7, rotation=90, padding=2)
        ax.set_xticks(range(len(LEVELS)), LEVELS)
        ax.set_xlabel("edit level of the variant")
        ax.set_ylim(0, 1.15)
        ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
        ax.set_title(f"recall, {LANGUAGE_NAMES.get(lang, lang)}: {', '.join(by_language[lang])}", fontsize=10)
    axes[0].set_ylabel("recall (variant paired with its original)")
    rates = axes[-1]
    top = 0.0
    for system in systems:
        values = [100 * false_rate(by_language[lang], system) for lang in languages]
        top = max(top, *values)
        bars = rates.bar([i + offsets[system] for i in range(len(languages))], values, width, color=colors[system])
        rates.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7, rotation=90, padding=2)
    rates.set_xticks(range(len(languages)), [LANGUAGE_NAMES.get(lang, lang) for lang in languages])
    rates.set_ylim(0, max(1.0, 1.3 * top))
    rates.set_ylabel("strict false pairs, % of reported pairs")
    rates.set_title("false-pair rate", fontsize=10)
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", ncol=len(systems), fontsize=9,
               frameon=False)
    fig.text(0.01, 0.01, caption, fontsize=8, color="dimgray", family="monospace")
    fig.tight_layout(rect=(0, 0.04, 1, 0.93))
    fig.savefig(path, format="png")


def revision() -> str:
    """The git commit of the checkout being measured, if git can tell."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or "no git"
    except (OSError, subprocess.SubprocessError):
        return "no git"


def parse_args(argv=None) -> argparse.Namespace:
    """The command line; --quick caps the samples."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--corpora", default=",".join(CORPORA), help="comma-separated short names")
    p.add_argument("--originals", type=int, default=1000, help="originals per corpus (one variant per level)")
    p.add_argument("--distractors", type=int, default=5000, help="untouched other documents per corpus")
    p.add_argument("--min-tokens", type=int, default=10, help="originals have at least this many words / CJK chars")
    p.add_argument("--seed", type=int, default=1, help="sampling and edit seed")
    p.add_argument("--threshold", type=float, default=None, help="dedupdb threshold (default: the library's)")
    p.add_argument("--char-ngram", type=int, default=None, help="dedupdb character n-grams (0: words alone)")
    p.add_argument("--presets", default="banding",
                   help="comma-separated dedupdb presets, each a system of its own, all on the same documents: "
                        "banding (system 'dedupdb'), super-shingles (system 'dedupdb:super-shingles')")
    p.add_argument("--no-datasketch", action="store_true", help="measure dedupdb only")
    p.add_argument("--examples", type=int, default=0, help="print this many sampled false pairs per corpus and system")
    p.add_argument("--json", type=Path, default=None, help="write every figure and example here")
    p.add_argument("--quick", action="store_true", help="200 originals and 1,000 distractors per corpus")
    p.add_argument("--chart", type=Path, default=None, metavar="PATH.png",
                   help="also write a PNG of recall per edit level and the false-pair rate (needs matplotlib)")
    args = p.parse_args(argv)
    if args.chart and importlib.util.find_spec("matplotlib") is None:
        p.error("--chart needs matplotlib: pip install -e \".[bench]\"")
    args.corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    args.presets = [x.strip() for x in args.presets.split(",") if x.strip()]
    wrong = [x for x in args.presets if x not in dedupdb.config.PRESETS]
    if wrong or not args.presets:
        p.error(f"unknown presets {wrong}; choose from {', '.join(dedupdb.config.PRESETS)}")
    unknown = [c for c in args.corpora if c not in CORPORA]
    if unknown:
        p.error(f"unknown corpora {unknown}; choose from {', '.join(CORPORA)}")
    if args.quick:
        args.originals, args.distractors = min(args.originals, 200), min(args.distractors, 1000)
    return args


def main(argv=None) -> None:
    """Evaluate every chosen corpus, print the tables and write --json."""
    args = parse_args(argv)
    started = time.perf_counter()
    print(f"dedupdb {dedupdb.__version__} ({revision()}), threshold {args.threshold or 'default'}, presets "
          f"{', '.join(args.presets)}; datasketch "
          f"MinHashLSH t={DS_THRESHOLD} perm={DS_PERM}; {args.originals} originals + {args.distractors} distractors "
          f"per corpus, seed {args.seed}")
    results = {}
    for name in args.corpora:
        results[name] = evaluate_clough(args) if name == "clough" else evaluate_corpus(name, args)
    elapsed = time.perf_counter() - started
    report(results, args)
    print(f"\ndone in {elapsed:.0f}s")
    if args.json:
        payload = {"revision": revision(), "args": {k: str(v) if isinstance(v, Path) else v
                                                    for k, v in vars(args).items()},
                   "targets": TARGETS, "seconds": round(elapsed, 1), "results": results}
        args.json.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
        log(f"wrote {args.json}")
    if args.chart and any(name != "clough" for name in results):
        command = " ".join(["python scripts/eval_precision.py", *(argv if argv is not None else sys.argv[1:])])
        write_chart(args.chart, results, command)
        log(f"wrote {args.chart}")


if __name__ == "__main__":
    main()
