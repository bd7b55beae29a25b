"""The contents table: each distinct text's fingerprint, checksummed."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dedupdb.errors import DatabaseError
from dedupdb.storage import checksums, sketchpack
from dedupdb.storage.connection import chunks, marks
from dedupdb.storage.entries import (
    CONTENT_ID_MASK,
)
from dedupdb.storage.rows import (
    CONTENT_COLUMNS,
    FINGERPRINT_PARTS,
    PART_NAMES,
    ContentRow,
)


def stored_columns(fingerprints: list) -> list[tuple]:
    """Each fingerprint as the contents table keeps it: its parts' column values (rows.FINGERPRINT_PARTS, in
    order), then its checksum. It follows from the fingerprint alone, so a worker process makes it beside the
    sketch and the process that writes the store only writes it."""
    if not fingerprints:
        return []
    parts = {part.name: part.stored(fingerprints) for part in FINGERPRINT_PARTS}
    sums = checksums.of_columns(parts)
    return [(*values, checksum) for checksum, *values in zip(sums, *parts.values())]


class ContentTables:
    """The contents table, as Store's methods (store.py): they run in its connection and transactions."""

    # --- contents ------------------------------------------------------------

    def content_ids_by_hash(self, hashes: list[bytes]) -> dict[bytes, int]:
        found: dict[bytes, int] = {}
        for chunk in chunks(hashes):
            rows = self._q(f"SELECT hash, id FROM contents WHERE hash IN ({marks(len(chunk))})", chunk)
            found.update(rows.fetchall())
        return found

    def next_content_ids(self, count: int) -> list[int]:
        """The ids the next `count` new contents take (inside the writing transaction that stores them)."""
        if not count:
            return []
        first = self.conn.execute("SELECT coalesce(max(id), 0) + 1 FROM contents").fetchone()[0]
        if first + count - 1 > CONTENT_ID_MASK:
            raise DatabaseError(f"{self.path} is full: it holds at most {CONTENT_ID_MASK:,} distinct texts")
        return list(range(first, first + count))

    def insert_contents(self, fingerprints: list, ids: list[int] | None = None,
                        clusters: dict[int, int] | None = None, documents: list[int] | None = None,
                        columns: list[tuple | None] | None = None) -> list[int]:
        """Store new contents under ids (by default the next free ones: next_content_ids), each in the cluster
        `clusters` gives it or its own, and held by as many documents as `documents` says (none by default);
        returns their ids in order. columns: what stored_columns gives for each, where a worker made it already
        (None for one to make here)."""
        if not fingerprints:
            return []
        ids = self.next_content_ids(len(fingerprints)) if ids is None else ids
        documents = [0] * len(fingerprints) if documents is None else documents
        if not len(ids) == len(documents) == len(fingerprints):
            raise ValueError(f"{len(fingerprints)} contents given {len(ids)} ids and {len(documents)} counts")
        clusters = clusters or {}
        columns = list(columns) if columns is not None else [None] * len(fingerprints)
        missing = [i for i, c in enumerate(columns) if c is None]
        for i, made in zip(missing, stored_columns([fingerprints[i] for i in missing])):
            columns[i] = made
        rows = [
            (i, fp.content_hash, *values[:-1], clusters.get(i, i), held, values[-1])
            for i, fp, held, values in zip(ids, fingerprints, documents, columns)
        ]
        names = ", ".join(("id", "hash", *PART_NAMES, "cluster", "documents", "checksum"))
        self.conn.executemany(
            f"INSERT INTO contents ({names}) VALUES ({marks(len(PART_NAMES) + 5)})", rows
        )
        return ids

    def change_document_counts(self, deltas: dict[int, int]) -> list[int]:
        """Apply per-content document count changes; returns the contents no document holds any more."""
        self.conn.executemany(
            "UPDATE contents SET documents = documents + ? WHERE id = ?", [(d, c) for c, d in deltas.items()]
        )
        orphans = []
        for chunk in chunks([c for c, d in deltas.items() if d < 0]):  # only a loss can leave a content unheld
            rows = self.conn.execute(
                f"SELECT id FROM contents WHERE documents <= 0 AND id IN ({marks(len(chunk))})", chunk
            )
            orphans.extend(r[0] for r in rows)
        return orphans

    def contents(self, content_ids: Iterable[int]) -> dict[int, ContentRow]:
        ids = list(content_ids)
        out: dict[int, ContentRow] = {}
        for chunk in chunks(ids):
            rows = self._q(
                f"SELECT {CONTENT_COLUMNS} FROM contents WHERE id IN ({marks(len(chunk))})", chunk
            ).fetchall()
            out.update(self._content_rows(rows))
        return out

    def _content_rows(self, rows: list[tuple]) -> dict[int, ContentRow]:
        """ContentRows of rows of CONTENT_COLUMNS, their checksums verified."""
        width = len(PART_NAMES)
        stored = {name: [r[i] for r in rows] for i, name in enumerate(PART_NAMES, 1)}
        for r, expected in zip(rows, checksums.of_columns(stored)):
            if r[width + 3] is not None and r[width + 3] != expected:
                raise self._damaged_content(r[0])
        try:
            parts = [part.read(stored[part.name]) for part in FINGERPRINT_PARTS]
        except ValueError:
            raise self._damaged_sketch() from None
        return {
            r[0]: ContentRow(id=r[0], cluster=r[width + 1], documents=r[width + 2],
                             **{name: column[n] for name, column in zip(PART_NAMES, parts)})
            for n, r in enumerate(rows)
        }

    def _unpacked(self, blobs: list[bytes]) -> list[np.ndarray]:
        """Stored sketches (sketchpack.py), each an array."""
        try:
            return sketchpack.unpack_each(blobs)
        except ValueError:
            raise self._damaged_sketch() from None

    def _damaged_sketch(self) -> DatabaseError:
        return DatabaseError(f"{self.path} is damaged (a stored sketch is not whole); run 'dedupdb check' for details")

    def _damaged_content(self, content_id: int) -> DatabaseError:
        return DatabaseError(
            f"{self.path} is damaged (the stored signatures of content {content_id} do not match their checksum); "
            "run 'dedupdb check' for details"
        )

    def _verified_sketches(self, rows: list[tuple]) -> None:
        """Raise for the first of rows (id, sketch, simhash, checksum) whose sketch and SimHash do not fit its
        checksum: a sketch read is one xxh3 call away from being trusted."""
        bad = checksums.first_bad_sketch(rows)
        if bad is not None:
            raise self._damaged_content(bad)

    def sketches(self, content_ids: Iterable[int]) -> dict[int, tuple[np.ndarray, int | None]]:
        """(bottom-k sketch, signed SimHash) of contents: all that verifying a candidate reads."""
        ids = list(content_ids)
        out: dict[int, tuple[np.ndarray, int | None]] = {}
        for chunk in chunks(ids):
            rows = self._q(
                f"SELECT id, sketch, simhash, checksum FROM contents WHERE id IN ({marks(len(chunk))})", chunk
            ).fetchall()
            self._verified_sketches(rows)
            out.update((r[0], (sketch, r[2])) for r, sketch in zip(rows, self._unpacked([r[1] for r in rows])))
        return out

    def sketch_columns(self, content_ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What sketches() gives, as columns for a batch: (ids, every sketch joined as uint32, each one's length,
        SimHash as unsigned 64-bit or 0, whether there is one), in the order read. One array for all the sketches,
        not one a content: verifying a batch onto a large store reads hundreds of thousands."""
        ids: list[int] = []
        blobs: list[bytes] = []
        simhashes: list[int | None] = []
        for chunk in chunks(content_ids):
            rows = self._q(
                f"SELECT id, sketch, simhash, checksum FROM contents WHERE id IN ({marks(len(chunk))})", chunk
            ).fetchall()
            self._verified_sketches(rows)
            for content_id, blob, simhash, _ in rows:
                ids.append(content_id)
                blobs.append(blob)
                simhashes.append(simhash)
        try:  # a damaged sketch is refused, not joined: it would shift every sketch after it
            values, lengths = sketchpack.unpack_joined(blobs)
        except ValueError:
            raise self._damaged_sketch() from None
        return (
            np.array(ids, np.int64),
            values,
            lengths,
            np.array([0 if v is None else v for v in simhashes], np.int64).view(np.uint64),
            np.array([v is not None for v in simhashes], bool),
        )

    def content_chars(self, content_ids: Iterable[int]) -> dict[int, int]:
        """Length in characters of each content's normalized text (for the longest/shortest keep rules)."""
        ids = list(content_ids)
        out: dict[int, int] = {}
        for chunk in chunks(ids):
            out.update(self._q(f"SELECT id, chars FROM contents WHERE id IN ({marks(len(chunk))})", chunk).fetchall())
        return out

    def delete_content(self, content_id: int) -> None:
        """Forget a content and its pairs (which name it without a foreign key: migration 0008)."""
        self.conn.execute("DELETE FROM pairs WHERE a = ?", (content_id,))
        self.conn.execute("DELETE FROM pairs WHERE b = ?", (content_id,))
        self.conn.execute("DELETE FROM contents WHERE id = ?", (content_id,))

    def all_content_ids(self) -> list[int]:
        return [r[0] for r in self._q("SELECT id FROM contents ORDER BY id")]

    def content_id_bound(self) -> int:
        """The highest content id (0 for none): as many as the store holds, or more where some were removed. An
        estimate of their number that reads one path of the table's tree, where a count (counts()) reads a whole
        index of the table (0.14-0.25 s at a million, before it is cached)."""
        return self._q("SELECT coalesce(max(id), 0) FROM contents").fetchone()[0]

    def holds_contents(self) -> bool:
        return self._q("SELECT 1 FROM contents LIMIT 1").fetchone() is not None
