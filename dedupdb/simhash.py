"""64-bit SimHash (Charikar 2002) and the block index that finds fingerprints within k bits.

Blocks follow Manku, Jain & Das Sarma (2007): cut the 64 bits into k + 1
blocks; two fingerprints within Hamming distance k must agree on at least one
whole block (pigeonhole), so a lookup only compares documents sharing a block.
"""

from __future__ import annotations

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


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def block_layout(distance: int) -> list[tuple[int, int]]:
    """(shift, width) of each of the distance + 1 blocks, widths as even as possible."""
    blocks = distance + 1
    base, extra = divmod(BITS, blocks)
    layout, shift = [], 0
    for i in range(blocks):
        width = base + (1 if i < extra else 0)
        layout.append((shift, width))
        shift += width
    return layout


def block_keys(value: int, distance: int) -> list[int]:
    """The value of each block: the keys under which a fingerprint is indexed and looked up."""
    return [(value >> shift) & ((1 << width) - 1) for shift, width in block_layout(distance)]
