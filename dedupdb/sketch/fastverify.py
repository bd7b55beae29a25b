"""Verification compiled with numba: the overlap of many pairs of bottom-k sketches in one call, the numbers
minhash.sketch_overlap gives pair by pair. A large add onto a large store verifies tens of thousands of candidate
pairs a batch; one numpy call chain a pair costs about 5 microseconds of it, a merge here a fraction of one."""

from __future__ import annotations

import numpy as np

from dedupdb.jit import njit, types

_i64s = types.int64[::1]
_u32s = types.Array(types.uint32, 1, "C", readonly=True)


@njit(types.Tuple((_i64s, types.float64[::1]))(_u32s, _i64s, _i64s, _i64s, _i64s, types.int64), cache=True)
def _overlaps(values, starts, lengths, left, right, k):
    """(shared, Jaccard) of the sketches left[i] and right[i], each the sorted values[starts[j]:][:lengths[j]]:
    the union's k smallest distinct values are walked in order, counting those in both (Broder 1997); two whole
    sets (both under k values) give the exact Jaccard."""
    n = len(left)
    shared_out = np.zeros(n, np.int64)
    jaccard_out = np.zeros(n, np.float64)
    for p in range(n):
        a0, na = starts[left[p]], lengths[left[p]]
        b0, nb = starts[right[p]], lengths[right[p]]
        if na == 0 or nb == 0:
            continue
        i = j = shared = union = 0
        if na < k and nb < k:  # both whole: count the common values, without branches to mispredict
            while i < na and j < nb:
                x, y = values[a0 + i], values[b0 + j]
                shared += x == y
                i += x <= y
                j += y <= x
            shared_out[p] = shared
            jaccard_out[p] = shared / (na + nb - shared)
            continue
        while union < k and (i < na or j < nb):
            if j >= nb or (i < na and values[a0 + i] < values[b0 + j]):
                i += 1
            elif i >= na or values[b0 + j] < values[a0 + i]:
                j += 1
            else:
                shared += 1
                i += 1
                j += 1
            union += 1
        shared_out[p] = shared
        jaccard_out[p] = shared / union
    return shared_out, jaccard_out


def overlaps(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, left: np.ndarray, right: np.ndarray,
                k: int) -> tuple[np.ndarray, np.ndarray]:
    """(shared, Jaccard) arrays of the pairs of sketches left[i] and right[i], sketch j being
    values[starts[j]:][:lengths[j]]."""
    return _overlaps(np.ascontiguousarray(values, np.uint32), np.ascontiguousarray(starts, np.int64),
                     np.ascontiguousarray(lengths, np.int64), np.ascontiguousarray(left, np.int64),
                     np.ascontiguousarray(right, np.int64), int(k))
