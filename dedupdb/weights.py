"""TF-IDF weights for SimHash features.

Chinese words take jieba's IDF table. Other words take an IDF learnt from the
documents themselves, kept in the store as document frequencies in 2**20
hashed buckets: a fixed-size array, cheap to update and to save, whose rare
collisions only blur the weight of a few rare words.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from .hashing import distinct
from .tokens import jieba_idf

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


def chinese_idf(words: list[str]) -> NDArray[np.float64]:
    table, median = jieba_idf()
    return np.fromiter((table.get(w, median) for w in words), np.float64, len(words))
