"""Verification compiled with numba: the overlap of many pairs of bottom-k sketches in one call, the numbers
minhash.sketch_overlap gives pair by pair. A large add onto a large store verifies tens of thousands of candidate
pairs a batch; one numpy call chain a pair costs about 5 microseconds of it, a merge here a fraction of one."""

from __future__ import annotations

import numpy as np

from dedupdb.jit import njit, types
from dedupdb.text.tokens import CHAR_VIEW_FULL as _FULL, CHAR_VIEW_NONE as _NONE, CHAR_VIEW_STEP

_WHOLE = np.int64(1) << 32  # the limit of a whole character view (minhash.WHOLE_VIEW)
_i64s = types.int64[::1]
_u32s = types.Array(types.uint32, 1, "C", readonly=True)


@njit(types.int64(_u32s, types.int64, types.int64, types.int64), cache=True)
def _view_limit(values, start, length, step):
    """minhash.view_limit of values[start:start + length]."""
    odd = 0
    for q in range(start, start + length):
        odd += values[q] & 1
    if odd == 0:
        return 0
    tokens = length - odd + 1
    if tokens <= _FULL:
        return _WHOLE
    return max(_NONE - tokens, 0) * step


@njit(types.int64(_u32s, types.int64, types.int64, types.int64, types.int64), cache=True)
def _kept(values, start, length, cut, even):
    """How many of values[start:start + length] are below cut, or even when even is 1."""
    kept = 0
    for q in range(start, start + length):
        odd = values[q] & 1
        kept += ((odd == 0) & (even == 1)) | ((odd == 1) & (np.int64(values[q]) < cut))
    return kept


@njit(types.UniTuple(types.int64, 4)(_i64s, _i64s, _i64s, _i64s, types.int64), cache=True)
def _bounds(starts, lengths, left, right, p):
    """Where the sketches of pair p start, and their lengths: (a0, na, b0, nb)."""
    return starts[left[p]], lengths[left[p]], starts[right[p]], lengths[right[p]]


@njit(types.Tuple((_i64s, types.float64[::1], _i64s))(_u32s, _i64s, _i64s, _i64s, _i64s, types.int64, types.int64),
      cache=True)
def _overlaps(values, starts, lengths, left, right, k, step):
    """(shared, Jaccard, union) of the sketches left[i] and right[i], each the sorted values[starts[j]:][:lengths[j]]:
    the union's k smallest distinct values are walked in order, counting those in both (Broder 1997); two whole
    sets (both under k values) give the exact Jaccard, their character views compared up to the lower of the two
    (minhash.view_overlap)."""
    n = len(left)
    shared_out = np.zeros(n, np.int64)
    jaccard_out = np.zeros(n, np.float64)
    union_out = np.zeros(n, np.int64)
    for p in range(n):
        a0, na, b0, nb = _bounds(starts, lengths, left, right, p)
        if na == 0 or nb == 0:
            continue
        i = j = shared = union = 0
        if na < k and nb < k:  # both whole: the views as minhash.view_overlap compares them
            limit_a, limit_b = _view_limit(values, a0, na, step), _view_limit(values, b0, nb, step)
            cut = min(limit_a, limit_b)
            even = 0 if limit_a == limit_b == _WHOLE else 1  # two whole character views: those alone
            kept_a = _kept(values, a0, na, cut, even)
            kept_b = _kept(values, b0, nb, cut, even)
            while i < na and j < nb:  # count the common values kept, without branches to mispredict
                x, y = values[a0 + i], values[b0 + j]
                shared += (x == y) & ((((x & 1) == 0) & (even == 1)) | (((x & 1) == 1) & (np.int64(x) < cut)))
                i += x <= y
                j += y <= x
            union = kept_a + kept_b - shared
            shared_out[p] = shared
            jaccard_out[p] = shared / union if union else 0.0
            union_out[p] = union
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
        union_out[p] = union
    return shared_out, jaccard_out, union_out


def overlaps(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, left: np.ndarray, right: np.ndarray,
                k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shared, Jaccard, union) arrays of the pairs of sketches left[i] and right[i], sketch j being
    values[starts[j]:][:lengths[j]]."""
    return _overlaps(np.ascontiguousarray(values, np.uint32), np.ascontiguousarray(starts, np.int64),
                     np.ascontiguousarray(lengths, np.int64), np.ascontiguousarray(left, np.int64),
                     np.ascontiguousarray(right, np.int64), int(k), CHAR_VIEW_STEP)


@njit(types.Tuple((_i64s, _i64s))(_u32s, _i64s, _i64s, _i64s, _i64s), cache=True)
def _held(values, starts, lengths, left, right):
    """(shared, below) of the pairs left[i], right[i]: how many of the token n-grams (even values) of sketch left[i]
    are in sketch right[i], and how many are at or below right[i]'s largest value (0 when it is empty)."""
    n = len(left)
    shared_out = np.zeros(n, np.int64)
    below_out = np.zeros(n, np.int64)
    for p in range(n):
        a0, na, b0, nb = _bounds(starts, lengths, left, right, p)
        if na == 0 or nb == 0:
            continue
        last = values[b0 + nb - 1]
        i = j = shared = below = 0
        while i < na:
            x = values[a0 + i]
            if x > last:
                break
            if x & 1:
                i += 1
                continue
            below += 1
            while j < nb and values[b0 + j] < x:
                j += 1
            shared += (j < nb) & (values[b0 + j] == x)
            i += 1
        shared_out[p] = shared
        below_out[p] = below
    return shared_out, below_out


def held(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, left: np.ndarray,
         right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shared, below) arrays of the pairs of sketches left[i] and right[i] (sketch j being
    values[starts[j]:][:lengths[j]]): the token n-grams of left[i] found in right[i], and those at or below
    right[i]'s largest value. What containment.shares_of counts for many queries at once."""
    return _held(np.ascontiguousarray(values, np.uint32), np.ascontiguousarray(starts, np.int64),
                 np.ascontiguousarray(lengths, np.int64), np.ascontiguousarray(left, np.int64),
                 np.ascontiguousarray(right, np.int64))
