"""Which index keys the store may hold, in memory, so that an ingest probes only keys that can match.

Most keys a new document brings are in no stored row, and a probe that finds
nothing costs as much as one that finds something. The filter keeps one bit
per group of keys (their top GROUP_BITS bits): a clear bit means no stored row
has a key of that group, so the probe can be skipped. A set bit only means
"probe": keys of deleted rows may leave bits set, never the other way round,
as long as every row written is added here (the indexer sees to that, and
drops the filter when another connection may have written).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

GROUP_BITS = 28  # 2**28 bits: 32 MiB, a fifth of the bits set at a million documents of 63 rows


class KeyFilter:
    def __init__(self, key_bits: int) -> None:
        self._shift = np.uint64(max(0, key_bits - GROUP_BITS))
        self._bits = np.zeros(1 << (GROUP_BITS - 3), dtype=np.uint8)

    def _places(self, keys: NDArray[np.uint64]) -> tuple[NDArray[np.intp], NDArray[np.uint8]]:
        groups = np.asarray(keys, dtype=np.uint64) >> self._shift
        return (groups >> np.uint64(3)).astype(np.intp), (np.uint8(1) << (groups & np.uint64(7)).astype(np.uint8))

    def add(self, keys: NDArray[np.uint64]) -> None:
        where, masks = self._places(keys)
        np.bitwise_or.at(self._bits, where, masks)

    def may_hold(self, keys: NDArray[np.uint64]) -> NDArray[np.bool_]:
        """False where no key of the group was ever added: those keys are in no stored row."""
        where, masks = self._places(keys)
        return (self._bits[where] & masks) != 0
