"""LSH banding: choosing bands x rows for a Jaccard threshold, and the band keys of a signature."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .hashing import fmix64

_BAND_MULT = np.uint64(0x100000001B3)  # FNV-1a 64-bit prime
_BAND_OFFSET = np.uint64(0xCBF29CE484222325)


@dataclass(frozen=True)
class Banding:
    bands: int
    rows: int

    def probability(self, similarity: float | NDArray[np.float64]):
        """Chance that two documents of this Jaccard similarity share at least one band: the S-curve."""
        return 1.0 - (1.0 - np.asarray(similarity) ** self.rows) ** self.bands


def _area(f, lo: float, hi: float, points: int = 512) -> float:
    x = np.linspace(lo, hi, points)
    y = f(x)
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)


# Every candidate is verified against its sketch, so a false positive of the banding costs some time
# while a false negative loses a pair for good: the weights lean hard towards recall. At threshold 0.5 and
# 256 permutations this gives 53 bands x 4 rows: a pair at the threshold becomes a candidate with
# probability 0.97 (equal weights give 0.48), one at Jaccard 0.05 with probability 0.0003. With 128
# permutations the same weights need rows of 3, and ten times as many unrelated pairs become candidates,
# which slows adding and querying as a store grows.
FALSE_POSITIVE_WEIGHT = 0.05
FALSE_NEGATIVE_WEIGHT = 0.95


def optimal_banding(
    threshold: float, num_perm: int, fp_weight: float = FALSE_POSITIVE_WEIGHT, fn_weight: float = FALSE_NEGATIVE_WEIGHT
) -> Banding:
    """The bands x rows (bands * rows <= num_perm) minimizing the weighted false-positive area
    (pairs below the threshold that become candidates) plus false-negative area (pairs above it that do not)."""
    best, best_error = Banding(1, num_perm), float("inf")
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            banding = Banding(bands, rows)
            fp = _area(banding.probability, 0.0, threshold)
            fn = _area(lambda s: 1.0 - banding.probability(s), threshold, 1.0)
            error = fp_weight * fp + fn_weight * fn
            if error < best_error - 1e-12:
                best, best_error = banding, error
    return best


def band_keys(signatures: NDArray[np.uint32], banding: Banding) -> NDArray[np.int64]:
    """(documents, bands) signed 64-bit keys: one hash of each band's rows, ready for an SQLite index."""
    count = signatures.shape[0]
    used = signatures[:, : banding.bands * banding.rows].astype(np.uint64)
    grouped = used.reshape(count, banding.bands, banding.rows)
    acc = np.full((count, banding.bands), _BAND_OFFSET, dtype=np.uint64)
    for row in range(banding.rows):
        acc ^= grouped[:, :, row]
        acc *= _BAND_MULT
    return fmix64(acc).view(np.int64)
