"""The index block codec: how a block of sorted entries ((key << 30) | content id, entries.py) is written as
bytes and read back, in every layout written now or before. One module to read to change the block format; its
compiled twin is fastdecode.py, chosen by decoding.py where numba is loaded already. Runs (runs.py) decide which
entries go into which block and keep them in SQLite."""

from __future__ import annotations

import numpy as np

from dedupdb.errors import DatabaseError
from dedupdb.storage import decoding
from dedupdb.storage.entries import CONTENT_ID_BITS, CONTENT_ID_MASK
from dedupdb.text.hashing import distinct, ranges

# Entries per block kept whole: 16,000 bytes, which one 16 KiB page holds whole; a packed block (see packed)
# holds more entries in as many bytes. Reading a block costs about as much per
# row as per byte, and an ingest of near-duplicates reads most blocks of the large runs for every batch: large
# blocks make that several times cheaper, and cost a probe that finds one row little more.
BLOCK_ENTRIES = 2000
# Entries kept whole per block of a run merged whole at rest (Runs.compact, `dedupdb optimize`): a query looks up
# some hundred keys, one block each, and decodes each block from its start to find them; blocks a sixteenth the
# size (1 KiB, 250 packed entries) decode a sixteenth as much, and at a million documents answered as quickly as
# an eighth or quicker (docs/benchmarks.md); an add onto the store reads more, smaller blocks of that run.
COMPACT_BLOCK_ENTRIES = 125


# Written now: the gap from the previous entry's key above the content id in one little-endian integer of 4, 5 or
# 6 bytes ("split"), the id in as few low bits as the block's largest id needs (a byte before the entries says how
# many), its blocks 4, 5 or 6 * entries + 1 bytes long; or the entries whole, 8 * entries. Keys are hashes, so a
# run's keys lie about 2**33 / rows apart: at some 60 rows a text, the gap and id of a large run's entry fit 4
# bytes at any store size, those of a small run 5. A split block holds at least two entries, so no length is
# read two ways. Read too: 5 and 6 * entries bytes, gaps of 16 bits and ids of 24 or 32 (stores written before).
SPLIT_WIDTHS = (4, 5, 6)
GAP_AND_ID24 = np.dtype([("gap", "<u2"), ("id_low", "<u2"), ("id_high", "u1")])  # 5 bytes: ids below 2**24
GAP_AND_ID32 = np.dtype([("gap", "<u2"), ("id", "<u4")])                         # 6 bytes
WHOLE = 8                                                                         # little-endian int64
LAYOUTS = (*SPLIT_WIDTHS, WHOLE)  # written, smallest first
_BEFORE_WIDTHS = (GAP_AND_ID24.itemsize, GAP_AND_ID32.itemsize)
_ANY_SPLIT = 1  # split blocks of any width, where they are decoded together (no layout is one byte an entry)


def packed(entries: np.ndarray, width: int) -> bytes | None:
    """The bytes of sorted entries split in `width` bytes each, or kept whole (WHOLE); None when they do not fit."""
    if width == WHOLE:
        return entries.astype("<i8").tobytes()
    if len(entries) < 2:
        return None
    keys = entries >> CONTENT_ID_BITS
    ids = entries & CONTENT_ID_MASK
    gaps = np.diff(keys, prepend=keys[:1])
    id_bits = max(1, int(ids.max()).bit_length())
    if int(gaps.max()) >= 1 << (8 * width - id_bits):
        return None
    values = ((gaps << id_bits) | ids).astype("<u8")
    if width == 4:
        return bytes([id_bits]) + values.astype("<u4").tobytes()
    return bytes([id_bits]) + values.view(np.uint8).reshape(-1, 8)[:, :width].tobytes()


def per_block(width: int, whole: int | None = None) -> int:
    """Entries a block of this layout holds: as many as fill the bytes of BLOCK_ENTRIES (or `whole`) whole ones."""
    return (BLOCK_ENTRIES if whole is None else whole) * WHOLE // width


def readable(blob: bytes, entries: int) -> bool:
    """Whether a block of `entries` entries can be read: a layout gives its length, and its id bits could have
    been written."""
    return layouts_of(np.array([len(blob)], np.int64), np.array([entries], np.int64), [blob], strict=False)[0][0] != 0


