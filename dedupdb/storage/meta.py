"""The meta and blobs tables: the settings a store was built with and its large values."""

from __future__ import annotations


class MetaTables:
    """The meta and blobs tables, as Store's methods (store.py): they run in its connection and transactions."""

    # --- meta and blobs ------------------------------------------------------

    def read_meta(self) -> dict[str, str]:
        return dict(self._q("SELECT key, value FROM meta").fetchall())

    def write_meta(self, values: dict[str, str]) -> None:
        self.conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )

    def forget_meta(self, keys: list[str], blobs: list[str] = ()) -> None:
        """Drop meta values and blobs a store no longer uses."""
        self.conn.executemany("DELETE FROM meta WHERE key = ?", [(k,) for k in keys])
        self.conn.executemany("DELETE FROM blobs WHERE name = ?", [(b,) for b in blobs])

    def read_blob(self, name: str) -> bytes | None:
        row = self._q("SELECT data FROM blobs WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def write_blob(self, name: str, data: bytes) -> None:
        self.conn.execute(
            "INSERT INTO blobs (name, data) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET data = excluded.data",
            (name, data),
        )
