"""Applies migrations/NNNN_name.sql in order, each in its own transaction, tracked by PRAGMA user_version."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from dedupdb.errors import DatabaseError

_NAME = re.compile(r"^(\d{4})_[\w-]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    path: Path


def migrations_dir() -> Path:
    """Inside the wheel the SQL files ship as dedupdb/migrations; an editable install reads the source tree."""
    packaged = Path(__file__).parent.parent / "migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


def available(directory: Path | None = None) -> list[Migration]:
    directory = directory or migrations_dir()
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if match:
            found.append(Migration(int(match.group(1)), path))
    versions = [m.version for m in found]
    if versions != list(range(1, len(versions) + 1)):
        raise DatabaseError(f"migrations in {directory} are not numbered 0001, 0002, ... without gaps")
    return found


def schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def check_not_newer(conn: sqlite3.Connection, migrations: list[Migration], where: str) -> None:
    current, latest = schema_version(conn), len(migrations)
    if current > latest:
        raise DatabaseError(
            f"{where} has schema version {current}, newer than this dedupdb understands ({latest}); "
            "upgrade dedupdb to use it"
        )


def apply(conn: sqlite3.Connection, migrations: list[Migration]) -> int:
    """Bring the schema up to date; returns the number of migrations applied (by this connection).

    Each migration runs in its own transaction, begun with the write lock (BEGIN IMMEDIATE, which waits out
    the busy timeout for another writer): PRAGMA user_version is read again under the lock, so of two
    processes opening a new or older database at once, one migrates and the other finds it done. The script
    runs statement by statement inside that transaction: executescript would commit it first, dropping the lock.
    """
    conn.create_function("low_halves", 1, _low_halves, deterministic=True)
    applied = 0
    for migration in migrations:
        if migration.version <= schema_version(conn):
            continue
        script = migration.path.read_text("utf-8")
        conn.execute("BEGIN IMMEDIATE")  # an error here (locked) is the caller's to explain
        try:
            if migration.version <= schema_version(conn):  # another process applied it meanwhile
                conn.execute("COMMIT")
                continue
            for statement in statements(script):
                if not _adds_present_column(conn, statement):
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {migration.version}")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if "database or disk is full" in str(exc):
                raise  # not the migration's fault: the caller names the file and the full disk
            raise DatabaseError(f"migration {migration.path.name} failed: {exc}") from None
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied += 1
    return applied


_ADD_COLUMN = re.compile(r"^(?:\s*--[^\n]*\n)*\s*ALTER\s+TABLE\s+(\w+)\s+ADD\s+(?:COLUMN\s+)?(\w+)", re.IGNORECASE)


def _adds_present_column(conn: sqlite3.Connection, statement: str) -> bool:
    """Whether a statement adds a column the table has already: a migration run again over a store whose
    version was set back (by hand, or by a test) finds it there, and SQLite has no ADD COLUMN IF NOT EXISTS."""
    match = _ADD_COLUMN.match(statement)
    if not match:
        return False
    table, column = match.groups()
    return any(row[1].lower() == column.lower() for row in conn.execute(f"PRAGMA table_info({table})"))


def _low_halves(blob: bytes | None) -> bytes | None:
    """The low 16 bits of each little-endian uint32 of a blob, little-endian (migration 0007)."""
    if blob is None:
        return None
    import numpy as np  # only when a store is upgraded: opening one stays light

    return np.frombuffer(blob, "<u4").astype("<u2").tobytes()


def statements(script: str) -> list[str]:
    """The SQL statements of a script, each with its semicolon: a statement ends at a semicolon after which the
    text so far is complete (sqlite3.complete_statement knows strings, comments and trigger bodies)."""
    out: list[str] = []
    start = 0
    for end, char in enumerate(script):
        if char == ";" and sqlite3.complete_statement(script[start : end + 1]):
            out.append(script[start : end + 1])
            start = end + 1
    rest = script[start:]
    if rest.strip():
        out.append(rest)  # a last statement without its semicolon (or only comments: executing them does nothing)
    return [s for s in out if s.strip()]
