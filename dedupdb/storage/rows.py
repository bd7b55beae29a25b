"""The rows a store gives back, and how signatures and sketches are kept as bytes in them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dedupdb.storage import sketchpack


@dataclass(frozen=True)
class FileRow:
    id: int
    path: str
    size: int
    mtime_ns: int
    digest: str
    status: str
    kind: str
    records: int
    options: str | None


@dataclass(frozen=True)
class ContentRow:
    id: int
    chars: int
    shingles: int
    minhash: np.ndarray   # uint16, the low bits of each value (fingerprint.py); empty when the sketch gives it
    sketch: np.ndarray
    simhash: int | None
    cluster: int
    documents: int
    fingerprints: np.ndarray | None = None  # winnowed (sketch/winnowing.py); None when stored before they existed


@dataclass(frozen=True)
class HitDocument:
    """A document holding a text a query found: what its hit shows (Database.query), without its content's
    cluster (DocumentRow's), which no hit shows."""

    key: str
    path: str
    record: str | None
    content_id: int
    bytes: int
    snippet: str


@dataclass(frozen=True)
class DocumentRow:
    id: int
    key: str
    path: str
    record: str | None
    content_id: int
    bytes: int
    mtime_ns: int
    snippet: str
    cluster: int


def u32_array(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<u4").astype(np.uint32)


def u32_blob(values: np.ndarray) -> bytes:
    return values.astype("<u4", copy=False).tobytes()


def signature_array(blob: bytes) -> np.ndarray:
    """A stored MinHash signature; empty when it follows from the sketch (see kept_signature_bytes)."""
    return np.frombuffer(blob, dtype="<u2").astype(np.uint16)


def kept_signature_bytes(fp) -> bytes:
    """What a content keeps of its MinHash signature: nothing when its sketch holds every one of its shingle
    hashes (fewer than sketch_size of them, as almost every text has), since the signature is the MinHash of
    exactly those and is computed again when needed (index/indexer.py); half a kilobyte a text otherwise."""
    if 0 < fp.shingles == len(fp.sketch):
        return b""
    return signature_bytes(fp.minhash)


def signature_bytes(values: np.ndarray) -> bytes:
    return values.astype("<u2").tobytes()


@dataclass(frozen=True)
class FingerprintPart:
    """One part of what a content's fingerprint holds, as the contents table keeps it. Its name is the column, the
    attribute of sketch/fingerprint.py's Fingerprint it is stored from and the ContentRow field it is read into;
    both ways work on a batch, as sketches are coded together (sketchpack.py)."""

    name: str
    stored: Callable[[list], list]  # Fingerprints -> their column values
    read: Callable[[list], list]    # column values -> ContentRow values (ValueError: damaged bytes)


def _attribute(name: str) -> Callable[[list], list]:
    return lambda fingerprints: [getattr(fp, name) for fp in fingerprints]


# What a content's fingerprint holds: the one place that says it. A new kind is a Fingerprint attribute computed
# in sketch/, a ContentRow field and a part here, and a migration adding its column (NULL for texts stored
# before); checksums.py covers the parts its checksum names.
FINGERPRINT_PARTS: tuple[FingerprintPart, ...] = (
    FingerprintPart("chars", _attribute("chars"), list),
    FingerprintPart("shingles", _attribute("shingles"), list),
    FingerprintPart("minhash", lambda fps: [kept_signature_bytes(fp) for fp in fps],
                    lambda blobs: [signature_array(b) for b in blobs]),
    FingerprintPart("sketch", lambda fps: sketchpack.pack([fp.sketch for fp in fps]), sketchpack.unpack_each),
    FingerprintPart("simhash", _attribute("simhash_signed"), list),
    FingerprintPart("fingerprints", lambda fps: [optional_u32_blob(fp.fingerprints) for fp in fps],
                    lambda blobs: optional_u32_arrays(blobs)),
)
PART_NAMES = tuple(part.name for part in FINGERPRINT_PARTS)

# The columns ContentRow is read from (Store._content_rows): the id, the parts, the cluster and count, the checksum.
CONTENT_COLUMNS = ", ".join(("id", *PART_NAMES, "cluster", "documents", "checksum"))


def optional_u32_array(blob: bytes | None) -> np.ndarray | None:
    return None if blob is None else u32_array(blob)


def optional_u32_arrays(blobs: list[bytes | None]) -> list[np.ndarray | None]:
    """optional_u32_array() of each blob: views of one array for them all, made at once (a batch query reads
    thousands of contents' fingerprints; an array each took more than a microsecond)."""
    held = [blob for blob in blobs if blob is not None]
    if any(len(blob) % 4 for blob in held):  # not whole (a damaged store): refused as one by one refuses it
        return [optional_u32_array(blob) for blob in blobs]
    values = np.frombuffer(b"".join(held), dtype="<u4").astype(np.uint32)
    out: list[np.ndarray | None] = []
    at = 0
    for blob in blobs:
        if blob is None:
            out.append(None)
            continue
        end = at + len(blob) // 4
        out.append(values[at:end])
        at = end
    return out


def optional_u32_blob(values: np.ndarray | None) -> bytes | None:
    return None if values is None else u32_blob(values)
