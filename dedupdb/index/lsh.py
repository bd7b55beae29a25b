"""Candidate generation from MinHash signatures: LSH banding (choosing bands x rows for a Jaccard threshold, the
band keys of a signature) and Broder's super-shingles; each with its S-curve, the chance that two documents of
a given Jaccard similarity become candidates."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from dedupdb.config import PRESET_SUPER_SHINGLES
from dedupdb.text.hashing import fmix64

# A text is compared with at most the first (lowest content id) this many texts under each of its index keys. A
# key held by thousands is a band of common phrasing, not of one text: at ten million documents 52 keys held by
# over 1,000 texts each (a signature line such as "——发自手机客户端") made 3.8 million of a 16,384-document batch's
# 4.4 million candidates; with this bound it makes 0.41 million, and of the batch's 58,655 near-duplicate pairs
# leaves out 11, each of them in one group anyway through the pairs kept (scripts/bench_key_holders.py). The first
# holders stay the first, so every later text of a large group of near-copies meets the same ones and joins their
# group.
KEY_HOLDERS_COMPARED = 256

BAND_MULT = np.uint64(0x100000001B3)  # FNV-1a 64-bit prime
BAND_OFFSET = np.uint64(0xCBF29CE484222325)


@dataclass(frozen=True)
class Banding:
    bands: int
    rows: int

    def probability(self, similarity: float | NDArray[np.float64]):
        """Chance that two documents of this Jaccard similarity share at least one band: the S-curve."""
        return 1.0 - (1.0 - np.asarray(similarity) ** self.rows) ** self.bands

    def describe(self) -> str:
        return f"{self.bands} bands x {self.rows} rows"


def _areas(y: NDArray[np.float64], x: NDArray[np.float64]) -> NDArray[np.float64]:
    """The trapezoid area under each row of y (the values of a curve at the points x)."""
    return np.sum((y[:, 1:] + y[:, :-1]) * np.diff(x), axis=1) / 2.0


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
    (pairs below the threshold that become candidates) plus false-negative area (pairs above it that do not).

    Every shape is scored, in arrays of a few dozen at a time: one at a time, the 1,568 shapes of 256 permutations
    took some 60 ms, which every process that opens a store paid before its first answer."""
    shapes = [(bands, rows) for bands in range(1, num_perm + 1) for rows in range(1, num_perm // bands + 1)]
    below, above = np.linspace(0.0, threshold, _POINTS), np.linspace(threshold, 1.0, _POINTS)
    errors: list[float] = []
    for start in range(0, len(shapes), _SHAPES_AT_ONCE):
        bands, rows = np.array(shapes[start : start + _SHAPES_AT_ONCE], dtype=np.float64).T
        bands, rows = bands[:, None], rows[:, None]
        fp = _areas(1.0 - (1.0 - below**rows) ** bands, below)
        fn = _areas(1.0 - (1.0 - (1.0 - above**rows) ** bands), above)
        errors += (fp_weight * fp + fn_weight * fn).tolist()
    best, best_error = Banding(1, num_perm), float("inf")
    for (bands, rows), error in zip(shapes, errors):  # in order: a later shape must be better by more than rounding
        if error < best_error - 1e-12:
            best, best_error = Banding(bands, rows), error
    return best


# The points of the S-curve each area is measured at, and how many shapes are scored in one array (64 x 512 values).
_POINTS = 512
_SHAPES_AT_ONCE = 64


def band_keys(signatures: NDArray[np.uint32], banding: Banding) -> NDArray[np.int64]:
    """(documents, bands) signed 64-bit keys: one hash of each band's rows, ready for an SQLite index."""
    count = signatures.shape[0]
    used = signatures[:, : banding.bands * banding.rows].astype(np.uint64)
    grouped = used.reshape(count, banding.bands, banding.rows)
    acc = np.full((count, banding.bands), BAND_OFFSET, dtype=np.uint64)
    for row in range(banding.rows):
        acc ^= grouped[:, :, row]
        acc *= BAND_MULT
    return fmix64(acc).view(np.int64)


# --- super-shingles ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuperShingles:
    """Broder's super-shingles as Fetterly et al. use them ("megashingles"): the first groups x rows MinHash
    values are cut into groups, each hashed to one super-shingle, and two documents are candidates when at least
    `match` of their super-shingles are equal. Every `match`-subset of a document's super-shingles is one index
    key (C(6, 2) = 15 for the classic 84 values in 6 groups of 14), so a single shared key means `match` equal
    groups."""

    groups: int = 6
    rows: int = 14
    match: int = 2

    @property
    def values(self) -> int:
        """MinHash values used (84 for the classic setting)."""
        return self.groups * self.rows

    @property
    def keys(self) -> int:
        """Index keys per document: C(groups, match)."""
        return math.comb(self.groups, self.match)

    def probability(self, similarity: float | NDArray[np.float64]):
        """Chance that two documents of this Jaccard similarity share at least `match` of their super-shingles:
        each group is equal with probability p = J**rows, independently, so 1 - sum_{i < match} C(g, i) p^i
        (1 - p)^(g - i), summed here the other way (i >= match) to stay exact where it is tiny."""
        p = np.asarray(similarity, dtype=np.float64) ** self.rows
        return sum(math.comb(self.groups, i) * p**i * (1.0 - p) ** (self.groups - i)
                   for i in range(self.match, self.groups + 1))

    def describe(self) -> str:
        return (f"{self.groups} super-shingles of {self.rows} values, candidates on {self.match} equal "
                f"({self.keys} keys)")


# A store's candidate scheme: the LSH banding chosen for its threshold (the default) or super-shingles.
Candidates = Banding | SuperShingles


def super_shingle_keys(signatures: NDArray[np.uint32], scheme: SuperShingles) -> NDArray[np.int64]:
    """(documents, C(groups, match)) signed 64-bit keys: one hash of each `match`-subset of the super-shingles,
    the subsets in itertools.combinations order (each key's column is its slot)."""
    if signatures.shape[1] < scheme.values:
        raise ValueError(f"super-shingles need {scheme.values} MinHash values, the signatures have {signatures.shape[1]}")
    shingles = band_keys(signatures, Banding(scheme.groups, scheme.rows)).view(np.uint64)
    columns = []
    for subset in itertools.combinations(range(scheme.groups), scheme.match):
        acc = np.full(signatures.shape[0], BAND_OFFSET, dtype=np.uint64)
        for group in subset:
            acc ^= shingles[:, group]
            acc *= BAND_MULT
        columns.append(fmix64(acc))
    return np.stack(columns, axis=1).view(np.int64)


def scheme_for(preset: str, banding: Banding) -> Candidates:
    """The candidate scheme of a preset: the banding chosen for the threshold, or the classic super-shingles."""
    return SuperShingles() if preset == PRESET_SUPER_SHINGLES else banding


def scheme_meta(scheme: Candidates) -> dict[str, str]:
    """How a store records its scheme in meta. A super-shingles store has no lsh.bands, so a dedupdb that
    predates super-shingles fails to open it rather than index it with bands."""
    if isinstance(scheme, SuperShingles):
        return {"lsh.groups": str(scheme.groups), "lsh.rows": str(scheme.rows), "lsh.match": str(scheme.match)}
    return {"lsh.bands": str(scheme.bands), "lsh.rows": str(scheme.rows)}


def scheme_from_meta(preset: str, meta: dict[str, str]) -> Candidates:
    if preset == PRESET_SUPER_SHINGLES:
        return SuperShingles(int(meta["lsh.groups"]), int(meta["lsh.rows"]), int(meta["lsh.match"]))
    return Banding(int(meta["lsh.bands"]), int(meta["lsh.rows"]))


def scheme_stats(scheme: Candidates) -> dict[str, int]:
    if isinstance(scheme, SuperShingles):
        return {"groups": scheme.groups, "rows": scheme.rows, "match": scheme.match, "keys": scheme.keys}
    return {"bands": scheme.bands, "rows": scheme.rows}


def candidate_keys(signatures: NDArray[np.uint32], scheme: Candidates) -> NDArray[np.int64]:
    """(documents, keys) signed 64-bit keys of a store's candidate scheme: two documents sharing a key in one
    column are candidates."""
    if isinstance(scheme, SuperShingles):
        return super_shingle_keys(signatures, scheme)
    return band_keys(signatures, scheme)


# Where the README, `dedupdb init` and `dedupdb stats` show the candidate probability.
CURVE_POINTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)


def curve(scheme: Candidates, points: tuple[float, ...] = CURVE_POINTS) -> dict[str, float]:
    """The scheme's S-curve at the given similarities, keyed by the similarity as text, to 3 significant digits."""
    return {f"{j:g}": float(f"{float(scheme.probability(j)):.3g}") for j in points}
