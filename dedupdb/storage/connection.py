"""Connections to the SQLite file: opening for writing or reading, waiting on locks, and SQLite's errors
turned into DatabaseError with their cause named."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from dedupdb.errors import DatabaseError
from dedupdb.storage import schema as migrate

CHUNK_SIZE = 500  # bound on SQL variables per statement
PAGE_SIZE = 16384
# SQLite's page cache per connection. A page it misses comes from the system's file cache: 64 MiB took as long
# as 16 on 100,000 documents, and 48 MB more of an add's memory.
CACHE_KIB = 16 * 1024
CHECKPOINT_BYTES = 256 * 1024 * 1024


def chunks(items: list, size: int = CHUNK_SIZE) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def marks(count: int) -> str:
    return ",".join("?" * count)


























# --- errors ------------------------------------------------------------------
#
# Every statement of a store goes through GuardedConnection: an sqlite3 error raised by execute, executemany,
# executescript or while fetching rows becomes a DatabaseError carrying explain_error's one-line message. The error
# raised is also an instance of the sqlite3 class it replaces (a sqlite3.OperationalError stays one), so the
# rollback handlers that catch sqlite3 errors behave as before.

_TRANSLATED: dict[type, type] = {}


def translated_class(sqlite_class: type) -> type:
    cls = _TRANSLATED.get(sqlite_class)
    if cls is None:
        cls = type(f"Store{sqlite_class.__name__}", (DatabaseError, sqlite_class), {"__module__": __name__})
        _TRANSLATED[sqlite_class] = cls
    return cls


def translate_error(path: Path, exc: sqlite3.Error) -> DatabaseError:
    """A DatabaseError for an sqlite3 error (itself when it already is one); sqlite_message keeps SQLite's words."""
    if isinstance(exc, DatabaseError):
        return exc
    error = translated_class(type(exc))(explain_error(path, exc))
    error.sqlite_errorcode = getattr(exc, "sqlite_errorcode", None)
    error.sqlite_errorname = getattr(exc, "sqlite_errorname", None)
    error.sqlite_message = str(exc)
    return error


class GuardedCursor:
    """A cursor whose fetches raise DatabaseError instead of sqlite3 errors; anything else is the cursor's."""

    __slots__ = ("_cursor", "_path")

    def __init__(self, cursor: sqlite3.Cursor, path: Path) -> None:
        self._cursor = cursor
        self._path = path

    def fetchone(self):
        try:
            return self._cursor.fetchone()
        except sqlite3.Error as exc:
            raise translate_error(self._path, exc) from None

    def fetchmany(self, size: int | None = None) -> list:
        try:
            return self._cursor.fetchmany(self._cursor.arraysize if size is None else size)
        except sqlite3.Error as exc:
            raise translate_error(self._path, exc) from None

    def fetchall(self) -> list:
        try:
            return self._cursor.fetchall()
        except sqlite3.Error as exc:
            raise translate_error(self._path, exc) from None

    def __iter__(self) -> Iterator:
        try:
            yield from self._cursor
        except sqlite3.Error as exc:
            raise translate_error(self._path, exc) from None

    def __next__(self):
        try:
            return next(self._cursor)
        except sqlite3.Error as exc:
            raise translate_error(self._path, exc) from None

    def __getattr__(self, name: str):
        return getattr(self._cursor, name)


class GuardedConnection:
    """The store's connection: statements raise DatabaseError instead of sqlite3 errors; anything else
    (in_transaction, close, ...) is the wrapped connection's."""

    __slots__ = ("_conn", "_path")

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path

    def execute(self, sql: str, params=()) -> GuardedCursor:
        try:
            return GuardedCursor(self._conn.execute(sql, params), self._path)
        except sqlite3.Error as exc:
            raise translate_error(self._path, exc) from None

    def executemany(self, sql: str, rows) -> GuardedCursor:
        try:
            return GuardedCursor(self._conn.executemany(sql, rows), self._path)
        except sqlite3.Error as exc:
            raise translate_error(self._path, exc) from None

    def executescript(self, script: str) -> GuardedCursor:
        try:
            return GuardedCursor(self._conn.executescript(script), self._path)
        except sqlite3.Error as exc:
            raise translate_error(self._path, exc) from None

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


