"""Turns candidate pairs into scored pairs: nothing is called a near-duplicate before it is verified."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dedupdb import compiled
from dedupdb.sketch.minhash import view_overlap
from dedupdb.sketch.simhash import hamming
from dedupdb.text.hashing import ranges


@dataclass(frozen=True)
class Signature:
    """What verification needs of one content."""

    sketch: np.ndarray
    simhash: int | None  # unsigned 64-bit, None when too short for SimHash


@dataclass(frozen=True)
class Verdict:
    jaccard: float
    hamming: int | None
    duplicate: bool


# Evidence besides the Jaccard: at least this many shared shingles, or all of them when the union holds fewer.
# "不错！" and "不错的。" share one bigram of two, and 0.5 of almost nothing is no evidence; but two sets that agree
# completely ("You have been lovely" and the same with a hashtag, the tag left out) are never refused, however
# small. Chosen by measurement (scripts/eval_precision.py, default samples): on Chinese reviews a fixed 1 ->
# 0.60% strict false pairs, 3 -> 0.52%, 5 -> 0.40%; a count scaled to the union instead (the threshold's share of
# the union plus one shingle, which also refuses a photo credit with another name, 5 of 10 bigrams) cost 10-20%
# edits 0.965 -> 0.938 on SophonPlus and 0.963 -> 0.923 on THUCNews, whose edits often land on exactly half of
# a small union, for 0.47% false pairs on SophonPlus; a threshold raised for small sets (+0.1/sqrt(union)) cut
# heavy recall to 0.93 for 0.38%. Short English texts rest on their character view (tokens.py), dozens of
# shingles for five words, and meet this count whenever they reach the threshold.
MIN_SHARED_SHINGLES = 5


def enough_evidence(shared, union):
    """Whether shared of union shingles are evidence enough (numbers or numpy arrays): MIN_SHARED_SHINGLES, or
    every shingle when the union holds fewer."""
    return (shared >= np.minimum(MIN_SHARED_SHINGLES, union)) & (shared > 0)


def judge(a: Signature, b: Signature, threshold: float, max_distance: int, sketch_size: int) -> Verdict:
    """Near-duplicate when the Jaccard of the shingles (from the bottom-k sketches) reaches the threshold with
    enough evidence (enough_evidence). SimHash finds candidates and its distance is reported, but never decides:
    long texts of one sender or one frame fall within a few bits while sharing a third of their shingles.
    (max_distance is kept for callers that report whether the SimHash agrees.)"""
    jaccard, shared, union = view_overlap(a.sketch, b.sketch, sketch_size)
    distance = hamming(a.simhash, b.simhash) if a.simhash is not None and b.simhash is not None else None
    duplicate = bool(jaccard >= threshold and enough_evidence(shared, union))
    return Verdict(round(jaccard, 4), distance, duplicate)


@dataclass
class SketchTable:
    """Many contents' sketches and SimHashes as columns: what verifying a batch reads, without an object or an
    array per content (an add onto a million documents reads half a million stored sketches a batch of 12,500)."""

    ids: np.ndarray          # int64, sorted and distinct
    values: np.ndarray       # uint32: every sketch, joined in the order of ids
    lengths: np.ndarray      # int64: values of each sketch
    simhashes: np.ndarray    # uint64, unsigned; 0 where there is none
    has_simhash: np.ndarray  # bool

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.lengths) - self.lengths

    @classmethod
    def of(cls, signatures: dict[int, Signature]) -> "SketchTable":
        ids = np.fromiter(signatures, np.int64, len(signatures))
        items = list(signatures.values())
        values = np.concatenate([s.sketch for s in items]).astype(np.uint32, copy=False) if items else np.empty(0, np.uint32)
        return cls(ids, values, np.fromiter((len(s.sketch) for s in items), np.int64, len(items)),
                   np.fromiter((s.simhash or 0 for s in items), np.uint64, len(items)),
                   np.fromiter((s.simhash is not None for s in items), bool, len(items))).sorted()

    @classmethod
    def joined(cls, tables: list["SketchTable"]) -> "SketchTable":
        """One table of several whose ids do not overlap."""
        if len(tables) == 1:
            return tables[0]
        return cls(*(np.concatenate([getattr(t, name) for t in tables])
                     for name in ("ids", "values", "lengths", "simhashes", "has_simhash"))).sorted()

    def sorted(self) -> "SketchTable":
        if len(self.ids) < 2 or bool((self.ids[1:] > self.ids[:-1]).all()):
            return self
        order = np.argsort(self.ids, kind="stable")
        if bool((self.ids[order][1:] == self.ids[order][:-1]).any()):
            raise ValueError("a content appears twice among the sketches")
        starts = self.starts
        return SketchTable(self.ids[order], self.values[ranges(starts[order], self.lengths[order])],
                           self.lengths[order], self.simhashes[order], self.has_simhash[order])

    def positions(self, content_ids: np.ndarray) -> np.ndarray:
        """Where each content is in the table; KeyError for one it does not hold."""
        content_ids = np.asarray(content_ids, np.int64)
        at = np.searchsorted(self.ids, content_ids)
        clipped = np.minimum(at, max(len(self.ids) - 1, 0))
        missing = (at >= len(self.ids)) | (self.ids[clipped] != content_ids) if len(self.ids) else np.ones(len(at), bool)
        if missing.any():
            raise KeyError(int(content_ids[np.flatnonzero(missing)[0]]))
        return at

    def distances(self, left: np.ndarray, right: np.ndarray) -> list[int | None]:
        """SimHash distance of each pair of positions, None where either has no SimHash."""
        both = self.has_simhash[left] & self.has_simhash[right]
        counts = np.bitwise_count(self.simhashes[left] ^ self.simhashes[right]).tolist()
        return [c if b else None for c, b in zip(counts, both.tolist())]


class PairJudge:
    """judge() for a batch of candidate pairs at once, with the same verdicts. Pair by pair in numpy at first;
    compiled (fastverify.py, 1.5 against 5 microseconds a pair) once this process has spent, or a batch would
    spend, FAST_AFTER_SECONDS judging that way (about what loading numba costs: half a second, and some 60 MB),
    or at once when numba is loaded already. Adding 100,000 reviews verifies for 0.3 s and stays on numpy; an add
    onto a million documents verifies 20 pairs a document and takes compiled code from its first batch."""

    FAST_AFTER_SECONDS = 0.5
    NUMPY_SECONDS_A_PAIR = 5e-6
    # Judging in numpy this long while another process compiles (compiled.awaiting: a first add), this one compiles
    # the verifying itself: about 2 s, numba's start included, and numba's cache keeps it for the other. Short texts
    # meet many candidates: a first add of 150,000 English sentences spent half its writing process, the add's
    # slowest, judging pair by pair in numpy, some 12 s, as the compile of everything took the idle CPU to its end.
    COMPILE_ITSELF_AFTER_SECONDS = 2.0

    def __init__(self, threshold: float, sketch_size: int) -> None:
        self.threshold = threshold
        self.sketch_size = sketch_size
        self._numpy_seconds = 0.0

    def pairs(self, signatures: "dict[int, Signature] | SketchTable", pairs: np.ndarray) -> list[tuple[int, int, float, int | None]]:
        """(a, b, Jaccard, SimHash distance) of the near-duplicate pairs among (n, 2) content ids; every id must
        have its signature (KeyError otherwise)."""
        table = signatures if isinstance(signatures, SketchTable) else SketchTable.of(signatures)
        pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
        # Positions are checked here, before compiled code, which reads without bounds checks, could read astray.
        left, right = table.positions(pairs[:, 0]), table.positions(pairs[:, 1])
        expected = self._numpy_seconds + len(pairs) * self.NUMPY_SECONDS_A_PAIR
        wanted = expected >= self.FAST_AFTER_SECONDS or "numba" in sys.modules
        fast = self._fast() if wanted and (not compiled.waiting() or self._compile_itself()) else None
        if fast is None:
            started = time.perf_counter()
            starts, values, lengths = table.starts.tolist(), table.values, table.lengths.tolist()
            jaccards, shared_counts, unions = [], [], []
            for i, j in zip(left.tolist(), right.tolist()):
                jaccard, shared, union = view_overlap(values[starts[i] : starts[i] + lengths[i]],
                                                      values[starts[j] : starts[j] + lengths[j]], self.sketch_size)
                jaccards.append(jaccard)
                shared_counts.append(shared)
                unions.append(union)
            jaccard, shared = np.array(jaccards, np.float64), np.array(shared_counts, np.int64)
            union = np.array(unions, np.int64)
            self._numpy_seconds += time.perf_counter() - started
        else:
            shared, jaccard, union = fast.overlaps(table.values, table.starts, table.lengths, left, right,
                                                   self.sketch_size)
        kept = np.flatnonzero((jaccard >= self.threshold) & enough_evidence(shared, union))
        distances = table.distances(left[kept], right[kept])
        return [(a, b, round(value, 4), distance) for a, b, value, distance in
                zip(pairs[kept, 0].tolist(), pairs[kept, 1].tolist(), jaccard[kept].tolist(), distances)]

    def _compile_itself(self) -> bool:
        """Whether to take the compiled verifying while the compiled code is awaited: once numpy has judged for
        COMPILE_ITSELF_AFTER_SECONDS, unless a thread of this process is loading compiled code now."""
        return self._numpy_seconds >= self.COMPILE_ITSELF_AFTER_SECONDS and not compiled.loading()

    @classmethod
    def load_compiled(cls) -> bool:
        """Load the compiled code now rather than at the first batch that takes it; returns whether it could be."""
        return cls._fast() is not None

    @staticmethod
    def _fast():
        return compiled_verifying()


@lru_cache(maxsize=1)
def compiled_verifying():
    """The compiled verifying module (fastverify.py), or None where it cannot be imported."""
    try:
        from dedupdb.sketch import fastverify
    except ImportError:
        return None
    return fastverify
