"""The only module that speaks SQL: one SQLite file holds files, documents, contents, index rows and pairs."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dedupdb.storage import checksums, schema as migrate, sketchpack
from dedupdb.errors import DatabaseError
from dedupdb.text.hashing import distinct, distinct_counts, distinct_of_sorted
from dedupdb.storage.entries import (
    CONTAINMENT_KEY_BITS,
    CONTENT_ID_BITS,
    CONTENT_ID_MASK,
    INDEX_KEY_BITS,
    packed,
)
from dedupdb.storage.runs import Runs

_CHUNK = 500  # bound on SQL variables per statement
PAGE_SIZE = 16384
# SQLite's page cache per connection. A page it misses comes from the system's file cache: 64 MiB took as long
# as 16 on 100,000 documents, and 48 MB more of an add's memory.
CACHE_KIB = 16 * 1024
_CHECKPOINT_BYTES = 256 * 1024 * 1024


def _chunks(items: list, size: int = _CHUNK) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _marks(count: int) -> str:
    return ",".join("?" * count)


@dataclass(frozen=True)
class FileRow:
    id: int
    path: str
    size: int
    mtime_ns: int
    digest: str
    status: str
    kind: str
    records: int
    options: str | None


@dataclass(frozen=True)
class ContentRow:
    id: int
    chars: int
    shingles: int
    minhash: np.ndarray   # uint16, the low bits of each value (fingerprint.py); empty when the sketch gives it
    sketch: np.ndarray
    simhash: int | None
    cluster: int
    documents: int
    fingerprints: np.ndarray | None = None  # winnowed (containment.py); None when stored before they existed


@dataclass(frozen=True)
class DocumentRow:
    id: int
    key: str
    path: str
    record: str | None
    content_id: int
    bytes: int
    mtime_ns: int
    snippet: str
    cluster: int


INDEX_FAMILY, CONTAINMENT_FAMILY = 0, 1  # the two families of runs (runs.py)


def _array(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<u4").astype(np.uint32)


def _blob(values: np.ndarray) -> bytes:
    return values.astype("<u4", copy=False).tobytes()


def _signature(blob: bytes) -> np.ndarray:
    """A stored MinHash signature; empty when it follows from the sketch (see _kept_signature)."""
    return np.frombuffer(blob, dtype="<u2").astype(np.uint16)


def _kept_signature(fp) -> bytes:
    """What a content keeps of its MinHash signature: nothing when its sketch holds every one of its shingle
    hashes (fewer than sketch_size of them, as almost every text has), since the signature is the MinHash of
    exactly those and is computed again when needed (index.py); half a kilobyte a text otherwise."""
    if 0 < fp.shingles == len(fp.sketch):
        return b""
    return _signature_blob(fp.minhash)


def _signature_blob(values: np.ndarray) -> bytes:
    return values.astype("<u2").tobytes()


# The columns ContentRow is read from (Store._content_rows), the checksum last.
_CONTENT_COLUMNS = "id, chars, shingles, minhash, sketch, simhash, cluster, documents, fingerprints, checksum"


def _optional_array(blob: bytes | None) -> np.ndarray | None:
    return None if blob is None else _array(blob)


def _optional_blob(values: np.ndarray | None) -> bytes | None:
    return None if values is None else _blob(values)


# --- errors ------------------------------------------------------------------
#
# Every statement of a store goes through _GuardedConnection: an sqlite3 error raised by execute, executemany,
# executescript or while fetching rows becomes a DatabaseError carrying _explain's one-line message. The error
# raised is also an instance of the sqlite3 class it replaces (a sqlite3.OperationalError stays one), so the
# rollback handlers that catch sqlite3 errors behave as before.

_TRANSLATED: dict[type, type] = {}


def _translated_class(sqlite_class: type) -> type:
    cls = _TRANSLATED.get(sqlite_class)
    if cls is None:
        cls = type(f"Store{sqlite_class.__name__}", (DatabaseError, sqlite_class), {"__module__": __name__})
        _TRANSLATED[sqlite_class] = cls
    return cls


def _translate(path: Path, exc: sqlite3.Error) -> DatabaseError:
    """A DatabaseError for an sqlite3 error (itself when it already is one); sqlite_message keeps SQLite's words."""
    if isinstance(exc, DatabaseError):
        return exc
    error = _translated_class(type(exc))(_explain(path, exc))
    error.sqlite_errorcode = getattr(exc, "sqlite_errorcode", None)
    error.sqlite_errorname = getattr(exc, "sqlite_errorname", None)
    error.sqlite_message = str(exc)
    return error


