"""Weights of SimHash features, from fixed tables: a text's SimHash follows from its text alone, whatever else a
store holds or where the batches of an add begin (so an add resumed after a kill stores what one uninterrupted
run does, and any process can compute it).

Chinese words take jieba's IDF table. Other words take a weight from word frequency lists of twelve languages,
those pyspellchecker ships (word_weights). CorpusIdf, an IDF learnt from the documents themselves in 2**20 hashed
buckets, is what stores of algorithm version 3 weighed them by; a scale-out job still counts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from itertools import repeat
from pathlib import Path

import numpy as np
import xxhash
from numpy.typing import NDArray

from dedupdb.text.hashing import distinct
from dedupdb.text.tokens import TOKEN_SEED, jieba_idf, split_tokens

_BUCKET_BITS = np.uint64(20)
DF_BUCKETS = 1 << 20
_BUCKET_MASK = np.uint64(DF_BUCKETS - 1)


class CorpusIdf:
    def __init__(self, load: Callable[[], tuple[bytes | None, int]] | None = None) -> None:
        """Empty, or read when first needed: load() gives the stored bytes and the documents they count, read
        together so that they agree. A query too short for SimHash, most of them, never needs the 4 MiB, about
        10 ms of a cold query."""
        self._load = load
        self._df: NDArray[np.uint32] | None = None
        self._documents = 0
        self.dirty = False

    def _loaded(self) -> None:
        if self._df is None:
            blob, documents = self._load() if self._load is not None else (None, 0)
            self._df = np.frombuffer(blob, dtype="<u4").astype(np.uint32) if blob else np.zeros(DF_BUCKETS, np.uint32)
            self._documents = documents

    @property
    def documents(self) -> int:
        self._loaded()
        return self._documents

    @property
    def df(self) -> NDArray[np.uint32]:
        self._loaded()
        return self._df

    def observe(self, buckets: list[NDArray[np.uint32]]) -> None:
        """Count documents, each given by the distinct buckets of its words (word_buckets), once in each."""
        if not buckets:
            return
        df = self.df  # loads the stored frequencies, and the count of documents with them, if not yet done
        df += np.bincount(np.concatenate(buckets).astype(np.intp), minlength=DF_BUCKETS).astype(np.uint32)
        self._documents += len(buckets)
        self.dirty = True

    def idf(self, distinct_hashes: NDArray[np.uint64]) -> NDArray[np.float64]:
        df = self.df[(distinct_hashes & _BUCKET_MASK).astype(np.intp)].astype(np.float64)
        return np.log((self.documents + 1.0) / (df + 1.0)) + 1.0

    def to_bytes(self) -> bytes:
        return self.df.astype("<u4").tobytes()


def word_buckets(documents: list[NDArray[np.uint64]]) -> list[NDArray[np.uint32]]:
    """The distinct buckets of each document's words (its distinct word hashes), all documents in one pass: what
    CorpusIdf.observe counts. Worked out where texts are sketched, a worker, and not where the store is written:
    the sort it takes was a twentieth of that process's time."""
    if not documents:
        return []
    owner = np.repeat(np.arange(len(documents), dtype=np.uint64), [len(d) for d in documents])
    # Distinct words of one document may share a bucket: each (document, bucket) pair counts once.
    pairs = distinct((owner << _BUCKET_BITS) | (np.concatenate(documents) & _BUCKET_MASK))
    cuts = np.searchsorted(pairs >> _BUCKET_BITS, np.arange(1, len(documents), dtype=np.uint64))
    return np.split((pairs & _BUCKET_MASK).astype(np.uint32), cuts)


# A Chinese word's hash, SimHash's feature of it and the key of its IDF in the table below.
CHINESE_WORD_SEED = 0x51A5
# Of how jieba's table is derived; with jieba's version it names the cached table. 2: keyed by the words'
# chinese_word_hashes, SimHash's own, so that a word is hashed once (1 took another seed).
_CHINESE_TABLE_VERSION = 2


def chinese_word_hashes(words: list[str]) -> NDArray[np.uint64]:
    hashes = map(xxhash.xxh64_intdigest, map(str.encode, words), repeat(CHINESE_WORD_SEED))  # no generator: quicker
    return np.fromiter(hashes, np.uint64, len(words))


def chinese_idf(hashes: NDArray[np.uint64]) -> NDArray[np.float64]:
    """jieba's IDF of each word (by its chinese_word_hashes), its median for a word it does not know."""
    keys, values, median = _chinese_table()
    at = np.minimum(np.searchsorted(keys, hashes), len(keys) - 1)
    return np.where(keys[at] == hashes, values[at], median)


