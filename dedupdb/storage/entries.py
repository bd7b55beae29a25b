"""The layout of an index entry, defined once: one signed 64-bit integer, (key << CONTENT_ID_BITS) | content id,
so that the entries of one key sort together and a run of keys is one range of integers. The index rows, the
containment rows, their block codec (blocks.py, fastdecode.py) and the check all read the layout from here."""

from __future__ import annotations

import numpy as np

CONTENT_ID_BITS = 30  # at most 2**30 - 1 distinct texts in one store
CONTENT_ID_MASK = (1 << CONTENT_ID_BITS) - 1
INDEX_KEY_BITS = 63 - CONTENT_ID_BITS  # LSH band keys keep their top bits: the sign bit stays clear
CONTAINMENT_KEY_BITS = 32  # winnowed fingerprints are 32-bit hashes (sketch/winnowing.py)
INDEX_FAMILY, CONTAINMENT_FAMILY = 0, 1  # the two families of runs (runs.py) these entries are kept in


def packed(content_ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The entries of (content id, key) pairs."""
    return (np.asarray(keys, dtype=np.uint64).astype(np.int64) << CONTENT_ID_BITS) | np.asarray(content_ids, np.int64)