class _GuardedCursor:
    """A cursor whose fetches raise DatabaseError instead of sqlite3 errors; anything else is the cursor's."""

    __slots__ = ("_cursor", "_path")

    def __init__(self, cursor: sqlite3.Cursor, path: Path) -> None:
        self._cursor = cursor
        self._path = path

    def fetchone(self):
        try:
            return self._cursor.fetchone()
        except sqlite3.Error as exc:
            raise _translate(self._path, exc) from None

    def fetchmany(self, size: int | None = None) -> list:
        try:
            return self._cursor.fetchmany(self._cursor.arraysize if size is None else size)
        except sqlite3.Error as exc:
            raise _translate(self._path, exc) from None

    def fetchall(self) -> list:
        try:
            return self._cursor.fetchall()
        except sqlite3.Error as exc:
            raise _translate(self._path, exc) from None

    def __iter__(self) -> Iterator:
        try:
            yield from self._cursor
        except sqlite3.Error as exc:
            raise _translate(self._path, exc) from None

    def __next__(self):
        try:
            return next(self._cursor)
        except sqlite3.Error as exc:
            raise _translate(self._path, exc) from None

    def __getattr__(self, name: str):
        return getattr(self._cursor, name)


class _GuardedConnection:
    """The store's connection: statements raise DatabaseError instead of sqlite3 errors; anything else
    (in_transaction, close, ...) is the wrapped connection's."""

    __slots__ = ("_conn", "_path")

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path

    def execute(self, sql: str, params=()) -> _GuardedCursor:
        try:
            return _GuardedCursor(self._conn.execute(sql, params), self._path)
        except sqlite3.Error as exc:
            raise _translate(self._path, exc) from None

    def executemany(self, sql: str, rows) -> _GuardedCursor:
        try:
            return _GuardedCursor(self._conn.executemany(sql, rows), self._path)
        except sqlite3.Error as exc:
            raise _translate(self._path, exc) from None

    def executescript(self, script: str) -> _GuardedCursor:
        try:
            return _GuardedCursor(self._conn.executescript(script), self._path)
        except sqlite3.Error as exc:
            raise _translate(self._path, exc) from None

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


# --- opening: concurrent creators, read-only files -------------------------------------------------------

_BUSY_SECONDS = 10.0  # how long a statement waits for another process's lock before saying it is locked


class _CannotWrite(Exception):
    """Opening for writing failed because the file or its folder cannot be written after all."""


def _not_yet_message(path: Path) -> str:
    return (
        f"no database at {path} yet (the file is empty, being created, or not dedupdb's); "
        "run 'dedupdb add PATH' (or 'dedupdb init') first"
    )


def _readonly_message(path: Path) -> str:
    for suffix in ("-wal", "-shm"):
        sidecar = _sidecar(path, suffix)
        if sidecar.exists() and not os.access(sidecar, os.W_OK):
            return (
                f"cannot write {path}: {sidecar.name} beside it is read-only (left by a process that could only "
                f"read it?); when no process is using the database, delete {path.name}-wal and {path.name}-shm"
            )
    return f"cannot write {path}: the database (or its folder) is read-only"


def _sqlite_error_name(exc: BaseException) -> str:
    return getattr(exc, "sqlite_errorname", None) or ""


def _busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    return "locked" in str(exc) or "busy" in str(exc)


