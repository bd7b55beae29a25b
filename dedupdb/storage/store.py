"""The store: one SQLite file holding files, documents, contents, index rows, pairs and the journal.

Store is a small facade: it opens the file (connection.py) and runs transactions; its methods over each group
of tables live in that group's module (meta, files, contents, postings, pairs, journal, integrity, ignored), so
the SQL of a table is found by the table's name. storage/ is the only package that speaks SQL."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dedupdb.errors import DatabaseError
from dedupdb.storage.connection import (
    CannotWrite,
    GuardedConnection,
    checkpoint_passive,
    connect_readonly,
    connect_writable,
    explain_error,
    is_writable,
    readonly_message,
    sqlite_error_name,
)
from dedupdb.storage.contents import ContentTables
from dedupdb.storage.entries import CONTAINMENT_FAMILY, CONTAINMENT_KEY_BITS, INDEX_FAMILY, INDEX_KEY_BITS
from dedupdb.storage.files import FileTables
from dedupdb.storage.ignored import IgnoredPairs
from dedupdb.storage.integrity import IntegrityChecks
from dedupdb.storage.journal import JournalTables
from dedupdb.storage.meta import MetaTables
from dedupdb.storage.pairs import PairTables
from dedupdb.storage.postings import PostingTables
from dedupdb.storage.runs import Runs


class Store(
    MetaTables, FileTables, ContentTables, PostingTables, PairTables, JournalTables, IntegrityChecks, IgnoredPairs
):
    """An open store: its connection, its two families of index runs, and its transactions."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = GuardedConnection(conn, path)  # sqlite3 errors of every statement become DatabaseError
        self.path = path
        self.absolute_path = path.absolute()  # as opened: another process reaches it even if this one changes folder
        self._raw = conn
        self._group_seconds: float | None = None  # set inside grouped_commits()
        self._group_started = 0.0
        self._index = Runs(self.conn, INDEX_FAMILY, INDEX_KEY_BITS)
        # Containment rows are looked up by queries and `pairs --containment`, never by an ingest's filtered probes:
        # their filters are built in memory by a process that asks often enough, and not kept (10 MB a million).
        self._containment = Runs(self.conn, CONTAINMENT_FAMILY, CONTAINMENT_KEY_BITS, keep_filters=False)
        self._checkpointing: threading.Thread | None = None  # checkpoint_aside()'s

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
        writable = is_writable(path)
        if writable and not readonly:
            existed = path.exists() and path.stat().st_size > 0
            try:
                conn = connect_writable(path, create)
            except CannotWrite:
                if not existed:  # nothing to read either
                    raise DatabaseError(readonly_message(path)) from None
                writable = False
            else:
                return cls._made(conn, path, readonly=False)
        elif not path.exists():
            raise DatabaseError(readonly_message(path))
        return cls._made(connect_readonly(path, create, writable), path, readonly=True)

    @classmethod
    def _made(cls, conn: sqlite3.Connection, path: Path, readonly: bool) -> "Store":
        store = cls(conn, path)
        store.readonly = readonly
        return store

    def close(self) -> None:
        if self._checkpointing is not None:  # its connection must close first: the last to close checkpoints
            self._checkpointing.join()
            self._checkpointing = None
        self.conn.close()

    def checkpoint_aside(self) -> None:
        """Start copying what the write-ahead log holds committed into the store's file, in a thread of its own
        (connection.checkpoint_passive): for the end of a large add, whose last batches this process writes while
        its workers are done and a core is idle. Closing the store then copies only what those batches wrote: after
        adding 100,000 reviews, 0.22 s against 0.59. Once a store's opening; close() waits for it."""
        if self.readonly or self._checkpointing is not None:
            return
        self._checkpointing = threading.Thread(target=checkpoint_passive, args=(self.absolute_path,),
                                               name="dedupdb-checkpoint", daemon=True)
        self._checkpointing.start()

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
            raise DatabaseError(readonly_message(self.path))
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if sqlite_error_name(exc).startswith("SQLITE_READONLY") or "readonly" in str(exc):
                raise DatabaseError(readonly_message(self.path)) from None
            raise DatabaseError(explain_error(self.path, exc)) from None

    def _q(self, sql: str, params: Iterable = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, tuple(params))
        except sqlite3.OperationalError as exc:
            raise DatabaseError(explain_error(self.path, exc)) from None
