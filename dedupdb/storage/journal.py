"""The cleanup journal: batches and their entries."""

from __future__ import annotations

import time


class JournalTables:
    """The cleanup journal's tables, as Store's methods (store.py): they run in its connection and transactions."""

    # --- journal ---------------------------------------------------------------

    def create_batch(self, action: str, target: str | None, entries: list[tuple[str, str | None, int, int, str]]) -> int:
        """A journal batch with its entries (source, destination, size, mtime_ns, digest), all 'planned'."""
        cursor = self.conn.execute(
            "INSERT INTO journal_batches (created_at, action, target) VALUES (?, ?, ?)", (time.time(), action, target)
        )
        batch_id = cursor.lastrowid
        self.conn.executemany(
            "INSERT INTO journal_entries (batch_id, source, destination, size, mtime_ns, digest, status) "
            "VALUES (?, ?, ?, ?, ?, ?, 'planned')",
            [(batch_id, *entry) for entry in entries],
        )
        return batch_id

    def journal_entries(self, batch_id: int) -> list[tuple]:
        """(id, source, destination, size, mtime_ns, digest, status, message) in the order they were planned."""
        return self._q(
            "SELECT id, source, destination, size, mtime_ns, digest, status, message FROM journal_entries "
            "WHERE batch_id = ? ORDER BY id",
            (batch_id,),
        ).fetchall()

    def set_entry_status(self, entry_id: int, status: str, message: str | None = None) -> None:
        self.conn.execute("UPDATE journal_entries SET status = ?, message = ? WHERE id = ?", (status, message, entry_id))

    def finish_entries(self, rows: list[tuple[str, str | None, str | None, int]]) -> None:
        """Mark journal entries from (status, message, destination or None to keep it, entry id)."""
        self.conn.executemany(
            "UPDATE journal_entries SET status = ?, message = ?, destination = coalesce(?, destination) WHERE id = ?",
            rows,
        )

    def journal_batches(self) -> list[tuple]:
        """(id, created_at, action, target, undone_at, {status: count}) newest first."""
        batches = self._q(
            "SELECT id, created_at, action, target, undone_at FROM journal_batches ORDER BY id DESC"
        ).fetchall()
        counts: dict[int, dict[str, int]] = {}
        for batch_id, status, count in self._q(
            "SELECT batch_id, status, count(*) FROM journal_entries GROUP BY batch_id, status"
        ):
            counts.setdefault(batch_id, {})[status] = count
        return [(*b, counts.get(b[0], {})) for b in batches]

    def batch(self, batch_id: int) -> tuple | None:
        return self._q(
            "SELECT id, created_at, action, target, undone_at FROM journal_batches WHERE id = ?", (batch_id,)
        ).fetchone()

    def mark_batch_undone(self, batch_id: int) -> None:
        self.conn.execute("UPDATE journal_batches SET undone_at = ? WHERE id = ?", (time.time(), batch_id))
