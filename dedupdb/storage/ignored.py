"""Pairs of documents declared not duplicates of each other."""

from __future__ import annotations

import time


class IgnoredPairs:
    """The ignored_pairs table, as Store's methods (store.py): they run in its connection and transactions."""

    def ignore_pairs(self, pairs: list[tuple[str, str]]) -> int:
        """Remember each (a, b) of document keys, a < b; returns how many were not remembered already."""
        now = time.time()
        before = self.conn.total_changes
        self.conn.executemany(
            "INSERT OR IGNORE INTO ignored_pairs (a, b, created_at) VALUES (?, ?, ?)", [(a, b, now) for a, b in pairs]
        )
        return self.conn.total_changes - before

    def unignore_pairs(self, pairs: list[tuple[str, str]]) -> int:
        """Forget each (a, b), a < b; returns how many were remembered."""
        before = self.conn.total_changes
        self.conn.executemany("DELETE FROM ignored_pairs WHERE a = ? AND b = ?", pairs)
        return self.conn.total_changes - before

    def ignored_pairs(self) -> list[tuple[str, str, float]]:
        """(a, b, created_at) of every pair declared not duplicates, by a then b."""
        return self._q("SELECT a, b, created_at FROM ignored_pairs ORDER BY a, b").fetchall()

    def ignored_content_pairs(self) -> set[tuple[int, int]]:
        """The pairs of texts (content ids, a < b) that the ignored pairs of documents in the store hold: two
        different texts each, as copies of one text cannot be told apart."""
        rows = self._q(
            "SELECT da.content_id, db.content_id FROM ignored_pairs i "
            "JOIN documents da ON da.key = i.a JOIN documents db ON db.key = i.b "
            "WHERE da.content_id != db.content_id"
        )
        return {(min(a, b), max(a, b)) for a, b in rows}
