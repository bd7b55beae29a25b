"""A Bloom filter sized from its capacity and false-positive rate, checked and filled a batch at a time.

m = -n ln p / (ln 2)^2 bits and k = (m / n) ln 2 hash functions; the k bit
positions come from two 64-bit halves of one 128-bit hash by double hashing
(Kirsch & Mitzenmacher 2006), all in numpy.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from dedupdb.errors import OptionError


def optimal_size(capacity: int, error_rate: float) -> tuple[int, int]:
    """(bits m, hash functions k) for capacity items at the given false-positive rate."""
    if capacity < 1:
        raise OptionError("capacity must be at least 1")
    if not 0.0 < error_rate < 1.0:
        raise OptionError("error rate must be between 0 and 1")
    bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
    hashes = max(1, round(bits / capacity * math.log(2)))
    return bits, hashes


class BloomFilter:
    def __init__(self, capacity: int, error_rate: float = 0.001, bits: int | None = None, hashes: int | None = None):
        m, k = optimal_size(capacity, error_rate)
        self.bits = bits or m
        self.hashes = hashes or (k if bits is None else max(1, round(self.bits / capacity * math.log(2))))
        self.capacity = capacity
        self.count = 0
        self._array = np.zeros((self.bits + 7) // 8, dtype=np.uint8)
        self._steps = np.arange(self.hashes, dtype=np.uint64)

    def _positions(self, h1: NDArray[np.uint64], h2: NDArray[np.uint64]) -> NDArray[np.uint64]:
        return (h1[:, None] + self._steps * (h2[:, None] | np.uint64(1))) % np.uint64(self.bits)

    def add_new(self, h1: NDArray[np.uint64], h2: NDArray[np.uint64]) -> NDArray[np.bool_]:
        """For distinct items (two hash halves each): True where the item was possibly seen before; the rest
        are added. Items must already be distinct within the batch."""
        if len(h1) == 0:
            return np.zeros(0, dtype=bool)
        positions = self._positions(h1, h2)
        byte, bit = positions >> np.uint64(3), (positions & np.uint64(7)).astype(np.uint8)
        present = (self._array[byte] >> bit) & 1
        seen = present.all(axis=1)
        fresh = ~seen
        where, masks = byte[fresh].ravel(), (np.uint8(1) << bit[fresh]).ravel()
        # A fancy-indexed |= keeps one write per repeated byte; the few bits it loses are set again exactly.
        self._array[where] |= masks
        lost = (self._array[where] & masks) != masks
        if lost.any():
            np.bitwise_or.at(self._array, where[lost], masks[lost])
        self.count += int(fresh.sum())
        return seen

    def may_contain(self, h1: NDArray[np.uint64], h2: NDArray[np.uint64]) -> NDArray[np.bool_]:
        """True where the item was possibly added (always for an item that was); adds nothing: membership against
        a filter filled beforehand."""
        if len(h1) == 0:
            return np.zeros(0, dtype=bool)
        positions = self._positions(h1, h2)
        byte, bit = positions >> np.uint64(3), (positions & np.uint64(7)).astype(np.uint8)
        return ((self._array[byte] >> bit) & 1).all(axis=1)

    @property
    def fill_ratio(self) -> float:
        return float(np.bitwise_count(self._array).sum(dtype=np.int64)) / self.bits

    def false_positive_rate(self) -> float:
        """The chance that a new item is wrongly reported as seen, from the bits set so far."""
        return self.fill_ratio**self.hashes

    def expected_false_positive_rate(self, items: int | None = None) -> float:
        n = self.count if items is None else items
        return (1.0 - math.exp(-self.hashes * n / self.bits)) ** self.hashes
