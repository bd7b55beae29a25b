"""Stable, process-independent hashing primitives shared by the signature modules.

Python's hash() is salted per process, so everything here is built on xxhash
and fixed constants: the same text gives the same numbers on every run.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import xxhash

FMIX_C1 = np.uint64(0xFF51AFD7ED558CCD)
FMIX_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer: spreads every input bit over every output bit (uint64 in, uint64 out)."""
    x = x ^ (x >> _S33)
    x *= FMIX_C1
    x ^= x >> _S33
    x *= FMIX_C2
    x ^= x >> _S33
    return x


_SLOT_MULT = np.uint64(0x9E3779B97F4A7C15)


def column_slot_hash(keys: np.ndarray, first_slot: int, bits: int) -> np.ndarray:
    """A bits-wide hash of each (slot, key) of a matrix of keys (uint64) whose column j is slot first_slot + j:
    fmix64(key ^ fmix64((slot + 1) * _SLOT_MULT)), its top bits; uint64 out. The slots' mixes are made once a
    process (a query's keys are some sixty, where making them was a fifth of the work)."""
    return fmix64(np.asarray(keys, dtype=np.uint64) ^ slot_mixes(first_slot, keys.shape[1])) >> np.uint64(64 - bits)


@lru_cache(maxsize=16)
def slot_mixes(first_slot: int, count: int) -> np.ndarray:
    """fmix64 of each slot's number (from first_slot on), what column_slot_hash mixes a key of that slot with."""
    mixes = fmix64((np.arange(first_slot, first_slot + count, dtype=np.uint64) + np.uint64(1)) * _SLOT_MULT)
    mixes.flags.writeable = False
    return mixes


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted: np.unique without its overhead, which is most of its cost on small arrays."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def distinct_of_sorted(values: np.ndarray) -> np.ndarray:
    """distinct() of values already sorted: no sort again, and values themselves (no copy) when none repeats."""
    if len(values) < 2:
        return values
    fresh = values[1:] != values[:-1]
    return values if fresh.all() else values[np.concatenate(([True], fresh))]


def distinct_first_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """np.unique(values, return_index=True, return_counts=True): the distinct values, sorted, where each first
    occurs and how often. Not np.unique itself, which loads numpy.ma, a fifth of a cold query's imports."""
    order = np.argsort(values, kind="stable")  # equal values keep their order: the first of each comes first
    ordered = values[order]
    if len(ordered) == 0:
        return ordered, np.empty(0, np.intp), np.empty(0, np.intp)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], order[starts], np.diff(np.concatenate((starts, [len(ordered)])))


def distinct_counts_of_each(values: np.ndarray, lengths: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """distinct_first_counts of each text's values at once (lengths[t] of values are text t's): every text's distinct
    values, sorted, one after the other, how often each occurs, and how many each text has."""
    owners = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    order = np.lexsort((values, owners))
    ordered, owners = values[order], owners[order]
    if len(ordered) == 0:
        return ordered, np.empty(0, np.int64), np.zeros(len(lengths), np.int64)
    starts = np.flatnonzero(np.concatenate(([True], (ordered[1:] != ordered[:-1]) | (owners[1:] != owners[:-1]))))
    counts = np.diff(np.concatenate((starts, [len(ordered)])))
    return ordered[starts], counts, np.bincount(owners[starts], minlength=len(lengths))


def spans(haystack: np.ndarray, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each needle's run of equal values in the sorted haystack starts, and how long it is (0 where it is
    absent): np.searchsorted's left and right, searched in sorted order and put back in the needles'. numpy narrows
    each search by the one before when the needles are sorted: for a batch's 150,000 keys in 400,000, both sides
    took 84 ms in the needles' own order against 22 ms sorted first."""
    if len(needles) > 1 and not (needles[1:] >= needles[:-1]).all():
        order = np.argsort(needles)
        ordered = needles[order]
        lows, sizes = np.empty(len(needles), np.intp), np.empty(len(needles), np.intp)
        lows[order] = np.searchsorted(haystack, ordered, "left")
        sizes[order] = np.searchsorted(haystack, ordered, "right")
        return lows, sizes - lows
    lows = np.searchsorted(haystack, needles, "left")
    return lows, np.searchsorted(haystack, needles, "right") - lows


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Every position of the ranges [starts[i], starts[i] + lengths[i]), range after range, without a Python loop."""
    lengths = np.asarray(lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + offsets


def run_starts(values: np.ndarray) -> np.ndarray:
    """For each element of an array in order, the position of the first element of its run of equal values."""
    if len(values) == 0:
        return np.empty(0, np.int64)
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return np.repeat(starts, np.diff(np.append(starts, len(values))))


def distinct_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, sorted, and how often each occurs."""
    ordered = np.sort(values)
    if len(ordered) == 0:
        return ordered, np.empty(0, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.diff(np.concatenate((starts, [len(ordered)])))


def content_hash(normalized_text: str) -> bytes:
    """128-bit digest of normalized text: equal digests mean exact duplicates."""
    return xxhash.xxh3_128_digest(normalized_text.encode("utf-8"))


def bytes_hash(data: bytes) -> str:
    """Digest of a file's raw bytes, used to skip unchanged files cheaply."""
    return xxhash.xxh3_128_hexdigest(data)


def to_signed64(value: int) -> int:
    """SQLite stores INTEGER as signed 64-bit: map an unsigned 64-bit value onto that range."""
    return value - (1 << 64) if value >= (1 << 63) else value


def to_unsigned64(value: int) -> int:
    return value + (1 << 64) if value < 0 else value
