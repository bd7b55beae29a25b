"""The files and documents tables: what was read from where, and forgetting it."""

from __future__ import annotations

import time

from dedupdb.storage.connection import chunks, marks
from dedupdb.storage.rows import FileRow, HitDocument


class FileTables:
    """The files and documents tables, as Store's methods (store.py): they run in its connection and transactions."""

    # --- files ---------------------------------------------------------------

    def file_by_path(self, path: str) -> FileRow | None:
        row = self._q(
            "SELECT id, path, size, mtime_ns, digest, status, kind, records, options FROM files WHERE path = ?", (path,)
        ).fetchone()
        return FileRow(*row) if row else None

    def files_under(self, root: str) -> list[FileRow]:
        """Files recorded at root or below it (a path-prefix range scan on the unique index)."""
        prefix = root.rstrip("/") + "/"
        rows = self._q(
            "SELECT id, path, size, mtime_ns, digest, status, kind, records, options FROM files "
            "WHERE path = ? OR (path >= ? AND path < ?)",
            (root, prefix, prefix[:-1] + "0"),
        ).fetchall()
        return [FileRow(*r) for r in rows]

    def save_files(self, rows: list[tuple]) -> dict[str, int]:
        """Insert or update files from (path, size, mtime_ns, digest, status, kind, records, options);
        returns path -> id."""
        now = time.time()
        self.conn.executemany(
            "INSERT INTO files (path, size, mtime_ns, digest, status, kind, records, options, indexed_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, "
            "digest = excluded.digest, status = excluded.status, kind = excluded.kind, "
            "records = excluded.records, options = excluded.options, indexed_at = excluded.indexed_at",
            [(*row, now) for row in rows],
        )
        ids: dict[str, int] = {}
        paths = [row[0] for row in rows]
        for chunk in chunks(paths):
            ids.update(self.conn.execute(f"SELECT path, id FROM files WHERE path IN ({marks(len(chunk))})", chunk))
        return ids

    def all_files(self) -> list[FileRow]:
        rows = self._q(
            "SELECT id, path, size, mtime_ns, digest, status, kind, records, options FROM files ORDER BY id"
        ).fetchall()
        return [FileRow(*r) for r in rows]

    def forget_signatures(self) -> None:
        """Drop every document, content, index row and pair, and make every file read as changed (size 0, no
        digest), so the next add of it reads it again from its first byte."""
        self._index.clear()
        self._containment.clear()
        for table in ("pairs", "documents", "contents"):
            self.conn.execute(f"DELETE FROM {table}")
        self.conn.execute("UPDATE files SET size = 0, mtime_ns = 0, digest = '', records = 0")

    def indexed_files(self) -> list[FileRow]:
        rows = self._q(
            "SELECT id, path, size, mtime_ns, digest, status, kind, records, options FROM files "
            "WHERE status = 'indexed' ORDER BY id"
        ).fetchall()
        return [FileRow(*r) for r in rows]

    def empty_files(self) -> list[FileRow]:
        rows = self._q(
            "SELECT id, path, size, mtime_ns, digest, status, kind, records, options FROM files WHERE status = 'empty'"
        ).fetchall()
        return [FileRow(*r) for r in rows]

    def keys_of_file(self, file_id: int) -> set[str]:
        return {r[0] for r in self._q("SELECT key FROM documents WHERE file_id = ?", (file_id,))}

    def touch_file(self, file_id: int, size: int, mtime_ns: int) -> None:
        self.conn.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, file_id))
        self.conn.execute("UPDATE documents SET mtime_ns = ? WHERE file_id = ?", (mtime_ns, file_id))

    def set_file_status(self, file_id: int, status: str) -> None:
        self.conn.execute("UPDATE files SET status = ? WHERE id = ?", (status, file_id))

    # --- documents -----------------------------------------------------------

    def documents_of_file(self, file_id: int) -> list[tuple[int, int]]:
        """(document id, content id) of every document a file holds."""
        return self._q("SELECT id, content_id FROM documents WHERE file_id = ?", (file_id,)).fetchall()

    def delete_documents(self, document_ids: list[int]) -> None:
        for chunk in chunks(document_ids):
            self.conn.execute(f"DELETE FROM documents WHERE id IN ({marks(len(chunk))})", chunk)

    def insert_documents(self, rows: list[tuple]) -> None:
        """rows: (key, file_id, record, content_id, bytes, mtime_ns, snippet)."""
        self.conn.executemany(
            "INSERT INTO documents (key, file_id, record, content_id, bytes, mtime_ns, snippet) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def existing_keys(self, keys: list[str]) -> set[str]:
        found: set[str] = set()
        for chunk in chunks(keys):
            found.update(r[0] for r in self._q(f"SELECT key FROM documents WHERE key IN ({marks(len(chunk))})", chunk))
        return found

    _DOCUMENT_SELECT = (
        "SELECT d.id, d.key, f.path, d.record, d.content_id, d.bytes, d.mtime_ns, d.snippet, c.cluster "
        "FROM documents d JOIN files f ON f.id = d.file_id JOIN contents c ON c.id = d.content_id "
    )

    def documents_of_contents(self, content_ids: list[int]) -> list[HitDocument]:
        """The documents holding these contents, by key, as a query's hits show them: read without their contents'
        rows (a join to each for its cluster took 40% of the time for 20,000 contents of a million)."""
        out = []
        for chunk in chunks(content_ids):
            out.extend(HitDocument(*r) for r in self._q(
                "SELECT d.key, f.path, d.record, d.content_id, d.bytes, d.snippet FROM documents d "
                f"JOIN files f ON f.id = d.file_id WHERE d.content_id IN ({marks(len(chunk))}) ORDER BY d.key", chunk
            ).fetchall())
        return out

    # --- forgetting -----------------------------------------------------------

    def documents_by_keys(self, keys: list[str]) -> list[tuple[int, int, str]]:
        """(document id, content id, key) of the documents with these keys."""
        out = []
        for chunk in chunks(keys):
            out += self._q(
                f"SELECT id, content_id, key FROM documents WHERE key IN ({marks(len(chunk))})", chunk
            ).fetchall()
        return out

    def delete_files(self, file_ids: list[int]) -> None:
        for chunk in chunks(file_ids):
            self.conn.execute(f"DELETE FROM files WHERE id IN ({marks(len(chunk))})", chunk)

    def missing_files(self) -> list[FileRow]:
        rows = self._q(
            "SELECT id, path, size, mtime_ns, digest, status, kind, records, options FROM files WHERE status = 'missing'"
        ).fetchall()
        return [FileRow(*r) for r in rows]
