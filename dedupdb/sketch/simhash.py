"""64-bit SimHash (Charikar 2002) and the block index that finds fingerprints within k bits.

The index follows Manku, Jain & Das Sarma (2007): cut the 64 bits into k + 2
blocks; two fingerprints within Hamming distance k differ in at most k blocks,
so they agree on at least two whole blocks (pigeonhole), and so share the key
made of some pair of blocks. One key per pair of blocks (10 for k = 3) is
indexed; each is about 26 bits wide, so a lookup meets only the few stored
fingerprints that agree on 26 bits, however large the store (one block of 16
bits, as k + 1 blocks would give, puts every 65,536th document in each bucket).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from itertools import combinations

import numpy as np
from numpy.typing import NDArray

BITS = 64


def fingerprint(feature_hashes: NDArray[np.uint64], weights: NDArray[np.float64]) -> int:
    """Weighted bit vote: bit i is set when features with bit i set outweigh those without."""
    if len(feature_hashes) == 0:
        return 0
    bits = np.unpackbits(feature_hashes.astype("<u8").view(np.uint8), bitorder="little").reshape(-1, BITS)
    votes = weights @ (bits.astype(np.float64) * 2.0 - 1.0)
    packed = np.packbits(votes > 0, bitorder="little")
    return int(packed.view("<u8")[0])


# A vote summed in one order lies within this many units of the last place (of the sum of the weights' magnitudes,
# times the features) of the vote summed in any other: two orders agree on its sign beyond it.
ORDER_SLACK = 8 * 2.0**-53


def fingerprints(feature_hashes: NDArray[np.uint64], weights: NDArray[np.float64], lengths: list[int],
                 reference: Callable[[NDArray[np.uint64], NDArray[np.float64]], int] | None = None) -> list[int]:
    """fingerprint() of many texts at once: their features and weights concatenated, lengths[i] of them for
    text i (each at least one). The bits are unpacked once for some hundreds of texts; each text's vote is then
    one product, 2 * (weight of features with the bit set) - (all its weight). That sums in another order than
    fingerprint() does: where reference is given (fingerprint itself, for texts fingerprinted one by one
    elsewhere), a text with a vote so near even that the order could turn it is reference's of it."""
    out: list[int] = []
    start = 0
    # Some hundreds of texts at a time: the unpacked bits take 64 bytes a feature (38 MB for 4,000 reviews).
    for first in range(0, len(lengths), _TEXTS_AT_ONCE):
        part = lengths[first : first + _TEXTS_AT_ONCE]
        end = start + sum(part)
        bits = np.unpackbits(feature_hashes[start:end].astype("<u8").view(np.uint8), bitorder="little").reshape(-1, BITS)
        bounds = np.concatenate(([0], np.cumsum(part))).tolist()
        chunk = weights[start:end]
        set_weight = np.array([chunk[a:b] @ bits[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
        votes = 2.0 * set_weight - np.add.reduceat(chunk, bounds[:-1])[:, None]
        values = np.packbits(votes > 0, axis=1, bitorder="little").view("<u8")[:, 0].tolist()
        if reference is not None:
            slack = ORDER_SLACK * (np.diff(bounds) + 1) * np.add.reduceat(np.abs(chunk), bounds[:-1])
            for text in np.flatnonzero((np.abs(votes) <= slack[:, None]).any(axis=1)).tolist():
                a, b = start + bounds[text], start + bounds[text + 1]
                values[text] = reference(feature_hashes[a:b], weights[a:b])
        out += values
        start = end
    return out


_TEXTS_AT_ONCE = 500


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


@lru_cache(maxsize=16)
def block_layout(distance: int) -> list[tuple[int, int]]:
    """(shift, width) of each of the distance + 2 blocks, widths as even as possible."""
    blocks = distance + 2
    base, extra = divmod(BITS, blocks)
    layout, shift = [], 0
    for i in range(blocks):
        width = base + (1 if i < extra else 0)
        layout.append((shift, width))
        shift += width
    return layout


@lru_cache(maxsize=16)
def _key_masks(distance: int) -> list[int]:
    """One mask per pair of blocks: the bits a key keeps."""
    layout = block_layout(distance)
    masks = []
    for pair in combinations(layout, 2):
        mask = 0
        for shift, width in pair:
            mask |= ((1 << width) - 1) << shift
        masks.append(mask)
    return masks


def block_keys(value: int, distance: int) -> list[int]:
    """The keys under which a fingerprint is indexed and looked up: its bits in each pair of blocks
    (as a signed 64-bit value, ready for SQLite)."""
    return [_signed(value & mask) for mask in _key_masks(distance)]


def block_key_matrix(values: NDArray[np.uint64], distance: int) -> NDArray[np.uint64]:
    """block_keys of many fingerprints at once, unsigned: row i holds the keys of values[i]."""
    return np.asarray(values, dtype=np.uint64)[:, None] & block_masks(distance)[None, :]


@lru_cache(maxsize=16)
def block_masks(distance: int) -> NDArray[np.uint64]:
    """The masks of _key_masks as one array, made once a process."""
    masks = np.array(_key_masks(distance), dtype=np.uint64)
    masks.flags.writeable = False
    return masks


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= (1 << 63) else value
