"""SQLite failures are one clear line and a non-zero exit, in the CLI and as DatabaseError in the library;
nothing stored before is lost."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import dedupdb
import dedupdb.storage.connection as store_module
from dedupdb import DatabaseError
from dedupdb.cli.commands import app

from .conftest import ENGLISH
from .test_check import damage_middle, damage_roots, make_corpus


def one_line_error(result, *texts: str) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    for text in texts:
        assert text in lines[0]
    return lines[0]


@pytest.fixture
def corpus(tmp_path) -> Path:
    return make_corpus(tmp_path / "corpus", 300)


@pytest.fixture
def stored(corpus, cli, db_path) -> Path:
    result = cli("add", str(corpus), "--workers", "0")
    assert result.exit_code == 0, result.output
    return db_path


def _run(cli, command: str, tmp_path: Path):
    if command == "add":
        fresh = tmp_path / "fresh"
        make_corpus(fresh, 30, seed=99)
        return cli("add", str(fresh), "--workers", "0")
    if command == "query":
        return cli("query", ENGLISH)
    if command == "query-long":  # long enough for SimHash too
        return cli("query", (tmp_path / "corpus" / "doc0.txt").read_text())
    return cli(command)


# --- damaged pages -----------------------------------------------------------------


# The middle of these stores is the index's sorted runs (run_blocks): an add and a query probe them, and the
# commands that list what is stored never read them.
@pytest.mark.parametrize("command", ["add", "query-long"])
def test_damaged_middle_of_the_file_is_one_line(stored, cli, tmp_path, command):
    damage_middle(stored)
    line = one_line_error(_run(cli, command, tmp_path), "is damaged", "dedupdb check")
    assert line.startswith(f"Error: {stored} is damaged (database disk image is malformed)")


def test_damage_a_command_never_reads_leaves_it_answering_and_check_finds_it(stored, cli, tmp_path):
    damage_middle(stored)
    for command in ("stats", "report", "pairs"):
        assert _run(cli, command, tmp_path).exit_code == 0
    result = cli("check")
    assert result.exit_code == 1 and "Traceback" not in result.output and "integrity" in result.output


@pytest.mark.parametrize("command", ["stats", "report", "add", "query"])
def test_damaged_table_pages_met_after_opening_are_one_line(stored, cli, tmp_path, command):
    # The store opens (meta and blobs are intact); the damage is met by a later statement or fetch.
    damage_roots(stored, "contents", "run_blocks")
    one_line_error(_run(cli, command, tmp_path), "is damaged", "dedupdb check")


def test_damage_raises_database_error_in_the_library(stored, corpus):
    damage_roots(stored, "contents", "run_blocks")
    with dedupdb.open(stored, create=False) as db:
        for call in (db.stats, db.clusters, lambda: db.query(ENGLISH)):
            with pytest.raises(DatabaseError, match="is damaged .*dedupdb check"):
                call()
        (corpus / "new.txt").write_text("a new text that has to be written into the damaged store")
        with pytest.raises(DatabaseError, match="is damaged"):
            db.add([corpus / "new.txt"], workers=0)


def test_damage_met_while_opening_raises_database_error(stored):
    damage_roots(stored, "meta")
    with pytest.raises(DatabaseError, match="is damaged"):
        with dedupdb.open(stored, create=False) as db:
            db.stats()


# --- a full disk ---------------------------------------------------------------------


def _limited(connect):
    """sqlite3.connect for a nearly full disk: the database may grow by two pages (PRAGMA max_page_count)."""

    def limited(*args, **kwargs):
        conn = connect(*args, **kwargs)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")
        return conn

    return limited


def _keys(db_path: Path) -> set[str]:
    conn = sqlite3.connect(db_path)
    try:
        return {r[0] for r in conn.execute("SELECT key FROM documents")}
    finally:
        conn.close()


@pytest.mark.parametrize("workers", ["0", "2"])
def test_full_disk_during_add_is_one_line_and_loses_nothing(cli, db_path, tmp_path, workers):
    first = make_corpus(tmp_path / "first", 5)
    assert cli("add", str(first), "--workers", "0").exit_code == 0
    before = _keys(db_path)

    more = make_corpus(tmp_path / "more", 300, seed=3)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module.sqlite3, "connect", _limited(sqlite3.connect))
        line = one_line_error(cli("add", str(more), "--workers", workers), "the disk is full")
    assert "nothing stored before this command was lost" in line

    # The database is still sound and holds everything it held before.
    assert before <= _keys(db_path)
    result = cli("check")
    assert result.exit_code == 0, result.output
    # With room again, the same add completes.
    result = cli("add", str(more), "--workers", "0")
    assert result.exit_code == 0, result.output
    assert len(_keys(db_path)) == len(before) + len(list(more.rglob("*.txt")))
    assert cli("check").exit_code == 0


def test_full_disk_while_reading_a_record_file_stops_the_add(cli, db_path, tmp_path):
    """The store failing is not one bad file: the add stops with the one line and a non-zero exit."""
    first = make_corpus(tmp_path / "first", 5)
    assert cli("add", str(first), "--workers", "0").exit_code == 0
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps({"text": f"record number {i} says {' '.join(['word%d' % (i * 7 + j) for j in range(30)])}"}) + "\n"
                               for i in range(2000)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module.sqlite3, "connect", _limited(sqlite3.connect))
        one_line_error(cli("add", str(records), "--text-field", "text", "--workers", "0"), "the disk is full")
    assert cli("check").exit_code == 0
    assert cli("add", str(records), "--text-field", "text", "--workers", "0").exit_code == 0


def test_full_disk_raises_database_error_in_the_library(tmp_path, db_path, monkeypatch):
    first = make_corpus(tmp_path / "first", 5)
    with dedupdb.open(db_path) as db:
        db.add([first], workers=0)
        documents = db.stats()["documents"]
    monkeypatch.setattr(store_module.sqlite3, "connect", _limited(sqlite3.connect))
    more = make_corpus(tmp_path / "more", 300, seed=3)
    with dedupdb.open(db_path, create=False) as db:
        with pytest.raises(DatabaseError, match="the disk is full") as caught:
            db.add([more], workers=0)
        # Still the sqlite3 error class it replaces, so code that rolls back on sqlite3 errors still does.
        assert isinstance(caught.value, sqlite3.OperationalError)
        assert db.stats()["documents"] >= documents
    monkeypatch.undo()
    with dedupdb.open(db_path, create=False) as db:
        assert db.check().sound


class _FullAtCommit(sqlite3.Connection):
    """A connection whose disk fills up when COMMIT writes the transaction's pages out (to the WAL), as SQLite
    meets it: it rolls the transaction back itself and reports SQLITE_FULL."""

    def execute(self, sql: str, *args):
        if sql.strip().upper() == "COMMIT" and self.in_transaction:
            super().execute("ROLLBACK")
            raise sqlite3.OperationalError("database or disk is full")
        return super().execute(sql, *args)


def _full_at_commit(connect):
    return lambda *args, **kwargs: connect(*args, **kwargs, factory=_FullAtCommit)


def test_full_disk_at_commit_names_the_disk_and_the_database(cli, db_path, tmp_path):
    """The rollback SQLite already did does not hide the cause behind 'cannot rollback - no transaction is active'."""
    first = make_corpus(tmp_path / "first", 5)
    assert cli("add", str(first), "--workers", "0").exit_code == 0
    before = _keys(db_path)
    more = make_corpus(tmp_path / "more", 30, seed=3)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module.sqlite3, "connect", _full_at_commit(sqlite3.connect))
        line = one_line_error(cli("add", str(more), "--workers", "0"), "the disk is full", str(db_path))
    assert "rollback" not in line
    assert _keys(db_path) == before
    assert cli("check").exit_code == 0
    assert cli("add", str(more), "--workers", "0").exit_code == 0


def test_full_disk_at_commit_raises_database_error_in_the_library(tmp_path, db_path, monkeypatch):
    first = make_corpus(tmp_path / "first", 5)
    with dedupdb.open(db_path) as db:
        db.add([first], workers=0)
    monkeypatch.setattr(store_module.sqlite3, "connect", _full_at_commit(sqlite3.connect))
    with dedupdb.open(db_path, create=False) as db:
        with pytest.raises(DatabaseError, match=f"^{db_path}: the disk is full"):
            db.add([make_corpus(tmp_path / "more", 30, seed=3)], workers=0)
        with pytest.raises(DatabaseError, match="the disk is full"):
            with db.store.transaction():
                db.store.write_meta({"probe": "1"})
        assert not db.store.conn.in_transaction
    monkeypatch.undo()
    with dedupdb.open(db_path, create=False) as db:
        assert db.check().sound
        assert "probe" not in db.store.read_meta()


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A file system of 16 MiB of its own (tmpfs), for a disk that really fills up: where this process may mount
    one (root on Linux); skipped elsewhere."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small file system needs root on Linux")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(disk: Path, leave: int) -> Path:
    """A file that takes all the room left on disk but `leave` bytes (room for the -shm file, a page or two)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 4096):
            try:
                while True:
                    os.write(fd, bytes(size))
            except OSError:
                pass
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler


def test_a_disk_that_really_fills_up_is_named_and_loses_nothing(runner, small_disk, tmp_path):
    db = small_disk / "notes.db"
    run = lambda *args: runner.invoke(app, [*args, "--db", str(db)])  # noqa: E731
    assert run("add", str(make_corpus(tmp_path / "first", 5)), "--workers", "0").exit_code == 0
    before = _keys(db)
    more = make_corpus(tmp_path / "more", 300, seed=3)
    filler = _fill(small_disk, 256 * 1024)
    line = one_line_error(run("add", str(more), "--workers", "0"), "the disk is full", str(db))
    assert "rollback" not in line
    assert before <= _keys(db)
    assert run("check").exit_code == 0
    filler.unlink()
    assert run("add", str(more), "--workers", "0").exit_code == 0
    assert run("check").exit_code == 0


# --- the last resort ------------------------------------------------------------------


def test_sqlite_error_outside_the_store_is_one_line(stored, cli, monkeypatch):
    def broken(self):
        raise sqlite3.OperationalError("something SQLite said")

    monkeypatch.setattr(dedupdb.Database, "stats", broken)
    one_line_error(cli("stats"), "Error: database error: something SQLite said")


def test_damage_message_and_corrupt_message_differ(tmp_path):
    explain = store_module.explain_error
    path = tmp_path / "x.db"
    assert explain(path, sqlite3.DatabaseError("database disk image is malformed")) == (
        f"{path} is damaged (database disk image is malformed); run 'dedupdb check' for details"
    )
    assert "not a dedupdb database" in explain(path, sqlite3.DatabaseError("file is not a database"))
    assert "the disk is full" in explain(path, sqlite3.OperationalError("database or disk is full"))


def test_a_disk_full_while_a_new_database_is_made_names_the_file(tmp_path, monkeypatch):
    """The first add on a full disk: the message says the disk is full and names the database, as at any later
    commit, instead of blaming the migration."""
    import dedupdb.storage.schema as schema

    def full(script):
        raise sqlite3.OperationalError("database or disk is full")
        yield  # a generator, as statements() is

    monkeypatch.setattr(schema, "statements", full)
    target = tmp_path / "new.db"
    with pytest.raises(DatabaseError) as caught:
        dedupdb.open(target)
    assert "disk is full" in str(caught.value) and str(target) in str(caught.value)
    assert "migration" not in str(caught.value)