def _cannot_write(exc: sqlite3.Error) -> bool:
    name, message = _sqlite_error_name(exc), str(exc)
    return (
        name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN"))
        or "readonly" in message
        or "unable to open database file" in message
    )


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _writable(path: Path) -> bool:
    """Whether this process may write the database: its file, and its folder (where SQLite makes the -wal and
    -shm files), or else those two files where they exist already. Run as root this is nearly always true:
    a failed write then tells instead (see _connect_writable)."""
    if path.exists() and not os.access(path, os.W_OK):
        return False
    sidecars = [_sidecar(path, s) for s in ("-wal", "-shm")]
    if any(p.exists() and not os.access(p, os.W_OK) for p in sidecars):
        return False
    if os.access(path.absolute().parent, os.W_OK | os.X_OK):
        return True
    return path.exists() and all(os.access(p, os.W_OK) for p in sidecars)


def _retry_busy(conn: sqlite3.Connection, sql: str) -> list:
    """Run a statement that SQLite may refuse with SQLITE_BUSY without waiting (changing the journal mode
    does, while another process is creating the same database): again until the busy timeout has passed."""
    deadline = time.monotonic() + _BUSY_SECONDS
    pause = 0.005
    while True:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _connect_writable(path: Path, create: bool) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=_BUSY_SECONDS, check_same_thread=False)
    except sqlite3.Error as exc:
        if _cannot_write(exc):
            raise _CannotWrite() from None
        raise DatabaseError(f"cannot open {path}: {exc}") from None
    try:
        migrations = migrate.available()
        # Read the version before anything writes: a newer database is left untouched.
        migrate.check_not_newer(conn, migrations, str(path))
        conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_SECONDS * 1000)}")
        if migrate.schema_version(conn) == 0:
            if not create:  # an empty file, or another program's database: not one to read, nor to take over
                raise DatabaseError(_not_yet_message(path))
            # Set before the first table exists, and fixed after: larger pages make the index B-tree a level
            # shallower and hold a content row's signature blobs on one page.
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        _retry_busy(conn, "PRAGMA journal_mode = WAL")
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
        conn.execute(f"PRAGMA wal_autocheckpoint = {_CHECKPOINT_BYTES // page_size}")
        migrate.apply(conn, migrations)
    except sqlite3.DatabaseError as exc:
        conn.close()
        if _cannot_write(exc):
            raise _CannotWrite() from None
        raise DatabaseError(_explain(path, exc)) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _reader(uri: str, options: str) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{uri}?{options}", uri=True, isolation_level=None, timeout=_BUSY_SECONDS,
                           check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a WAL database opens its -shm here
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_readonly(path: Path, create: bool, writable: bool) -> sqlite3.Connection:
    """A connection that only reads. Reading a WAL database makes its -wal and -shm files where they are
    missing (or fails, in a read-only folder), and such files left by a reader stop the database's owner from
    writing it again. So a database this process cannot write, and that no process is writing (no -wal or
    -journal file beside it), is read as immutable: without those files. Otherwise (opened read-only by
    choice, or in use) as a reader beside its writers."""
    in_use = any(_sidecar(path, s).exists() for s in ("-wal", "-journal"))
    options = "mode=ro" if in_use or writable else "mode=ro&immutable=1"
    try:
        conn = _reader(path.absolute().as_uri(), options)
    except sqlite3.DatabaseError as exc:
        if _cannot_write(exc):
            raise DatabaseError(
                f"cannot read {path}: SQLite needs {path.name}-shm beside it to read it while it is in use "
                f"(or after a crash), and cannot make it there ({exc})"
            ) from None
        raise DatabaseError(_explain(path, exc)) from None
    try:
        migrations = migrate.available()
        migrate.check_not_newer(conn, migrations, str(path))
        version, latest = migrate.schema_version(conn), len(migrations)
        if version == 0:
            raise DatabaseError(_readonly_message(path) if create else _not_yet_message(path))
        if version < latest:
            raise DatabaseError(
                f"{_readonly_message(path)}, and this dedupdb must upgrade it (schema {version} to {latest}) to read it"
            )
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        conn.execute("PRAGMA temp_store = MEMORY")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise DatabaseError(_explain(path, exc)) from None
    except BaseException:
        conn.close()
        raise
    return conn


