"""Decoding of the store's packed formats compiled with numba: split index blocks (blocks.py) and coded sketches
(sketchpack.py); and the packing of index blocks. The same numbers and bytes their numpy paths give, in one pass
instead of a dozen array operations each. An add onto a large store decodes tens of millions of index entries and
hundreds of thousands of sketches a minute: the numpy paths took a fifth of the main process's time adding 50,000
texts onto a million, and these take its CPU time from 14.4 to 13.2 s.

Callers take these only where numba is loaded already (decoding alone never earns its start-up) and check the
layouts first: nothing here checks bounds beyond what it is told."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from dedupdb.jit import njit, types
from dedupdb.storage.entries import CONTENT_ID_BITS  # an entry is (key << CONTENT_ID_BITS) | content id

_i64s = types.int64[::1]
_bytes = types.Array(types.uint8, 1, "C", readonly=True)
# The position of the lowest set bit of each byte value (none for 0, never asked).
_LOWEST_BIT = np.array([(b & -b).bit_length() - 1 for b in range(256)], np.int64)


# Helpers inlined where they are called take no signature: they are then never compiled on their own as well.
@njit(cache=True, inline="always")
def _split_block(data, at, count, width, bits, key, r, out, n, lows, highs, ranged):
    """One split block's entries (its integers from data[at], its first key) into out from n; with ranged, those
    within the ranges from the r-th on. Returns the new n. Inlined where width is a constant, so that each width
    gets a loop of its own: one reading four bytes at a time, not a byte by byte loop that tests the width (an
    entry took 5 ns, and a large add decodes its store's whole index a batch)."""
    mask = (np.int64(1) << bits) - 1
    ranges = len(lows)
    # An entry is below lows[r] whenever its key is below lows[r]'s: one comparison an entry passes over what lies
    # between the ranges, most of a block a probe reads.
    low_key = lows[r] >> CONTENT_ID_BITS if ranged else np.int64(0)
    for _ in range(count):
        value = (np.int64(data[at]) | (np.int64(data[at + 1]) << 8) | (np.int64(data[at + 2]) << 16)
                 | (np.int64(data[at + 3]) << 24))
        if width > 4:
            value |= np.int64(data[at + 4]) << 32
            if width > 5:
                value |= np.int64(data[at + 5]) << 40
        at += width
        key += value >> bits
        if ranged:
            if key < low_key:
                continue
            entry = (key << CONTENT_ID_BITS) | (value & mask)
            while r < ranges and highs[r] < entry:
                r += 1
            if r == ranges:
                break
            low_key = lows[r] >> CONTENT_ID_BITS
            if entry < lows[r]:
                continue
            out[n] = entry
        else:
            out[n] = (key << CONTENT_ID_BITS) | (value & mask)
        n += 1
    return n


@njit(cache=True, inline="always")
def _split_stretch(data, offsets, counts, width, id_bits, first_keys, lows, highs, ranged, begin, end, out, n):
    """The entries of blocks begin to end, all of one width, into out from n (see _split_blocks): returns the new n."""
    for b in range(begin, end):
        r = 0
        if ranged:
            r = np.searchsorted(highs, first_keys[b] << CONTENT_ID_BITS)  # the first range not wholly below the block
            if r == len(lows):
                continue
        n = _split_block(data, offsets[b] + 1, counts[b], width, id_bits[b], first_keys[b], r, out, n, lows, highs,
                         ranged)
    return n


@njit(_i64s(_bytes, _i64s, _i64s, _i64s, _i64s, _i64s, _i64s, _i64s, types.boolean), cache=True)
def _split_blocks(data, offsets, counts, widths, id_bits, first_keys, lows, highs, ranged):
    """The entries of split blocks (each at data[offsets[b]:], its byte of id bits first, then counts[b] integers
    of widths[b] bytes, each gap << id_bits | id), joined; with ranged, only those within one of the ranges
    [lows[r], highs[r]] (sorted, disjoint), the blocks being in key order."""
    total = 0
    for b in range(len(counts)):
        total += counts[b]
    out = np.empty(total, np.int64)
    n, begin = 0, 0
    while begin < len(counts):
        # A stretch of blocks of one width, its loop chosen once for them all (a choice made block by block cost a
        # probe 40% more, measured).
        width, end = widths[begin], begin + 1
        while end < len(counts) and widths[end] == width:
            end += 1
        if width == 4:  # nearly every block of a large store's runs
            n = _split_stretch(data, offsets, counts, 4, id_bits, first_keys, lows, highs, ranged, begin, end, out, n)
        else:
            n = _split_stretch(data, offsets, counts, width, id_bits, first_keys, lows, highs, ranged, begin, end, out,
                               n)
        begin = end
    # A copy of the few entries in range: a view would hold the whole buffer (a probe reads hundreds of stretches).
    return out[:n].copy() if ranged else out


def split_blocks(joined: bytes, sizes: np.ndarray, counts: np.ndarray, widths: np.ndarray, id_bits: np.ndarray,
                 firsts: np.ndarray, lows: np.ndarray | None = None, highs: np.ndarray | None = None) -> np.ndarray:
    """blocks.decode_blocks for split blocks whose layouts are checked: their bytes joined (sizes: each block's),
    entry counts, widths, id bits and first entries; with lows and highs, only the entries within the ranges."""
    offsets = np.cumsum(sizes) - sizes
    ranged = lows is not None
    empty = np.empty(0, np.int64)
    return _split_blocks(np.frombuffer(joined, np.uint8), _int64s(offsets), _int64s(counts), _int64s(widths),
                         _int64s(id_bits), _int64s(firsts) >> CONTENT_ID_BITS,
                         _int64s(lows) if ranged else empty, _int64s(highs) if ranged else empty, ranged)


_sorted = types.Array(types.int64, 1, "C", readonly=True)  # entries in a run's memory, or a block's bytes


@njit(cache=True, inline="always")
def _put_block(data, at, entries, start, count, width, bits):
    """One block's bytes at data[at:] (width 8: kept whole; else split, its id bits first): returns where it ends."""
    if width == 8:
        for i in range(start, start + count):
            value = entries[i]
            for k in range(8):
                data[at + k] = np.uint8((value >> (8 * k)) & 0xFF)
            at += 8
        return at
    mask = (np.int64(1) << CONTENT_ID_BITS) - 1
    data[at] = np.uint8(bits)
    at += 1
    last = entries[start] >> CONTENT_ID_BITS
    for i in range(start, start + count):
        key = entries[i] >> CONTENT_ID_BITS
        value = ((key - last) << bits) | (entries[i] & mask)
        last = key
        for k in range(width):
            data[at + k] = np.uint8((value >> (8 * k)) & 0xFF)
        at += width
    return at


@njit(types.Tuple((types.uint8[::1], _i64s, _i64s))(_i64s, types.int64, types.boolean), cache=True)
def _packed_blocks(entries, capacity, final):
    """blocks.next_block taken again and again over sorted entries: (every block's bytes joined, each block's first
    entry's position with one past the last block's at the end, each block's first byte's position likewise).
    capacity: a block's bytes (BLOCK_ENTRIES or `whole` entries of eight). Without final, a last block that would
    not be full is left unwritten."""
    n = len(entries)
    mask = (np.int64(1) << CONTENT_ID_BITS) - 1
    data = np.empty(n * 8, np.uint8)  # no block takes more than WHOLE's eight bytes an entry
    starts = np.empty(n + 1, np.int64)
    offsets = np.empty(n + 1, np.int64)
    blocks, start, at = 0, 0, 0
    while start < n:
        width, count, bits = 8, min(capacity // 8, n - start), 0  # kept whole when no split width fits
        for split in (4, 5, 6):
            size = min(capacity // split, n - start)
            if size < 2:
                continue
            top_id, top_gap, last = np.int64(0), np.int64(0), entries[start] >> CONTENT_ID_BITS
            for i in range(start, start + size):
                key = entries[i] >> CONTENT_ID_BITS
                top_id = max(top_id, entries[i] & mask)
                top_gap = max(top_gap, key - last)
                last = key
            need = 1
            while top_id >> need:
                need += 1
            if top_gap < np.int64(1) << (8 * split - need):
                width, count, bits = split, size, need
                break
        if count < capacity // width and not final:
            break
        starts[blocks], offsets[blocks] = start, at
        if width == 4:  # a loop of its own, as in decoding
            at = _put_block(data, at, entries, start, count, 4, bits)
        else:
            at = _put_block(data, at, entries, start, count, width, bits)
        blocks += 1
        start += count
    starts[blocks], offsets[blocks] = start, at
    return data[:at].copy(), starts[: blocks + 1].copy(), offsets[: blocks + 1].copy()


def packed_blocks(entries: np.ndarray, capacity: int, final: bool) -> tuple[list[bytes], np.ndarray]:
    """blocks.packed_blocks, compiled (capacity: a block's bytes): (each block's bytes, each block's first entry's
    position with one past the last's at the end). An add writes a million entries in blocks of 2,000 a
    batch, and a merge tens of millions: numpy's dozen operations a block took a fourteenth of its main process."""
    data, starts, offsets = _packed_blocks(_int64s(entries), int(capacity), bool(final))
    joined = data.tobytes()
    bounds = offsets.tolist()
    return [joined[a:b] for a, b in pairwise(bounds)], starts


@njit(cache=True, inline="always")
def _first_after(data, value, start, inclusive):
    """The first position from `start` on of sorted data whose entry is at least `value` (inclusive) or above it,
    len(data) if none: galloping from `start`, so a probe near the last one costs a few steps."""
    n = len(data)
    if start >= n or (data[start] >= value if inclusive else data[start] > value):
        return start
    low, step = start, 1  # data[low] is before the position
    high = start + 1
    while high < n and (data[high] < value if inclusive else data[high] <= value):
        low = high
        step *= 2
        high = low + step
    high = min(high, n)
    while high - low > 1:
        middle = (low + high) // 2
        if data[middle] < value if inclusive else data[middle] <= value:
            low = middle
        else:
            high = middle
    return high


@njit(_i64s(_sorted, _i64s, _i64s), cache=True)
def _in_ranges(data, lows, highs):
    """blocks.in_ranges: the entries of sorted data within the ranges [lows[r], highs[r]] (sorted, disjoint), found
    by galloping from the last range's start rather than a binary search of the whole of data each."""
    starts = np.empty(len(lows), np.int64)
    ends = np.empty(len(lows), np.int64)
    total, at = 0, 0
    for r in range(len(lows)):
        at = _first_after(data, lows[r], at, True)
        end = _first_after(data, highs[r], at, False)
        starts[r], ends[r] = at, end
        total += end - at
    out = np.empty(total, np.int64)
    n = 0
    for r in range(len(lows)):
        for i in range(starts[r], ends[r]):
            out[n] = data[i]
            n += 1
    return out


def in_ranges(data: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """blocks.in_ranges, compiled: an add probes the runs it holds in memory, millions of entries, for a million
    keys a batch (two binary searches of numpy's a key took a tenth of an add's writing process)."""
    return _in_ranges(_int64s(data), _int64s(lows), _int64s(highs))


@njit(_i64s(_sorted, _i64s, types.uint8[::1], types.int64, types.int64), cache=True)
def _in_key_ranges(data, starts, bits, shift, width):
    """_in_ranges of the ranges [starts[r], starts[r] + width] whose slot (start >> shift) is set in bits (a
    run's key filter), in one pass: no arrays of the keys the filter passes."""
    kept = np.empty(len(starts), np.int64)
    ends = np.empty(len(starts), np.int64)
    ranges, total, at = 0, 0, 0
    for r in range(len(starts)):
        slot = starts[r] >> shift
        if ((bits[slot >> 3] >> (slot & 7)) & 1) == 0:
            continue
        at = _first_after(data, starts[r], at, True)
        end = _first_after(data, starts[r] + width, at, False)
        if end > at:
            kept[ranges], ends[ranges] = at, end
            ranges += 1
            total += end - at
    out = np.empty(total, np.int64)
    n = 0
    for r in range(ranges):
        for i in range(kept[r], ends[r]):
            out[n] = data[i]
            n += 1
    return out


def in_key_ranges(data: np.ndarray, starts: np.ndarray, bits: np.ndarray, shift: int, width: int) -> np.ndarray:
    """The entries of sorted data within [start, start + width] of each of the sorted starts whose slot a run's key
    filter (runs.KeyBits) has set: what an add's filtered probe of a run held in memory asks, where masking the
    starts by the filter, then the highs, then searching took a seventh of its writing process."""
    return _in_key_ranges(_int64s(data), _int64s(starts), bits, int(shift), int(width))


@njit(types.Tuple((_i64s, types.boolean))(_sorted, _i64s, _i64s), cache=True)
def _covering_blocks(firsts, lows, highs):
    """blocks.covering_blocks for lows in order (else not done: False), galloping through the blocks' first
    entries from one range to the next; each block once, in order."""
    out = np.empty(len(firsts), np.int64)
    n, at, free = 0, 0, 0  # free: the first position not given yet
    for r in range(len(lows)):
        if r and lows[r] < lows[r - 1]:
            return out[:0], False
        at = _first_after(firsts, lows[r], at, False)  # the blocks whose first entry is at most lows[r]
        last = _first_after(firsts, highs[r], at, False) - 1
        if last < 0:
            continue
        for position in range(max(at - 1, free, 0), last + 1):
            out[n] = position
            n += 1
        free = max(free, last + 1)
    return out[:n], True


def covering_blocks(firsts: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray | None:
    """blocks.covering_blocks, compiled, for lows in order; None for lows out of order. A batch query asks it for
    hundreds of thousands of ranges a run (two binary searches of numpy's a range and a sort took a sixth of its
    time)."""
    positions, done = _covering_blocks(_int64s(firsts), _int64s(lows), _int64s(highs))
    return positions if done else None


@njit(types.void(types.uint8[::1], _i64s, types.int64), cache=True)
def _set_slots(bits, entries, shift):
    for entry in entries:
        slot = entry >> shift
        bits[slot >> 3] |= np.uint8(1) << np.uint8(slot & 7)


def set_slots(bits: np.ndarray, entries: np.ndarray, shift: int) -> None:
    """runs.KeyBits.add_sorted, compiled: set the bit of each entry's slot (entries >> shift) in a filter's bytes.
    Every run an add writes or merges fills one (numpy's path took a twentieth of its writing process)."""
    _set_slots(bits, _int64s(entries), int(shift))


@njit(types.Tuple((types.uint32[::1], types.boolean))(_bytes, _i64s, _i64s, types.int64, types.int64), cache=True)
def _coded_sketches(data, offsets, counts, low_bits, high_values):
    """The values of coded sketches (each at data[offsets[s]:]: a 2-byte count, 3 low bytes a value, then a bit
    vector where value j sets bit high_j + j), joined; and false for a vector that does not hold exactly its
    count of bits, each at a possible place (a damaged store)."""
    total = 0
    for s in range(len(counts)):
        total += counts[s]
    out = np.empty(total, np.uint32)
    written = 0
    for s in range(len(counts)):
        n = counts[s]
        lows = offsets[s] + 2
        vector = lows + 3 * n
        j = 0
        for byte_at in range((n + high_values + 7) // 8):
            byte = np.int64(data[vector + byte_at])
            while byte:  # each set bit, lowest first
                high = 8 * byte_at + _LOWEST_BIT[byte] - j
                byte &= byte - 1
                if j >= n or high >= high_values:
                    return out, False
                low = np.uint32(data[lows + 3 * j]) | (np.uint32(data[lows + 3 * j + 1]) << 8) | (
                    np.uint32(data[lows + 3 * j + 2]) << 16)
                out[written + j] = (np.uint32(high) << low_bits) | low
                j += 1
        if j != n:
            return out, False
        written += n
    return out, True


def coded_sketches(joined: bytes, sizes: np.ndarray, counts: np.ndarray, low_bits: int, high_values: int) -> np.ndarray:
    """sketchpack's decoding for whole coded sketches (their lengths checked against their counts): their bytes
    joined, each one's size and count. ValueError for a damaged one."""
    values, whole = _coded_sketches(np.frombuffer(joined, np.uint8), _int64s(np.cumsum(sizes) - sizes),
                                    _int64s(counts), int(low_bits), int(high_values))
    if not whole:
        raise ValueError("a stored sketch is damaged")
    return values


@njit(types.Tuple((types.uint8[::1], types.boolean))(types.uint32[::1], _i64s, _i64s, types.int64), cache=True)
def _coded(values, counts, sizes, low_bits):
    """The coded bytes of sketches (their values joined, each one's count and coded size), joined; and false for
    values not sorted and distinct within a sketch."""
    total = 0
    for s in range(len(sizes)):
        total += sizes[s]
    out = np.zeros(total, np.uint8)
    at = 0
    first = 0
    low_mask = (np.uint32(1) << np.uint32(low_bits)) - np.uint32(1)
    for s in range(len(counts)):
        n = counts[s]
        out[at] = n & 0xFF
        out[at + 1] = n >> 8
        lows = at + 2
        vector = lows + 3 * n
        for j in range(n):
            value = values[first + j]
            if j > 0 and value <= values[first + j - 1]:
                return out, False
            low = value & low_mask
            out[lows + 3 * j] = low & np.uint32(0xFF)
            out[lows + 3 * j + 1] = (low >> np.uint32(8)) & np.uint32(0xFF)
            out[lows + 3 * j + 2] = low >> np.uint32(16)
            bit = np.int64(value >> np.uint32(low_bits)) + j
            out[vector + bit // 8] |= np.uint8(1 << (bit % 8))
        first += n
        at += sizes[s]
    return out, True


def coded(values: np.ndarray, counts: np.ndarray, sizes: np.ndarray, low_bits: int) -> list[bytes]:
    """sketchpack's coding of sketches (sorted distinct uint32 values, joined; each one's count and coded size):
    each one's bytes. ValueError for values not sorted and distinct."""
    joined, ordered = _coded(np.ascontiguousarray(values, np.uint32), _int64s(counts), _int64s(sizes), int(low_bits))
    if not ordered:
        raise ValueError("a sketch to pack is not sorted and distinct")
    data = joined.tobytes()
    ends = np.cumsum(sizes).tolist()
    return [data[start:end] for start, end in zip([0, *ends[:-1]], ends)]


@njit(types.Tuple((_i64s, _i64s))(_bytes, _i64s, _i64s, types.int64, types.int64, types.int64, types.int64,
                                  types.int64, types.int64), cache=True)
def _layouts(data, sizes, counts, narrowest, widest, before_narrow, before_wide, whole, id_bits_max):
    kinds = np.zeros(len(sizes), np.int64)
    id_bits = np.zeros(len(sizes), np.int64)
    at = 0
    for b in range(len(sizes)):
        size, count = sizes[b], counts[b]
        width, rest = divmod(size, max(count, 1))
        if rest == 1 and count >= 2 and narrowest <= width <= widest:
            bits = np.int64(data[at])
            id_bits[b] = bits
            if 1 <= bits <= min(id_bits_max, 8 * width - 1):
                kinds[b] = width
        elif rest == 0 and count > 0:
            if width == before_narrow or width == before_wide:
                kinds[b] = -width
            elif width == whole:
                kinds[b] = width
        at += size
    return kinds, id_bits


def layouts(joined: bytes, sizes: np.ndarray, counts: np.ndarray, split_widths: tuple[int, ...],
            before_widths: tuple[int, int], whole: int, id_bits_max: int) -> tuple[np.ndarray, np.ndarray]:
    """blocks.layouts_of, not strict, for blocks whose bytes are joined: one pass instead of a dozen array
    operations, most of a probe's decoding (some thirty blocks a query)."""
    return _layouts(np.frombuffer(joined, np.uint8), _int64s(sizes), _int64s(counts), int(split_widths[0]),
                    int(split_widths[-1]), int(before_widths[0]), int(before_widths[1]), int(whole), int(id_bits_max))


def _int64s(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, np.int64)
