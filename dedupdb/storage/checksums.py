"""Checksums of what a content keeps of its fingerprint (contents.checksum, migration 0011), so that stored bytes
changed behind the store's back (a failing disk, a careless tool) are told instead of read as another text.

A checksum is two 32-bit halves of xxh3-64 digests of the stored columns as they are stored: the low half covers
what verifying a candidate reads, the sketch blob and the SimHash; the high half the rest, the MinHash signature
blob, the winnowed fingerprints blob and the shingle count. A read checks the half it reads (one xxh3 call a
content); `dedupdb check` checks both. NULL: stored before checksums existed (check then verifies what the bytes
themselves allow, and `dedupdb reindex` fills them in).
"""

from __future__ import annotations

from xxhash import xxh3_64_intdigest

_HALF = 0xFFFFFFFF
_U64 = (1 << 64) - 1
_NO_SIMHASH = 0x9E3779B97F4A7C15  # seed of the sketch half for a content without a SimHash


def sketch_half(sketch: bytes, simhash: int | None) -> int:
    """The low half: the stored sketch, seeded with the (signed) SimHash."""
    return xxh3_64_intdigest(sketch, _NO_SIMHASH if simhash is None else simhash & _U64) & _HALF


def rest_half(shingles: int, minhash: bytes, fingerprints: bytes | None) -> int:
    """The high half: signature and fingerprints joined, seeded with where they part, the shingle count and
    whether there are fingerprints at all."""
    seed = ((len(minhash) & 0x7FFFFFFF) << 32) | ((shingles & 0x7FFFFFFF) << 1) | (fingerprints is None)
    return xxh3_64_intdigest(minhash + (fingerprints or b""), seed) & _HALF


def checksum(shingles: int, minhash: bytes, sketch: bytes, simhash: int | None, fingerprints: bytes | None) -> int:
    """A content's checksum, signed 64-bit as SQLite keeps integers."""
    value = (rest_half(shingles, minhash, fingerprints) << 32) | sketch_half(sketch, simhash)
    return value - (1 << 64) if value >> 63 else value


def first_bad_sketch(rows: list[tuple]) -> int | None:
    """The id of the first of rows (id, sketch, simhash, checksum) whose sketch and SimHash do not fit its checksum's
    low half, or None: one loop over them, as verifying a batch onto a large store reads hundreds of thousands."""
    for content_id, sketch, simhash, stored in rows:
        if stored is not None and stored & _HALF != xxh3_64_intdigest(
                sketch, _NO_SIMHASH if simhash is None else simhash & _U64) & _HALF:
            return content_id
    return None


def matches(stored: int | None, shingles: int, minhash: bytes, sketch: bytes, simhash: int | None,
            fingerprints: bytes | None) -> bool:
    return stored is None or stored == checksum(shingles, minhash, sketch, simhash, fingerprints)


def of_columns(parts: dict[str, list]) -> list[int]:
    """checksum() of many contents from their stored parts, column by column by name (rows.FINGERPRINT_PARTS): the
    parts it names, as stored."""
    return [checksum(*values) for values in zip(parts["shingles"], parts["minhash"], parts["sketch"],
                                                 parts["simhash"], parts["fingerprints"])]
