"""Index rows and containment rows, kept as sorted runs (runs.py)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dedupdb.storage import checksums
from dedupdb.storage.connection import chunks, marks
from dedupdb.storage.entries import (
    CONTENT_ID_BITS,
    CONTENT_ID_MASK,
    packed,
)
from dedupdb.storage.rows import optional_u32_arrays, u32_blob
from dedupdb.storage.runs import Runs
from dedupdb.text.hashing import distinct, distinct_counts, distinct_of_sorted


class PostingTables:
    """Index and containment rows in their sorted runs (runs.py), as Store's methods (store.py)."""

    # --- index rows ----------------------------------------------------------

    # LSH band rows and SimHash block rows, each one integer, (33-bit key of slot and value) << 30 | content id,
    # kept as sorted runs (runs.py): the rows under one key are one range of every run.
    def index_and_match(self, content_ids: np.ndarray, keys: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray],
                                                                               tuple[np.ndarray, np.ndarray]]:
        """Probe, then add, index rows (keys[i] belongs to content_ids[i]). Returns two pairs of (key, content id)
        arrays: the new rows, distinct and in key order, and the rows stored before under one of their keys. The
        probes use the runs' key filters (an ingest probes many keys, most of them in no run). The rows are
        sorted once, as the entries they are stored as, for all three uses."""
        entries = distinct(packed(content_ids, keys))
        new_keys = entries >> CONTENT_ID_BITS
        starts = distinct_of_sorted(new_keys) << CONTENT_ID_BITS
        found = self._index.lookup(starts, starts + CONTENT_ID_MASK, filtered=True)
        self._index.insert(entries, sorted_distinct=True)
        return ((new_keys.astype(np.uint64), entries & CONTENT_ID_MASK),
                ((found >> CONTENT_ID_BITS).astype(np.uint64), found & CONTENT_ID_MASK))

    def insert_index(self, content_ids: np.ndarray, keys: np.ndarray) -> None:
        """Add index rows without probing for those stored under their keys: for contents whose pairs are known
        already (a scale-out job's, scaleout/importer.py)."""
        self._index.insert(packed(content_ids, keys))

    def match_index(self, keys: np.ndarray, filtered: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(key, content id) arrays of the stored rows under any of these keys (filtered: see Runs.lookup)."""
        entries = self._under_keys(self._index, keys, filtered)
        return (entries >> CONTENT_ID_BITS).astype(np.uint64), entries & CONTENT_ID_MASK

    @staticmethod
    def _under_keys(runs: Runs, keys: np.ndarray, filtered: bool = False) -> np.ndarray:
        if len(keys) == 0:
            return np.empty(0, np.int64)
        starts = distinct(np.asarray(keys, dtype=np.uint64)).astype(np.int64) << CONTENT_ID_BITS
        return runs.lookup(starts, starts + CONTENT_ID_MASK, filtered)

    def delete_index(self, content_ids: np.ndarray, keys: np.ndarray) -> None:
        self._index.delete(packed(content_ids, keys))

    def index_rows(self) -> int:
        return self._index.count()

    def clear_index(self) -> None:
        self._index.clear()
        self._containment.clear()  # rebuilt too, from each content's fingerprints
        self.conn.execute("DELETE FROM pairs")
        self.conn.execute("UPDATE contents SET cluster = id")

    # --- containment rows ------------------------------------------------------
    #
    # Winnowed fingerprints (sketch/winnowing.py), packed like the index rows: (32-bit hash << 30) | content id, in runs
    # of their own. They follow from the text alone, so a rebuild of the index keeps them.

    def insert_containment(self, content_ids: np.ndarray, keys: np.ndarray) -> None:
        self._containment.insert(packed(content_ids, keys))

    def delete_containment(self, content_ids: np.ndarray, keys: np.ndarray) -> None:
        self._containment.delete(packed(content_ids, keys))

    def containment_postings(self, keys: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys, content ids) of the stored rows under those of these keys that hold at most `limit` rows, and the
        keys that hold more."""
        empty = np.empty(0, np.uint64)
        if len(keys) == 0:
            return empty, np.empty(0, np.int64), empty
        entries = self._under_keys(self._containment, keys)
        found, counts = distinct_counts(entries >> CONTENT_ID_BITS)
        common = found[counts > limit]
        entries = entries[~np.isin(entries >> CONTENT_ID_BITS, common)]
        return (entries >> CONTENT_ID_BITS).astype(np.uint64), entries & CONTENT_ID_MASK, common.astype(np.uint64)

    def containment_sides(self, content_ids: Iterable[int]) -> dict[int, tuple[int, np.ndarray, np.ndarray | None, int | None]]:
        """(shingles, sketch, fingerprints or None, signed SimHash) of contents: what comparing them needs."""
        out = {}
        for chunk in chunks(list(content_ids)):
            rows = self._q(
                "SELECT id, shingles, sketch, fingerprints, simhash, minhash, checksum FROM contents "
                f"WHERE id IN ({marks(len(chunk))})",
                chunk,
            ).fetchall()
            for r in rows:
                if not checksums.matches(r[6], r[1], r[5], r[2], r[4], r[3]):
                    raise self._damaged_content(r[0])
            sketches = self._unpacked([r[2] for r in rows])
            out.update((r[0], (r[1], sketch, prints, r[4]))
                       for r, sketch, prints in zip(rows, sketches, optional_u32_arrays([r[3] for r in rows])))
        return out

    def containment_sizes(self, content_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        """(distinct shingles, fingerprints) of contents (0 fingerprints for one stored before they existed)."""
        out = {}
        for chunk in chunks(list(content_ids)):
            out.update((r[0], (r[1], r[2])) for r in self._q(
                f"SELECT id, shingles, coalesce(length(fingerprints), 0) / 4 FROM contents WHERE id IN ({marks(len(chunk))})",
                chunk,
            ))
        return out

    def set_fingerprints(self, fingerprints: dict[int, np.ndarray]) -> None:
        """Store the fingerprints of contents that had none (their rows are the caller's to insert). Their checksums,
        which covered none, are dropped: 'dedupdb reindex' gives them new ones."""
        self.conn.executemany(
            "UPDATE contents SET fingerprints = ?, checksum = NULL WHERE id = ? AND fingerprints IS NULL",
            [(u32_blob(fp), cid) for cid, fp in fingerprints.items()],
        )

    def without_fingerprints(self, after: int = 0, limit: int = -1) -> list[int]:
        """Ids of contents stored before fingerprints existed, in order (from a partial index of just them)."""
        return [r[0] for r in self._q(
            "SELECT id FROM contents WHERE fingerprints IS NULL AND id > ? ORDER BY id LIMIT ?", (after, limit)
        )]

    def count_without_fingerprints(self) -> int:
        return self._q("SELECT count(*) FROM contents WHERE fingerprints IS NULL").fetchone()[0]

    def containment_rows(self) -> int:
        return self._containment.count()

    # --- compaction --------------------------------------------------------------

    def run_counts(self) -> dict[str, int]:
        """Sorted runs of index rows and of containment rows: a lookup reads one block a key in each."""
        return {"index": self._index.run_count(), "containment": self._containment.run_count()}

    def compact_index(self) -> int:
        """Merge the index rows' runs into one of small blocks (inside the caller's transaction); the runs merged."""
        return self._index.compact()

    def compact_containment(self) -> int:
        """Merge the containment rows' runs into one of small blocks (inside the caller's transaction); the runs
        merged."""
        return self._containment.compact()
