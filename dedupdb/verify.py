"""Turns candidate pairs into scored pairs: nothing is called a near-duplicate before it is verified."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .minhash import sketch_jaccard
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


# SimHash alone may admit a pair the Jaccard does not, but not one with almost no shingles in common: on
# news wire, related stories on one topic can fall within 3 bits at a Jaccard near 0.1.
SIMHASH_MIN_JACCARD = 0.3


def judge(a: Signature, b: Signature, threshold: float, max_distance: int, sketch_size: int) -> Verdict:
    """Near-duplicate when the Jaccard from the bottom-k sketches reaches the threshold, or when both
    texts are long enough for SimHash, their fingerprints lie within max_distance bits and they still share
    a fair part of their shingles."""
    jaccard = sketch_jaccard(a.sketch, b.sketch, sketch_size)
    distance = hamming(a.simhash, b.simhash) if a.simhash is not None and b.simhash is not None else None
    by_simhash = distance is not None and distance <= max_distance and jaccard >= SIMHASH_MIN_JACCARD
    duplicate = jaccard >= threshold or by_simhash
    return Verdict(round(jaccard, 4), distance, duplicate)
