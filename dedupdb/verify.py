"""Turns candidate pairs into scored pairs: nothing is called a near-duplicate before it is verified."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .minhash import sketch_overlap
from .simhash import hamming


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


# A verdict needs this many shingles in common besides the Jaccard: "不错！" and "不错的。" share one bigram of
# two, and 0.5 of almost nothing is no evidence. Chosen by measurement (scripts/eval_precision.py, default
# samples): on Chinese reviews 1 -> 0.60% strict false pairs, 3 -> 0.52%, 5 -> 0.40%, with format, light and
# repost recall 0.997 and heavy 0.965; a threshold raised for small sets as well (+0.1/sqrt(union)) cut heavy
# recall to 0.93 for 0.38%, and was left out.
MIN_SHARED_SHINGLES = 5


def judge(a: Signature, b: Signature, threshold: float, max_distance: int, sketch_size: int) -> Verdict:
    """Near-duplicate when the Jaccard of the shingles (from the bottom-k sketches) reaches the threshold and
    rests on at least MIN_SHARED_SHINGLES shared shingles. SimHash finds candidates and its distance is reported,
    but never decides: long texts of one sender or one frame fall within a few bits while sharing a third of
    their shingles. (max_distance is kept for callers that report whether the SimHash agrees.)"""
    jaccard, shared = sketch_overlap(a.sketch, b.sketch, sketch_size)
    distance = hamming(a.simhash, b.simhash) if a.simhash is not None and b.simhash is not None else None
    duplicate = jaccard >= threshold and shared >= MIN_SHARED_SHINGLES
    return Verdict(round(jaccard, 4), distance, duplicate)


class PairJudge:
    """judge() for a batch of candidate pairs at once, with the same verdicts. Pair by pair in numpy at first;
    compiled (fastverify.py, 1.5 against 5 microseconds a pair) once this process has spent, or a batch would
    spend, FAST_AFTER_SECONDS judging that way (about what loading numba costs: half a second, and some 60 MB),
    or at once when numba is loaded already. Adding 100,000 reviews verifies for 0.3 s and stays on numpy; an add
    onto a million documents verifies 20 pairs a document and takes compiled code from its first batch."""

    FAST_AFTER_SECONDS = 0.5
    NUMPY_SECONDS_A_PAIR = 5e-6

    def __init__(self, threshold: float, sketch_size: int) -> None:
        self.threshold = threshold
        self.sketch_size = sketch_size
        self._numpy_seconds = 0.0

    def pairs(self, signatures: dict[int, Signature], pairs: np.ndarray) -> list[tuple[int, int, float, int | None]]:
        """(a, b, Jaccard, SimHash distance) of the near-duplicate pairs among (n, 2) content ids."""
        expected = self._numpy_seconds + len(pairs) * self.NUMPY_SECONDS_A_PAIR
        fast = self._fast() if expected >= self.FAST_AFTER_SECONDS or "numba" in sys.modules else None
        if fast is None:
            started = time.perf_counter()
            out = []
            for a, b in pairs.tolist():
                verdict = judge(signatures[a], signatures[b], self.threshold, 0, self.sketch_size)
                if verdict.duplicate:
                    out.append((a, b, verdict.jaccard, verdict.hamming))
            self._numpy_seconds += time.perf_counter() - started
            return out
        # Each pair as positions in the signatures: an id without one fails here (KeyError), as on the path above,
        # before compiled code, which reads without bounds checks, could read astray.
        position = {cid: i for i, cid in enumerate(signatures)}
        left, right = (np.fromiter((position[c] for c in side.tolist()), np.int64, len(side)) for side in pairs.T)
        sketches = [signature.sketch for signature in signatures.values()]
        shared, jaccard = fast.overlaps(sketches, left, right, self.sketch_size)
        kept = np.flatnonzero((jaccard >= self.threshold) & (shared >= MIN_SHARED_SHINGLES))
        out = []
        for a, b, value in zip(pairs[kept, 0].tolist(), pairs[kept, 1].tolist(), jaccard[kept].tolist()):
            x, y = signatures[a].simhash, signatures[b].simhash
            out.append((a, b, round(value, 4), hamming(x, y) if x is not None and y is not None else None))
        return out

    @staticmethod
    @lru_cache(maxsize=1)
    def _fast():
        try:
            from . import fastverify
        except ImportError:
            return None
        return fastverify
