"""Statistics and the checks the store can make of itself."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from dedupdb.storage import checksums
from dedupdb.storage.connection import integrity_messages
from dedupdb.storage.rows import CONTENT_COLUMNS, ContentRow


class IntegrityChecks:
    """Statistics and the store's checks of itself, as Store's methods (store.py)."""

    # --- statistics ----------------------------------------------------------

    def counts(self) -> dict[str, int]:
        q = lambda sql: self._q(sql).fetchone()[0]  # noqa: E731
        return {
            "documents": q("SELECT count(*) FROM documents"),
            "contents": q("SELECT count(*) FROM contents"),
            "files": q("SELECT count(*) FROM files WHERE status != 'missing'"),
            "missing_files": q("SELECT count(*) FROM files WHERE status = 'missing'"),
            "pairs": q("SELECT count(*) FROM pairs"),
        }

    def size_bytes(self) -> int:
        page_count = self._q("PRAGMA page_count").fetchone()[0]
        page_size = self._q("PRAGMA page_size").fetchone()[0]
        return page_count * page_size

    # --- checking ------------------------------------------------------------
    #
    # What 'dedupdb check' reads (check.py holds the logic). Every scan streams: contents by id range, index
    # rows and pairs in chunks from one cursor.

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every statement inside sees the same committed state, whatever other
        connections commit meanwhile."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")

    def integrity_messages(self, limit: int) -> list[str]:
        """SQLite's PRAGMA integrity_check: at most limit messages, none when the file is sound."""
        return integrity_messages(self.conn, limit)

    @staticmethod
    def integrity_at(path: Path, limit: int) -> list[str]:
        """integrity_messages() of the file at path, opened read-only and without a store: for a database too
        damaged to open. A file SQLite cannot read at all gives its error as the one message."""
        try:
            conn = sqlite3.connect(Path(path).expanduser().resolve().as_uri() + "?mode=ro", uri=True)
        except sqlite3.Error as exc:
            return [str(exc)]
        try:
            return integrity_messages(conn, limit)
        except sqlite3.Error as exc:
            return [str(exc)]
        finally:
            conn.close()

    def check_totals(self) -> tuple[int, int, int, int]:
        """(documents, contents, pairs, largest content id or 0)."""
        return self._q(
            "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM contents), (SELECT count(*) FROM pairs), "
            "(SELECT coalesce(max(id), 0) FROM contents)"
        ).fetchone()

    def content_batches(self, size: int = 2000,
                        leave_out: frozenset[int] = frozenset()) -> Iterator[dict[int, ContentRow]]:
        """Every content but those left out (damaged ones, which reading would refuse), size of them at a time in
        id order (a range probe each)."""
        last = -1
        while True:
            rows = self._q(
                f"SELECT {CONTENT_COLUMNS} FROM contents WHERE id > ? ORDER BY id LIMIT ?", (last, size)
            ).fetchall()
            if not rows:
                return
            yield self._content_rows([r for r in rows if r[0] not in leave_out])
            last = rows[-1][0]

    def signature_batches(self, size: int = 2000) -> Iterator[list[tuple]]:
        """Every content's stored signature columns as stored, (id, shingles, minhash, sketch, simhash,
        fingerprints, checksum), size of them at a time in id order: what check verifies them on."""
        last = -1
        while True:
            rows = self._q(
                "SELECT id, shingles, minhash, sketch, simhash, fingerprints, checksum FROM contents "
                "WHERE id > ? ORDER BY id LIMIT ?",
                (last, size),
            ).fetchall()
            if not rows:
                return
            yield rows
            last = rows[-1][0]

    def fill_checksums(self) -> int:
        """Give every content stored before checksums existed its checksum, of its columns as they are (the
        caller has read them whole); returns how many."""
        self._raw.create_function("content_checksum", 5, checksums.checksum, deterministic=True)
        return self.conn.execute(
            "UPDATE contents SET checksum = content_checksum(shingles, minhash, sketch, simhash, fingerprints) "
            "WHERE checksum IS NULL"
        ).rowcount

    def count_without_checksums(self) -> int:
        return self._q("SELECT count(*) FROM contents WHERE checksum IS NULL").fetchone()[0]

    def index_entry_chunks(self) -> Iterator[np.ndarray]:
        """Every stored index row ((key << 30) | content id, int64), a few blocks at a time."""
        return self._index.chunks()

    def containment_entry_chunks(self) -> Iterator[np.ndarray]:
        """index_entry_chunks() of the containment rows."""
        return self._containment.chunks()

    def stored_containment_entries(self, entries: np.ndarray) -> np.ndarray:
        """stored_entries() of the containment rows."""
        return self._containment.holds(entries)

    def run_faults(self) -> list[str]:
        """What is wrong with the runs of index and containment rows themselves (runs.py), and blocks of no run."""
        faults = [f"index {line}" for line in self._index.faults()]
        faults += [f"containment {line}" for line in self._containment.faults()]
        strays = self._q("SELECT count(*) FROM run_blocks WHERE run NOT IN (SELECT id FROM runs)").fetchone()[0]
        stray_filters = self._q("SELECT count(*) FROM run_filters WHERE run NOT IN (SELECT id FROM runs)").fetchone()[0]
        return (faults + ([f"{strays} blocks belong to no run"] if strays else [])
                + ([f"{stray_filters} kept filters belong to no run"] if stray_filters else []))

    def stored_entries(self, entries: np.ndarray) -> np.ndarray:
        """Those of these index rows the store holds."""
        return self._index.holds(entries)

    def document_count_mismatches(self) -> Iterator[tuple[int, int, int]]:
        """(content id, its documents column, documents pointing at it) of every content where the two differ
        or no document points at it."""
        yield from self._q(
            "SELECT id, documents, actual FROM (SELECT c.id, c.documents, "
            "(SELECT count(*) FROM documents d WHERE d.content_id = c.id) AS actual FROM contents c) "
            "WHERE documents != actual OR actual = 0"
        )

    def dangling_documents(self) -> Iterator[tuple[int, str, int, int, bool, bool]]:
        """(id, key, content id, file id, content missing, file missing) of documents pointing at nothing."""
        yield from self._q(
            "SELECT d.id, d.key, d.content_id, d.file_id, c.id IS NULL, f.id IS NULL FROM documents d "
            "LEFT JOIN contents c ON c.id = d.content_id LEFT JOIN files f ON f.id = d.file_id "
            "WHERE c.id IS NULL OR f.id IS NULL"
        )

    def unreadable_documents(self) -> Iterator[tuple[int, str]]:
        """(id, column) of the documents whose key, record id or snippet is not text (not valid UTF-8, or not a
        string at all): bytes damaged in a row that SQLite's own check, which reads pages and not values, passes."""
        columns = ("key", "record", "snippet")
        for row in self._q(f"SELECT id, {', '.join(f'CAST({c} AS BLOB), typeof({c})' for c in columns)} FROM documents"):
            for name, (value, kind) in zip(columns, zip(row[1::2], row[2::2])):
                if kind == "null" and name == "record":
                    continue
                if kind != "text":
                    yield row[0], name
                    break
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    yield row[0], name
                    break

    def bad_pairs(self) -> Iterator[tuple[int, int, object, bool, bool]]:
        """(a, b, jaccard, a exists, b exists) of pairs out of order, with a missing side, or a Jaccard
        outside [0, 1]."""
        yield from self._q(
            "SELECT p.a, p.b, p.jaccard, ca.id IS NOT NULL, cb.id IS NOT NULL FROM pairs p "
            "LEFT JOIN contents ca ON ca.id = p.a LEFT JOIN contents cb ON cb.id = p.b "
            "WHERE NOT (p.a < p.b) OR p.jaccard IS NULL OR typeof(p.jaccard) NOT IN ('real', 'integer') "
            "OR NOT (p.jaccard BETWEEN 0 AND 1) OR ca.id IS NULL OR cb.id IS NULL"
        )

    def pair_chunks(self, size: int = 1 << 18) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(a, b) arrays of every stored pair, size of them at a time: one scan."""
        cursor = self._q("SELECT a, b FROM pairs")
        while rows := cursor.fetchmany(size):
            pairs = np.array(rows, dtype=np.int64).reshape(-1, 2)
            yield pairs[:, 0], pairs[:, 1]

    def cluster_label_chunks(self, size: int = 1 << 18) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(content id, cluster) arrays of every content, size of them at a time (the cluster index covers
        both columns, so the wide content rows are not read)."""
        cursor = self._q("SELECT id, cluster FROM contents")
        while rows := cursor.fetchmany(size):
            labels = np.array(rows, dtype=np.int64).reshape(-1, 2)
            yield labels[:, 0], labels[:, 1]