# --- opening: concurrent creators, read-only files -------------------------------------------------------

BUSY_SECONDS = 10.0  # how long a statement waits for another process's lock before saying it is locked


class CannotWrite(Exception):
    """Opening for writing failed because the file or its folder cannot be written after all."""


def not_yet_message(path: Path) -> str:
    return (
        f"no database at {path} yet (the file is empty, being created, or not dedupdb's); "
        "run 'dedupdb add PATH' (or 'dedupdb init') first"
    )


def readonly_message(path: Path) -> str:
    for suffix in ("-wal", "-shm"):
        sidecar = sidecar_path(path, suffix)
        if sidecar.exists() and not os.access(sidecar, os.W_OK):
            return (
                f"cannot write {path}: {sidecar.name} beside it is read-only (left by a process that could only "
                f"read it?); when no process is using the database, delete {path.name}-wal and {path.name}-shm"
            )
    return f"cannot write {path}: the database (or its folder) is read-only"


def sqlite_error_name(exc: BaseException) -> str:
    return getattr(exc, "sqlite_errorname", None) or ""


def is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    return "locked" in str(exc) or "busy" in str(exc)


def cannot_write(exc: sqlite3.Error) -> bool:
    name, message = sqlite_error_name(exc), str(exc)
    return (
        name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN"))
        or "readonly" in message
        or "unable to open database file" in message
    )


