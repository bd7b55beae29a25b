"""How a store keeps a bottom-k sketch (sorted distinct 32-bit shingle hashes) in fewer bytes: Elias-Fano coding.

Each value's low 24 bits are kept as they are, 3 bytes; its high 8 bits, which only grow along the sorted values,
as a bit vector of n + 256 bits where value j sets bit high_j + j. Hashes of n values lie about 2**32 / n apart,
so for the 100 to 1,000 values of most texts that is close to the fewest bits any coding needs: 452 bytes for a
sketch of 135 values against 540. A sketch no shorter coded than plain is kept plain (4 bytes a value, little-endian:
every sketch stored before). The two are told apart by length: a coded one, a 2-byte count, the low bytes and the
bit vector, is padded to one byte past a multiple of four, which a plain one never is.

Every function here works on many sketches at once: an add writes thousands a batch, and verifying a batch onto a
large store reads hundreds of thousands.
"""

from __future__ import annotations

import numpy as np

from dedupdb.storage import decoding
from dedupdb.text.hashing import ranges

_LOW_BITS = 24
_HIGH_VALUES = 1 << (32 - _LOW_BITS)  # 256 possible high parts: bits of the vector beyond one a value
_MAX_CODED = (1 << 16) - 1            # values a 2-byte count can name


def coded_size(n: np.ndarray) -> np.ndarray:
    """Bytes of coded sketches of n values: count, low bytes, bit vector, padded to 1 past a multiple of 4."""
    size = 2 + 3 * n + _vector_bytes(n)
    return size + (1 - size) % 4


def _vector_bytes(n: np.ndarray) -> np.ndarray:
    return (n + _HIGH_VALUES + 7) // 8


def pack(sketches: list[np.ndarray]) -> list[bytes]:
    """The bytes to store for each sketch (sorted distinct uint32 values): coded where that is shorter, plain
    otherwise."""
    n = np.fromiter(map(len, sketches), np.int64, len(sketches))
    coded = (coded_size(n) < 4 * n) & (n <= _MAX_CODED)
    out = [b""] * len(sketches)
    for i in np.flatnonzero(~coded).tolist():
        out[i] = np.asarray(sketches[i]).astype("<u4", copy=False).tobytes()
    picked = np.flatnonzero(coded)
    if len(picked) == 0:
        return out
    counts = n[picked]
    fast = decoding.decoder()
    if fast is not None:  # a worker's batch of thousands: in one pass, not the dozen array operations below
        values = np.concatenate([sketches[i] for i in picked.tolist()])
        for i, blob in zip(picked.tolist(), fast.coded(values, counts, coded_size(counts), _LOW_BITS)):
            out[i] = blob
        return out
    values = np.concatenate([sketches[i] for i in picked.tolist()]).astype(np.int64)
    first = np.cumsum(counts) - counts  # where each sketch's values start
    rank = np.arange(len(values)) - np.repeat(first, counts)
    if (np.diff(values)[rank[1:] > 0] <= 0).any():
        raise ValueError("a sketch to pack is not sorted and distinct")
    lows = np.ascontiguousarray(
        (values & ((1 << _LOW_BITS) - 1)).astype("<u4").view(np.uint8).reshape(-1, 4)[:, :3]).tobytes()
    vector_bytes = _vector_bytes(counts)
    vector_first = np.cumsum(vector_bytes) - vector_bytes
    bits = np.zeros(int(8 * vector_bytes.sum()), np.uint8)
    bits[np.repeat(8 * vector_first, counts) + (values >> _LOW_BITS) + rank] = 1
    vectors = np.packbits(bits, bitorder="little").tobytes()
    pads = (coded_size(counts) - 2 - 3 * counts - vector_bytes).tolist()
    for i, count, start, vector_start, vector_size, pad in zip(picked.tolist(), counts.tolist(), first.tolist(),
                                                                vector_first.tolist(), vector_bytes.tolist(), pads):
        out[i] = b"".join((count.to_bytes(2, "little"), lows[3 * start : 3 * (start + count)],
                           vectors[vector_start : vector_start + vector_size], bytes(pad)))
    return out


def unpack_joined(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(every sketch's values joined, uint32; each one's length) of stored sketches, in order. Raises ValueError
    for bytes that are neither a plain nor a whole coded sketch (a damaged store)."""
    sizes = np.fromiter(map(len, blobs), np.int64, len(blobs))
    plain = sizes % 4 == 0
    if plain.all():  # as every sketch stored before they were coded
        return np.frombuffer(b"".join(blobs), "<u4").astype(np.uint32), sizes // 4
    picked = np.flatnonzero(~plain)
    heads = b"".join([blobs[i][:2] for i in picked.tolist()])
    if len(heads) != 2 * len(picked):
        raise ValueError("a stored sketch is not whole")
    counts = np.frombuffer(heads, "<u2").astype(np.int64)
    if (coded_size(counts) != sizes[picked]).any():
        raise ValueError("a stored sketch is not whole")
    if len(picked) == len(blobs):
        return _decoded(blobs, sizes, counts), counts
    lengths = np.where(plain, sizes // 4, 0)
    lengths[picked] = counts
    out = np.empty(int(lengths.sum()), np.uint32)
    starts = np.cumsum(lengths) - lengths
    at = np.flatnonzero(plain)
    out[ranges(starts[at], lengths[at])] = np.frombuffer(b"".join([blobs[i] for i in at.tolist()]), "<u4")
    out[ranges(starts[picked], counts)] = _decoded([blobs[i] for i in picked.tolist()], sizes[picked], counts)
    return out, lengths


def unpack_each(blobs: list[bytes]) -> list[np.ndarray]:
    """Each stored sketch as its own uint32 array (views of one array for them all)."""
    values, lengths = unpack_joined(blobs)
    ends = np.cumsum(lengths).tolist()
    # Sliced here rather than by np.split, whose work for each piece took 2% of a query's samples.
    return [values[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def _decoded(blobs: list[bytes], sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The values of coded sketches (sizes: each one's bytes, checked against its count), joined."""
    fast = decoding.decoder()
    if fast is not None:
        return fast.coded_sketches(b"".join(blobs), sizes, counts, _LOW_BITS, _HIGH_VALUES)
    total = int(counts.sum())
    n_list = counts.tolist()
    vector_bytes = _vector_bytes(counts)
    lows = np.zeros((total, 4), np.uint8)
    lows[:, :3] = np.frombuffer(b"".join([b[2 : 2 + 3 * n] for b, n in zip(blobs, n_list)]), np.uint8).reshape(-1, 3)
    vectors = b"".join([b[2 + 3 * n : 2 + 3 * n + v] for b, n, v in zip(blobs, n_list, vector_bytes.tolist())])
    ones = np.flatnonzero(np.unpackbits(np.frombuffer(vectors, np.uint8), bitorder="little"))
    if len(ones) != total:
        raise ValueError("a stored sketch is damaged")
    # Value j of a sketch sets bit high_j + j of its vector: its high part is where its bit lies, less j.
    first = np.cumsum(counts) - counts
    bit_first = 8 * (np.cumsum(vector_bytes) - vector_bytes)
    highs = ones - np.arange(total) - np.repeat(bit_first - first, counts)
    if total and (highs.min() < 0 or highs.max() >= _HIGH_VALUES):
        raise ValueError("a stored sketch is damaged")
    return ((highs << _LOW_BITS) | lows.view("<u4").ravel()).astype(np.uint32)