@lru_cache(maxsize=1)
def _chinese_table() -> tuple[NDArray[np.uint64], NDArray[np.float64], float]:
    """jieba's IDF table as (sorted word hashes, their IDF) and its median: 4 MB where the table as a dict of words
    takes 57 MB in every process that sketches Chinese (a query process among them). Read from the cache folder,
    or derived from jieba's file (under a second, once a machine) and kept there."""
    from importlib.metadata import version

    from dedupdb.config import UNREADABLE_TABLE, cache_dir, keep_table

    path = cache_dir() / f"jieba-idf-{_CHINESE_TABLE_VERSION}-jieba-{version('jieba')}.npy"
    try:
        table = np.load(path, allow_pickle=False)
        keys, values = table["hash"].copy(), table["idf"].copy()
    except UNREADABLE_TABLE:
        table = _derived_chinese_table()
        keys, values = table["hash"], table["idf"]
        keep_table(path, table)
    return keys, values, float(np.sort(values)[len(values) // 2]) if len(values) else 0.0


def _derived_chinese_table() -> np.ndarray:
    words, _ = jieba_idf()
    jieba_idf.cache_clear()  # the dict is not kept: the table replaces it
    hashes = chinese_word_hashes(list(words))
    if len(distinct(hashes)) != len(hashes):  # never seen with jieba's table; a dict would tell such words apart
        raise AssertionError("two words of jieba's IDF table share a hash")
    order = np.argsort(hashes, kind="stable")
    table = np.empty(len(words), [("hash", "<u8"), ("idf", "<f8")])
    table["hash"], table["idf"] = hashes[order], np.fromiter(words.values(), np.float64, len(words))[order]
    return table


# --- words other than Chinese: a fixed table -----------------------------------------------------------------------

# pyspellchecker's frequency lists (from subtitles), each named here: a list added by a later release must not
# change the weights. A word's weight is 1 + ln(COMMON / p), p its highest share of the words of any list: 1 for a
# word as common as "the" or more, up to RARE_WEIGHT for a word rarer than RARE in every list or in none (every
# token of a list's entry counts, as the tokenizer cuts "don't"). The ten digits weigh 1: the tokenizer cuts every
# number into them, which makes them as common as "the" in news (weighed as rare words, they gave SimHash 2.3 times
# the candidates of the corpus IDF on Reuters). On scripts/eval_precision.py's English corpora this finds 1.01 to
# 1.04 times the SimHash candidates of the corpus IDF it replaces, and as many pairs or more; equal weights for
# every word found 2 to 25 times the candidates.
WORD_LISTS = ("ar", "de", "en", "es", "eu", "fa", "fr", "it", "lv", "nl", "pt", "ru")
COMMON = 0.02
RARE = 1e-6
RARE_WEIGHT = 1.0 + float(np.log(COMMON / RARE))
_TABLE_VERSION = 1  # of how the table is derived; with the package's version it names the cached table
_ENTRY = re.compile(rb'"([^"\\\n]+)": (\d{3,})')  # a list's entries counted 100 times or more (the rest are rare)


def word_weights(hashes: NDArray[np.uint64]) -> NDArray[np.float64]:
    """The SimHash weight of each word, by its token hash (tokens.py)."""
    keys, weights = _word_table()
    at = np.minimum(np.searchsorted(keys, hashes), len(keys) - 1)
    return np.where(keys[at] == hashes, weights[at], RARE_WEIGHT)


def word_table() -> tuple[NDArray[np.uint64], NDArray[np.float64]]:
    """(sorted token hashes, their weights): the table word_weights looks words up in."""
    return _word_table()


def word_table_name() -> str:
    """The file name of the table derived from the lists of the pyspellchecker installed."""
    from importlib.metadata import version

    return f"word-weights-{_TABLE_VERSION}-pyspellchecker-{version('pyspellchecker')}.npy"


# The table as derived from the lists of the pyspellchecker the dependencies name, shipped with the package
# (scripts/derive_word_weights.py writes it; tests/test_signatures.py checks it against a derivation): deriving it
# took every process of the first add after an install 1.8 s of CPU, a third of that add's time on two cores.
SHIPPED_TABLES = Path(__file__).parent / "tables"


@lru_cache(maxsize=1)
def _word_table() -> tuple[NDArray[np.uint64], NDArray[np.float64]]:
    """(sorted token hashes, their weights): the table shipped for the pyspellchecker installed, else one read from
    the cache folder, or derived from the lists (a second or two, once a machine) and kept there. Loaded when a
    text first needs it: a query too short for SimHash never does."""
    from dedupdb.config import UNREADABLE_TABLE, cache_dir, keep_table

    name = word_table_name()
    for path in (SHIPPED_TABLES / name, cache_dir() / name):
        try:
            table = np.load(path, allow_pickle=False)
            return table["hash"].copy(), table["weight"].copy()
        except UNREADABLE_TABLE:
            pass
    table = _derived_table()
    keep_table(cache_dir() / name, table)
    return table["hash"].copy(), table["weight"].copy()


def _derived_table() -> np.ndarray:
    """The table derived from pyspellchecker's lists, as its structured array (hash, weight)."""
    import gzip

    import spellchecker

    from dedupdb.text.normalize import normalize

    folder = Path(spellchecker.__file__).parent / "resources"
    share: dict[bytes, float] = {}
    for name in WORD_LISTS:
        entries = _ENTRY.findall(gzip.decompress((folder / f"{name}.json.gz").read_bytes()))
        total = sum(int(count) for _, count in entries)
        counts: dict[bytes, int] = {}
        for word, count in entries:
            if int(count) < RARE * total:
                continue
            if word.isalpha() and word.islower() and word != b"rt":  # ASCII letters: one token, itself
                counts[word] = counts.get(word, 0) + int(count)
                continue
            tokens, _ = split_tokens(normalize(word.decode("utf-8")))
            for token in tokens:
                key = token if isinstance(token, bytes) else token.encode("utf-8")
                counts[key] = counts.get(key, 0) + int(count)
        for key, count in counts.items():
            share[key] = max(share.get(key, 0.0), count / total)
    share.update((str(digit).encode(), COMMON) for digit in range(10))
    hashes = np.fromiter((xxhash.xxh64_intdigest(k, TOKEN_SEED) for k in share), np.uint64, len(share))
    weights = 1.0 + np.log(COMMON / np.clip(np.fromiter(share.values(), np.float64, len(share)), RARE, COMMON))
    order = np.argsort(hashes, kind="stable")
    table = np.empty(len(share), [("hash", "<u8"), ("weight", "<f8")])
    table["hash"], table["weight"] = hashes[order], weights[order]
    return table