class Store:
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = _GuardedConnection(conn, path)  # sqlite3 errors of every statement become DatabaseError
        self.path = path
        self._raw = conn
        self._group_seconds: float | None = None  # set inside grouped_commits()
        self._group_started = 0.0
        self._index = Runs(self.conn, INDEX_FAMILY, INDEX_KEY_BITS)
        # Containment rows are looked up by queries and `pairs --containment`, never by an ingest's filtered probes:
        # their filters are built in memory by a process that asks often enough, and not kept (10 MB a million).
        self._containment = Runs(self.conn, CONTAINMENT_FAMILY, CONTAINMENT_KEY_BITS, keep_filters=False)

    @property
    def db(self):
        """The same connection as a sqlite_utils Database, for exploring a store from Python (made on first use:
        importing sqlite_utils costs a cold query a tenth of its time)."""
        import sqlite_utils

        return sqlite_utils.Database(self._raw)

    # --- opening -------------------------------------------------------------

    # True when open() found the database read-only to this process (its file or its folder), or was asked to
    # open it so: reads work, and every write stops at _begin() with one line.
    readonly = False

    @classmethod
    def open(cls, path: Path, create: bool = True, readonly: bool = False) -> "Store":
        """Open the store at path (with create, make it). Several processes may open, create and upgrade one
        database at once: the first-time pragmas wait for each other within the busy timeout, and migrations
        run under the write lock (see migrate.apply). A database this process cannot write is opened
        read-only, as is any with readonly."""
        path = Path(path).expanduser()
        if not path.exists():
            if not create:
                raise DatabaseError(f"no database at {path}; run 'dedupdb add PATH' (or 'dedupdb init') first")
            if readonly:
                raise DatabaseError(f"no database at {path} (opened read-only, so none is made)")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DatabaseError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
        elif path.is_dir():
            raise DatabaseError(f"{path} is a directory, not a database file")
        writable = _writable(path)
        if writable and not readonly:
            existed = path.exists() and path.stat().st_size > 0
            try:
                conn = _connect_writable(path, create)
            except _CannotWrite:
                if not existed:  # nothing to read either
                    raise DatabaseError(_readonly_message(path)) from None
                writable = False
            else:
                return cls._made(conn, path, readonly=False)
        elif not path.exists():
            raise DatabaseError(_readonly_message(path))
        return cls._made(_connect_readonly(path, create, writable), path, readonly=True)

    @classmethod
    def _made(cls, conn: sqlite3.Connection, path: Path, readonly: bool) -> "Store":
        store = cls(conn, path)
        store.readonly = readonly
        return store

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: an exception (or Ctrl-C) rolls the whole block back (inside grouped_commits(), with
        the rest of the group since its last commit)."""
        if self._group_seconds is not None:
            with self._grouped_transaction():
                yield
            return
        self._begin()
        try:
            yield
        except BaseException:
            self._rollback()
            raise
        self._commit()

    @contextmanager
    def grouped_commits(self, seconds: float) -> Iterator[None]:
        """Inside this block transaction() blocks share one longer transaction, committed once `seconds` have
        passed and when the block ends. A commit writes out every index page its transaction touched, wherever
        in the B-tree: committing every few seconds instead of every batch saves most of that. An exception
        inside a transaction() block rolls back everything since the last commit (at most `seconds` of work;
        a savepoint per block would keep it, but copies every page it touches into the statement journal);
        one between blocks, such as Ctrl-C while files are read, leaves the finished blocks to be committed."""
        self._group_seconds = seconds
        try:
            yield
        finally:
            self._group_seconds = None
            if self.conn.in_transaction:
                self._commit()

    @contextmanager
    def _grouped_transaction(self) -> Iterator[None]:
        if not self.conn.in_transaction:
            self._begin()
            self._group_started = time.monotonic()
        try:
            yield
        except BaseException:
            self._rollback()
            raise
        if time.monotonic() - self._group_started >= self._group_seconds:
            self._commit()

    def _commit(self) -> None:
        try:
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        """Undo the open transaction while an error propagates, never hiding that error: after some (a full
        disk when COMMIT writes the WAL, ...) SQLite has rolled back already, and a failing ROLLBACK would
        replace the cause with 'cannot rollback - no transaction is active'."""
        if not self._raw.in_transaction:
            return
        try:
            self._raw.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the error being raised says more; closing the connection ends the transaction anyway

    def _begin(self) -> None:
        if self.readonly:
            raise DatabaseError(_readonly_message(self.path))
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _sqlite_error_name(exc).startswith("SQLITE_READONLY") or "readonly" in str(exc):
                raise DatabaseError(_readonly_message(self.path)) from None
            raise DatabaseError(_explain(self.path, exc)) from None

    def _q(self, sql: str, params: Iterable = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, tuple(params))
        except sqlite3.OperationalError as exc:
            raise DatabaseError(_explain(self.path, exc)) from None

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
        for chunk in _chunks(paths):
            ids.update(self.conn.execute(f"SELECT path, id FROM files WHERE path IN ({_marks(len(chunk))})", chunk))
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
        for chunk in _chunks(document_ids):
            self.conn.execute(f"DELETE FROM documents WHERE id IN ({_marks(len(chunk))})", chunk)

    def insert_documents(self, rows: list[tuple]) -> None:
        """rows: (key, file_id, record, content_id, bytes, mtime_ns, snippet)."""
        self.conn.executemany(
            "INSERT INTO documents (key, file_id, record, content_id, bytes, mtime_ns, snippet) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def existing_keys(self, keys: list[str]) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(keys):
            found.update(r[0] for r in self._q(f"SELECT key FROM documents WHERE key IN ({_marks(len(chunk))})", chunk))
        return found

    _DOCUMENT_SELECT = (
        "SELECT d.id, d.key, f.path, d.record, d.content_id, d.bytes, d.mtime_ns, d.snippet, c.cluster "
        "FROM documents d JOIN files f ON f.id = d.file_id JOIN contents c ON c.id = d.content_id "
    )

    def documents_of_contents(self, content_ids: list[int]) -> list[DocumentRow]:
        out = []
        for chunk in _chunks(content_ids):
            rows = self._q(
                self._DOCUMENT_SELECT + f"WHERE d.content_id IN ({_marks(len(chunk))}) ORDER BY d.key", chunk
            ).fetchall()
            out.extend(DocumentRow(*r) for r in rows)
        return out

    # --- contents ------------------------------------------------------------

    def content_ids_by_hash(self, hashes: list[bytes]) -> dict[bytes, int]:
        found: dict[bytes, int] = {}
        for chunk in _chunks(hashes):
            rows = self._q(f"SELECT hash, id FROM contents WHERE hash IN ({_marks(len(chunk))})", chunk)
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
                        clusters: dict[int, int] | None = None, documents: list[int] | None = None) -> list[int]:
        """Store new contents under ids (by default the next free ones: next_content_ids), each in the cluster
        `clusters` gives it or its own, and held by as many documents as `documents` says (none by default);
        returns their ids in order."""
        if not fingerprints:
            return []
        ids = self.next_content_ids(len(fingerprints)) if ids is None else ids
        documents = [0] * len(fingerprints) if documents is None else documents
        if not len(ids) == len(documents) == len(fingerprints):
            raise ValueError(f"{len(fingerprints)} contents given {len(ids)} ids and {len(documents)} counts")
        clusters = clusters or {}
        sketches = sketchpack.pack([fp.sketch for fp in fingerprints])
        rows = []
        for i, fp, held, sketch in zip(ids, fingerprints, documents, sketches):
            minhash, simhash, kept = _kept_signature(fp), fp.simhash_signed, _optional_blob(fp.fingerprints)
            rows.append((i, fp.content_hash, fp.chars, fp.shingles, minhash, sketch, simhash, clusters.get(i, i), held,
                         kept, checksums.checksum(fp.shingles, minhash, sketch, simhash, kept)))
        self.conn.executemany(
            "INSERT INTO contents (id, hash, chars, shingles, minhash, sketch, simhash, cluster, documents, "
            "fingerprints, checksum) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        return ids

    def change_document_counts(self, deltas: dict[int, int]) -> list[int]:
        """Apply per-content document count changes; returns the contents no document holds any more."""
        self.conn.executemany(
            "UPDATE contents SET documents = documents + ? WHERE id = ?", [(d, c) for c, d in deltas.items()]
        )
        orphans = []
        for chunk in _chunks([c for c, d in deltas.items() if d < 0]):  # only a loss can leave a content unheld
            rows = self.conn.execute(
                f"SELECT id FROM contents WHERE documents <= 0 AND id IN ({_marks(len(chunk))})", chunk
            )
            orphans.extend(r[0] for r in rows)
        return orphans

    def contents(self, content_ids: Iterable[int]) -> dict[int, ContentRow]:
        ids = list(content_ids)
        out: dict[int, ContentRow] = {}
        for chunk in _chunks(ids):
            rows = self._q(
                f"SELECT {_CONTENT_COLUMNS} FROM contents WHERE id IN ({_marks(len(chunk))})", chunk
            ).fetchall()
            out.update(self._content_rows(rows))
        return out

    def _content_rows(self, rows: list[tuple]) -> dict[int, ContentRow]:
        """ContentRows of rows of _CONTENT_COLUMNS, their checksums verified."""
        for r in rows:
            if not checksums.matches(r[9], r[2], r[3], r[4], r[5], r[8]):
                raise self._damaged_content(r[0])
        sketches = self._unpacked([r[4] for r in rows])
        return {
            r[0]: ContentRow(r[0], r[1], r[2], _signature(r[3]), sketch, r[5], r[6], r[7], _optional_array(r[8]))
            for r, sketch in zip(rows, sketches)
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
        for chunk in _chunks(ids):
            rows = self._q(
                f"SELECT id, sketch, simhash, checksum FROM contents WHERE id IN ({_marks(len(chunk))})", chunk
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
        for chunk in _chunks(content_ids):
            rows = self._q(
                f"SELECT id, sketch, simhash, checksum FROM contents WHERE id IN ({_marks(len(chunk))})", chunk
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
        for chunk in _chunks(ids):
            out.update(self._q(f"SELECT id, chars FROM contents WHERE id IN ({_marks(len(chunk))})", chunk).fetchall())
        return out

    def delete_content(self, content_id: int) -> None:
        """Forget a content and its pairs (which name it without a foreign key: migration 0008)."""
        self.conn.execute("DELETE FROM pairs WHERE a = ?", (content_id,))
        self.conn.execute("DELETE FROM pairs WHERE b = ?", (content_id,))
        self.conn.execute("DELETE FROM contents WHERE id = ?", (content_id,))

    def all_content_ids(self) -> list[int]:
        return [r[0] for r in self._q("SELECT id FROM contents ORDER BY id")]

    def content_count(self) -> int:
        return self._q("SELECT count(*) FROM contents").fetchone()[0]

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
    # Winnowed fingerprints (containment.py), packed like the index rows: (32-bit hash << 30) | content id, in runs
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
        for chunk in _chunks(list(content_ids)):
            rows = self._q(
                "SELECT id, shingles, sketch, fingerprints, simhash, minhash, checksum FROM contents "
                f"WHERE id IN ({_marks(len(chunk))})",
                chunk,
            ).fetchall()
            for r in rows:
                if not checksums.matches(r[6], r[1], r[5], r[2], r[4], r[3]):
                    raise self._damaged_content(r[0])
            sketches = self._unpacked([r[2] for r in rows])
            out.update((r[0], (r[1], sketch, _optional_array(r[3]), r[4])) for r, sketch in zip(rows, sketches))
        return out

    def containment_sizes(self, content_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        """(distinct shingles, fingerprints) of contents (0 fingerprints for one stored before they existed)."""
        out = {}
        for chunk in _chunks(list(content_ids)):
            out.update((r[0], (r[1], r[2])) for r in self._q(
                f"SELECT id, shingles, coalesce(length(fingerprints), 0) / 4 FROM contents WHERE id IN ({_marks(len(chunk))})",
                chunk,
            ))
        return out

    def set_fingerprints(self, fingerprints: dict[int, np.ndarray]) -> None:
        """Store the fingerprints of contents that had none (their rows are the caller's to insert). Their checksums,
        which covered none, are dropped: 'dedupdb reindex' gives them new ones."""
        self.conn.executemany(
            "UPDATE contents SET fingerprints = ?, checksum = NULL WHERE id = ? AND fingerprints IS NULL",
            [(_blob(fp), cid) for cid, fp in fingerprints.items()],
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

    # --- pairs ---------------------------------------------------------------

    def insert_pairs(self, rows: list[tuple[int, int, float, int | None]]) -> None:
        """rows: (a, b, jaccard, hamming) with a < b."""
        self.conn.executemany(
            "INSERT OR REPLACE INTO pairs (a, b, jaccard, hamming) VALUES (?, ?, ?, ?)", rows
        )

    def pairs_among(self, content_ids: list[int]) -> list[tuple[int, int]]:
        members = set(content_ids)
        edges = []
        for chunk in _chunks(content_ids):
            rows = self.conn.execute(f"SELECT a, b FROM pairs WHERE a IN ({_marks(len(chunk))})", chunk)
            edges.extend((a, b) for a, b in rows if b in members)
        return edges

    def content_id_chunks(self, size: int = 1000) -> Iterator[list[int]]:
        """Every content id, ascending, size of them at a time (read from the documents' content index, not from
        the wide content rows)."""
        last = 0
        while True:
            ids = [r[0] for r in self._q(
                "SELECT DISTINCT content_id FROM documents WHERE content_id > ? ORDER BY content_id LIMIT ?", (last, size)
            )]
            if not ids:
                return
            yield ids
            last = ids[-1]

    def pairs_from(self, content_ids: list[int]) -> list[tuple[int, int, float, int | None]]:
        """(a, b, jaccard, hamming) of the stored pairs whose a is one of these contents, by a then b."""
        out = []
        for chunk in _chunks(content_ids):
            out += self._q(
                f"SELECT a, b, jaccard, hamming FROM pairs WHERE a IN ({_marks(len(chunk))}) ORDER BY a, b", chunk
            ).fetchall()
        return sorted(out)

    def document_keys(self, content_ids: Iterable[int]) -> dict[int, list[str]]:
        """The keys of each content's documents, sorted."""
        out: dict[int, list[str]] = {}
        for chunk in _chunks(list(content_ids)):
            rows = self._q(
                f"SELECT content_id, key FROM documents WHERE content_id IN ({_marks(len(chunk))}) ORDER BY content_id, key",
                chunk,
            )
            for content_id, key in rows:
                out.setdefault(content_id, []).append(key)
        return out

    def with_simhash(self, content_ids: Iterable[int]) -> set[int]:
        """Those of these contents that have a SimHash."""
        out: set[int] = set()
        for chunk in _chunks(list(content_ids)):
            out.update(r[0] for r in self._q(
                f"SELECT id FROM contents WHERE simhash IS NOT NULL AND id IN ({_marks(len(chunk))})", chunk
            ))
        return out

    def pair_scores(self, content_ids: list[int]) -> dict[tuple[int, int], tuple[float, int | None]]:
        members = set(content_ids)
        out = {}
        for chunk in _chunks(content_ids):
            rows = self._q(f"SELECT a, b, jaccard, hamming FROM pairs WHERE a IN ({_marks(len(chunk))})", chunk)
            out.update(((a, b), (j, h)) for a, b, j, h in rows if b in members)
        return out

    # --- clusters ------------------------------------------------------------

    def cluster_members(self, cluster: int) -> list[int]:
        return [r[0] for r in self.conn.execute("SELECT id FROM contents WHERE cluster = ?", (cluster,))]

    def clusters_of(self, content_ids: list[int]) -> dict[int, int]:
        out = {}
        for chunk in _chunks(content_ids):
            rows = self.conn.execute(f"SELECT id, cluster FROM contents WHERE id IN ({_marks(len(chunk))})", chunk)
            out.update(rows.fetchall())
        return out

    def relabel_clusters(self, mapping: dict[int, int]) -> None:
        """Move every content of cluster old to cluster new."""
        self.conn.executemany("UPDATE contents SET cluster = ? WHERE cluster = ?", [(n, o) for o, n in mapping.items()])

    def set_clusters(self, assignment: dict[int, int]) -> None:
        """Set the cluster of individual contents."""
        self.conn.executemany("UPDATE contents SET cluster = ? WHERE id = ?", [(c, i) for i, c in assignment.items()])

    def duplicate_clusters(self) -> list[tuple[int, int, int]]:
        """(cluster, documents, contents) of every cluster holding two documents or more."""
        return self._q(
            "SELECT cluster, sum(documents), count(*) FROM contents GROUP BY cluster HAVING sum(documents) >= 2"
        ).fetchall()

    def cluster_documents(self, clusters: list[int]) -> list[DocumentRow]:
        out = []
        for chunk in _chunks(clusters):
            rows = self._q(self._DOCUMENT_SELECT + f"WHERE c.cluster IN ({_marks(len(chunk))})", chunk).fetchall()
            out.extend(DocumentRow(*r) for r in rows)
        return out

    # --- forgetting -----------------------------------------------------------

    def documents_by_keys(self, keys: list[str]) -> list[tuple[int, int, str]]:
        """(document id, content id, key) of the documents with these keys."""
        out = []
        for chunk in _chunks(keys):
            out += self._q(
                f"SELECT id, content_id, key FROM documents WHERE key IN ({_marks(len(chunk))})", chunk
            ).fetchall()
        return out

    def delete_files(self, file_ids: list[int]) -> None:
        for chunk in _chunks(file_ids):
            self.conn.execute(f"DELETE FROM files WHERE id IN ({_marks(len(chunk))})", chunk)

    def missing_files(self) -> list[FileRow]:
        rows = self._q(
            "SELECT id, path, size, mtime_ns, digest, status, kind, records, options FROM files WHERE status = 'missing'"
        ).fetchall()
        return [FileRow(*r) for r in rows]

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
        return _integrity_messages(self.conn, limit)

    @staticmethod
    def integrity_at(path: Path, limit: int) -> list[str]:
        """integrity_messages() of the file at path, opened read-only and without a store: for a database too
        damaged to open. A file SQLite cannot read at all gives its error as the one message."""
        try:
            conn = sqlite3.connect(Path(path).expanduser().resolve().as_uri() + "?mode=ro", uri=True)
        except sqlite3.Error as exc:
            return [str(exc)]
        try:
            return _integrity_messages(conn, limit)
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
                f"SELECT {_CONTENT_COLUMNS} FROM contents WHERE id > ? ORDER BY id LIMIT ?", (last, size)
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


def _integrity_messages(conn, limit: int) -> list[str]:
    rows = conn.execute(f"PRAGMA integrity_check({int(limit)})").fetchall()
    lines = [line for (text,) in rows for line in str(text).splitlines() if line and not line.startswith("*** in database")]
    return [] if lines == ["ok"] else lines


def _explain(path: Path, exc: sqlite3.Error) -> str:
    if isinstance(exc, DatabaseError):  # translated already (see _GuardedConnection)
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