def sidecar_path(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def is_writable(path: Path) -> bool:
    """Whether this process may write the database: its file, and its folder (where SQLite makes the -wal and
    -shm files), or else those two files where they exist already. Run as root this is nearly always true:
    a failed write then tells instead (see connect_writable)."""
    if path.exists() and not os.access(path, os.W_OK):
        return False
    sidecars = [sidecar_path(path, s) for s in ("-wal", "-shm")]
    if any(p.exists() and not os.access(p, os.W_OK) for p in sidecars):
        return False
    if os.access(path.absolute().parent, os.W_OK | os.X_OK):
        return True
    return path.exists() and all(os.access(p, os.W_OK) for p in sidecars)


def retry_busy(conn: sqlite3.Connection, sql: str) -> list:
    """Run a statement that SQLite may refuse with SQLITE_BUSY without waiting (changing the journal mode
    does, while another process is creating the same database): again until the busy timeout has passed."""
    deadline = time.monotonic() + BUSY_SECONDS
    pause = 0.005
    while True:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _version_and_tables(conn: sqlite3.Connection) -> tuple[int, list[str]]:
    """The schema version and, at version 0, the first tables, read in one transaction: read one after the other,
    a second add creating the same new database could commit its first tables in between, and this one took them
    for another program's."""
    conn.execute("BEGIN")
    try:
        version = migrate.schema_version(conn)
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 5")]
    finally:
        conn.execute("ROLLBACK")  # it wrote nothing: ended, not committed
    return version, tables if version == 0 else []


def connect_writable(path: Path, create: bool) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_SECONDS, check_same_thread=False)
    except sqlite3.Error as exc:
        if cannot_write(exc):
            raise CannotWrite() from None
        raise DatabaseError(f"cannot open {path}: {exc}") from None
    try:
        migrations = migrate.available()
        # Read the version before anything writes: a newer database is left untouched.
        migrate.check_not_newer(conn, migrations, str(path))
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
        version, tables = _version_and_tables(conn)
        if version == 0:
            if not create:  # an empty file, or another program's database: not one to read, nor to take over
                raise DatabaseError(not_yet_message(path))
            if tables:  # another program's: its file is not made a store, nor switched to a write-ahead log
                raise DatabaseError(f"{path} holds another program's SQLite database (tables {', '.join(tables)}); "
                                    "dedupdb keeps its store in a file of its own: give another --db")
            # Set before the first table exists, and fixed after: larger pages make the index B-tree a level
            # shallower and hold a content row's signature blobs on one page.
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        retry_busy(conn, "PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        # Index rows are written in sorted runs (runs.py), so no write lands at a random place in a large B-tree:
        # a modest page cache holds what an ingest touches (the newest contents, documents and pairs pages).
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        conn.execute("PRAGMA temp_store = MEMORY")
        # Checkpointing every 256 MB of WAL instead of every 4 MB copies a page that changes in many batches into
        # the file once (64 MB was 14% slower on 100,000 documents, measured when index rows were one B-tree and
        # not measured again since they became runs). The WAL file goes when the last connection closes.
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_BYTES // page_size}")
        migrate.apply(conn, migrations)
    except sqlite3.DatabaseError as exc:
        conn.close()
        if cannot_write(exc):
            raise CannotWrite() from None
        raise DatabaseError(explain_error(path, exc)) from None
    except BaseException:
        conn.close()
        raise
    return conn


def open_reader(uri: str, options: str) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{uri}?{options}", uri=True, isolation_level=None, timeout=BUSY_SECONDS,
                           check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a WAL database opens its -shm here
    except BaseException:
        conn.close()
        raise
    return conn


def checkpoint_passive(path: Path) -> None:
    """Copy the pages the write-ahead log holds committed into the store's file, from a connection of its own: a
    PASSIVE checkpoint, which waits for no reader or writer (a writer goes on adding to the log meanwhile). Where
    it cannot be made, nothing: closing the last connection checkpoints what this did not. The file is opened to
    read and write only, never made: a store removed meanwhile is not made again, empty, here."""
    try:
        conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=rw", uri=True, isolation_level=None, timeout=0,
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()
    except (sqlite3.Error, OSError):
        pass


def connect_readonly(path: Path, create: bool, writable: bool) -> sqlite3.Connection:
    """A connection that only reads. Reading a WAL database makes its -wal and -shm files where they are
    missing (or fails, in a read-only folder), and such files left by a reader stop the database's owner from
    writing it again. So a database this process cannot write, and that no process is writing (no -wal or
    -journal file beside it), is read as immutable: without those files. Otherwise (opened read-only by
    choice, or in use) as a reader beside its writers."""
    in_use = any(sidecar_path(path, s).exists() for s in ("-wal", "-journal"))
    options = "mode=ro" if in_use or writable else "mode=ro&immutable=1"
    try:
        conn = open_reader(path.absolute().as_uri(), options)
    except sqlite3.DatabaseError as exc:
        if cannot_write(exc):
            raise DatabaseError(
                f"cannot read {path}: SQLite needs {path.name}-shm beside it to read it while it is in use "
                f"(or after a crash), and cannot make it there ({exc})"
            ) from None
        raise DatabaseError(explain_error(path, exc)) from None
    try:
        migrations = migrate.available()
        migrate.check_not_newer(conn, migrations, str(path))
        version, latest = migrate.schema_version(conn), len(migrations)
        if version == 0:
            raise DatabaseError(readonly_message(path) if create else not_yet_message(path))
        if version < latest:
            raise DatabaseError(
                f"{readonly_message(path)}, and this dedupdb must upgrade it (schema {version} to {latest}) to read it"
            )
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        conn.execute("PRAGMA temp_store = MEMORY")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise DatabaseError(explain_error(path, exc)) from None
    except BaseException:
        conn.close()
        raise
    return conn


def integrity_messages(conn, limit: int) -> list[str]:
    rows = conn.execute(f"PRAGMA integrity_check({int(limit)})").fetchall()
    lines = [line for (text,) in rows for line in str(text).splitlines() if line and not line.startswith("*** in database")]
    return [] if lines == ["ok"] else lines


def explain_error(path: Path, exc: sqlite3.Error) -> str:
    if isinstance(exc, DatabaseError):  # translated already (see GuardedConnection)
        return str(exc)
    message = str(exc)
    if "locked" in message or "busy" in message:
        return f"{path} is locked by another process; try again when it is done"
    if "malformed" in message or "corrupt" in message:
        return f"{path} is damaged ({message}); run 'dedupdb check' for details"
    if "database or disk is full" in message:
        return (
            f"{path}: the disk is full ({message}); nothing stored before this command was lost: "
            "free some space and run it again"
        )
    if "not a database" in message:
        return f"{path} is not a dedupdb database or is corrupt ({message})"
    if "readonly" in message or "unable to open" in message:
        return f"cannot write {path} ({message})"
    return f"{path}: {message}"
