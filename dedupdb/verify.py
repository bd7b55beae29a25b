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


def judge(a: Signature, b: Signature, threshold: float, max_distance: int, sketch_size: int) -> Verdict:
    """Near-duplicate when the Jaccard from the bottom-k sketches reaches the threshold, or when both
    texts are long enough for SimHash and their fingerprints lie within max_distance bits."""
    jaccard = sketch_jaccard(a.sketch, b.sketch, sketch_size)
    distance = hamming(a.simhash, b.simhash) if a.simhash is not None and b.simhash is not None else None
    duplicate = jaccard >= threshold or (distance is not None and distance <= max_distance)
    return Verdict(round(jaccard, 4), distance, duplicate)