def layouts_of(sizes: np.ndarray, entries: np.ndarray, blobs: list[bytes],
           strict: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The layouts of many blocks as numbers (a split width or WHOLE, or minus the width of a packed layout of
    before), and the id bits of each split block (0 for the others). A block whose length fits no layout, or whose
    id bits could not have been written (1 to 30, and fewer than its width's bits), is damaged: a DatabaseError,
    or layout 0 with strict false."""
    width, rest = np.divmod(sizes, np.maximum(entries, 1))
    split = (rest == 1) & (entries >= 2) & (width >= SPLIT_WIDTHS[0]) & (width <= SPLIT_WIDTHS[-1])
    id_bits = np.zeros(len(sizes), np.int64)
    if split.any():
        at = np.flatnonzero(split)
        id_bits[at] = np.frombuffer(bytes([blobs[i][0] for i in at.tolist()]), np.uint8)
        split &= (id_bits >= 1) & (id_bits <= np.minimum(CONTENT_ID_BITS, 8 * width - 1))
    before = (rest == 0) & (entries > 0) & ((width == GAP_AND_ID24.itemsize) | (width == GAP_AND_ID32.itemsize))
    whole = (rest == 0) & (entries > 0) & (width == WHOLE)
    known = split | before | whole
    if strict and not known.all():
        raise _damaged()
    return np.where(known, np.where(before, -width, width), 0), id_bits


def _damaged() -> DatabaseError:
    return DatabaseError("the index is damaged (a block that fits no layout); run 'dedupdb check' for details")


def split_values(blobs: list[bytes], width: int) -> np.ndarray:
    """The integers of split blocks of one width (each block's leading byte left out), as int64."""
    if width == 4 and len(blobs) > 4:
        # Many blocks (a merge, a batch's probes): read in place past each leading byte, joined by one copy;
        # slicing large blocks by the hundred and joining the slices takes ten times as long.
        return np.concatenate([np.frombuffer(blob, "<u4", offset=1) for blob in blobs]).astype(np.int64)
    joined = b"".join([blob[1:] for blob in blobs])
    if width == 4:
        return np.frombuffer(joined, "<u4").astype(np.int64)
    # The low four bytes and the rest as fields of one record, not copied byte by byte.
    parts = np.frombuffer(joined, np.dtype([("low", "<u4"), ("high", "u1" if width == 5 else "<u2")]))
    values = parts["high"].astype(np.int64)
    values <<= 32
    values |= parts["low"]
    return values


def encode(entries: np.ndarray) -> bytes:
    """The bytes of one block: its sorted entries in the smallest layout they fit."""
    for layout in LAYOUTS:
        blob = packed(entries, layout)
        if blob is not None:
            return blob
    raise AssertionError("entries kept whole always fit")


def next_block(rest: np.ndarray, whole: int | None = None) -> tuple[np.ndarray, bytes, bool]:
    """The entries the next block of a run takes from these (sorted), as many as fill a block (of BLOCK_ENTRIES
    or `whole` entries' bytes) in the smallest layout they fit; their bytes; and whether they fill it."""
    for layout in LAYOUTS:
        part = rest[: per_block(layout, whole)]
        blob = packed(part, layout)
        if blob is not None:
            return part, blob, len(part) == per_block(layout, whole)
    raise AssertionError("entries kept whole always fit")


def packed_blocks(entries: np.ndarray, whole: int | None = None, final: bool = True) -> tuple[list[bytes], np.ndarray]:
    """next_block taken again and again over sorted entries: (each block's bytes, each block's first entry's position
    with one past the last's at the end). Without final, a last block that would not be full is left unwritten.
    Compiled (fastdecode.packed_blocks, the same bytes) where numba is loaded."""
    fast = decoding.decoder()
    if fast is not None:
        return fast.packed_blocks(entries, (BLOCK_ENTRIES if whole is None else whole) * WHOLE, final)
    blobs, bounds = [], [0]
    while bounds[-1] < len(entries):
        part, blob, full = next_block(entries[bounds[-1] :], whole)
        if not full and not final:
            break
        blobs.append(blob)
        bounds.append(bounds[-1] + len(part))
    return blobs, np.array(bounds, np.int64)


def decode_block(first: int, count: int, blob: bytes) -> np.ndarray:
    """The entries of one block (first: its smallest entry)."""
    return decode_blocks(np.array([first], np.int64), np.array([count], np.int64), [blob])


def decode_blocks(firsts: np.ndarray, counts: np.ndarray, blobs: list[bytes],
             lows: np.ndarray | None = None, highs: np.ndarray | None = None) -> np.ndarray:
    """The entries of blocks, joined in the order given; with lows and highs, only those within one of the ranges
    [lows[i], highs[i]] (lows sorted, ranges disjoint), sorted. All blocks of one layout are decoded at once, and
    of packed ones only the keys before the ranges are known (a probe wants a few entries of each block)."""
    sizes = np.fromiter(map(len, blobs), np.int64, len(blobs))
    ranged = lows is not None
    fast = decoding.decoder()
    joined = b"".join(blobs) if fast is not None else None
    if joined is not None:
        kinds, block_id_bits = fast.layouts(joined, sizes, counts, SPLIT_WIDTHS, _BEFORE_WIDTHS, WHOLE, CONTENT_ID_BITS)
        if not kinds.all():
            raise _damaged()
    else:
        kinds, block_id_bits = layouts_of(sizes, counts, blobs)
    out = np.empty(0 if ranged else int(counts.sum()), np.int64)
    starts = np.cumsum(counts) - counts
    parts = []
    groups = kinds
    if fast is not None and not ranged:
        # A whole read decodes split blocks of every width in one compiled pass: their entries then come in order,
        # none put in place after (a merge's millions: a third of its decoding). A probe decodes a width at a
        # time, and sorts the few entries it finds: together was slower there, measured.
        groups = np.where((kinds > 0) & (kinds != WHOLE), _ANY_SPLIT, kinds)
    for kind in sorted(set(groups.tolist())):  # not np.unique, which loads numpy.ma: a cold query feels it
        picked = np.flatnonzero(groups == kind)
        layout = kind if kind > 0 else GAP_AND_ID24 if kind == -GAP_AND_ID24.itemsize else GAP_AND_ID32
        if kind == WHOLE:
            values = np.frombuffer(_joined(blobs, picked, joined), "<i8")
            if ranged:
                values = in_ranges(values, lows, highs)
        elif isinstance(layout, int) and fast is not None:  # split (of one width, or _ANY_SPLIT), compiled
            values = fast.split_blocks(_joined(blobs, picked, joined), sizes[picked], counts[picked],
                                       kinds[picked], block_id_bits[picked], firsts[picked], lows, highs)
        else:
            if isinstance(layout, int):  # split: each block's byte of id bits, then its entries
                split = split_values([blobs[i] for i in picked.tolist()], layout)
                bits = block_id_bits[picked]
                # One number for all when the blocks agree (a run's blocks mostly do): no array an entry.
                id_bits = int(bits[0]) if (bits == bits[0]).all() else np.repeat(bits, counts[picked])
                sums = split >> id_bits
            else:
                packed = np.frombuffer(b"".join([blobs[i] for i in picked.tolist()]), layout)
                sums = packed["gap"].astype(np.int64)
            # Each block's keys: its first key plus the running sum of the gaps since its start.
            np.cumsum(sums, out=sums)  # in place on a contiguous copy: twice as fast as on the strided field
            block_starts = np.cumsum(counts[picked]) - counts[picked]
            base = (firsts[picked] >> CONTENT_ID_BITS) - sums[block_starts]
            keys = np.repeat(base, counts[picked]) + sums
            at = slice(None)
            if ranged:  # the entries under the ranges' keys, then the ranges themselves
                begin = np.searchsorted(keys, lows >> CONTENT_ID_BITS, "left")
                end = np.searchsorted(keys, highs >> CONTENT_ID_BITS, "right")
                at = distinct(ranges(begin, np.maximum(end - begin, 0)))
                keys = keys[at]
            if isinstance(layout, int):
                ids = split[at] & ((1 << (id_bits if isinstance(id_bits, int) else id_bits[at])) - 1)
            elif layout is GAP_AND_ID24:
                packed = packed[at]
                ids = packed["id_low"].astype(np.int64) | (packed["id_high"].astype(np.int64) << 16)
            else:
                ids = packed[at]["id"].astype(np.int64)
            values = (keys << CONTENT_ID_BITS) | ids
            if ranged:
                values = in_ranges(values, lows, highs)
        if ranged:
            parts.append(values)
            continue
        if len(picked) == len(blobs):
            return values
        out[ranges(starts[picked], counts[picked])] = values
    if ranged:
        if len(parts) == 1:
            return parts[0]
        out = np.concatenate(parts) if parts else out
        out.sort()
    return out



def _joined(blobs: list[bytes], picked: np.ndarray, joined: bytes | None) -> bytes:
    """The bytes of the picked blocks, joined: those of every block joined already (most reads are of blocks of one
    layout), else joined now."""
    if joined is not None and len(picked) == len(blobs):
        return joined
    return b"".join([blobs[i] for i in picked.tolist()])


def covering_blocks(firsts: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """Positions (in order, each once) of the blocks, by their sorted first entries, that may hold an entry within
    some range [lows[i], highs[i]]: those from the last block starting at or below lows[i] through the last
    starting at or below highs[i]."""
    if len(firsts) == 0:
        return np.empty(0, np.int64)
    fast = decoding.decoder()
    if fast is not None and len(lows) > 1:
        positions = fast.covering_blocks(firsts, lows, highs)
        if positions is not None:
            return positions
    first = np.searchsorted(firsts, lows, "right") - 1
    last = np.searchsorted(firsts, highs, "right") - 1
    live = last >= 0
    first, last = np.maximum(first[live], 0), last[live]
    if len(first) == 0:
        return np.empty(0, np.int64)
    return distinct(ranges(first, last - first + 1))


def in_ranges(data: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """The entries of sorted data within any of the ranges [lows[i], highs[i]] (lows sorted, ranges disjoint)."""
    fast = decoding.decoder()
    if fast is not None and len(lows) > 1:
        return fast.in_ranges(data, lows, highs)
    starts = np.searchsorted(data, lows, "left")
    ends = np.searchsorted(data, highs, "right")
    lengths = ends - starts
    if not lengths.any():
        return np.empty(0, np.int64)
    return data[ranges(starts, lengths)]
