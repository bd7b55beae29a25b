from __future__ import annotations

import sqlite3

import pytest

from dedupdb.cli import app


def _one_line_error(result, text):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert text in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_corrupt_database(cli, db_path):
    db_path.write_bytes(b"this is not a database at all" * 100)
    _one_line_error(cli("stats"), "not a dedupdb database or is corrupt")


def test_database_is_a_directory(runner, tmp_path):
    _one_line_error(runner.invoke(app, ["stats", "--db", str(tmp_path)]), "is a directory")


def test_no_database_yet(cli):
    _one_line_error(cli("report"), "no database at")


def test_locked_database(cli, db_path, tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("some words to index here")
    assert cli("add", str(tmp_path / "a.txt")).exit_code == 0
    import dedupdb.store as store

    monkeypatch.setattr(store.sqlite3, "connect", _fast_timeout_connect(store.sqlite3.connect))
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    (tmp_path / "a.txt").write_text("other words, so that the add must write")
    try:
        _one_line_error(cli("add", str(tmp_path / "a.txt")), "locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _fast_timeout_connect(connect):
    def wrapper(*args, **kwargs):
        kwargs["timeout"] = 0.1
        conn = connect(*args, **kwargs)
        return _NoBusyWait(conn)

    return wrapper


class _NoBusyWait:
    """A connection whose busy_timeout pragma is ignored, so a lock test fails fast."""

    def __init__(self, conn):
        self._conn = conn

    def execute(self, sql, *args):
        if sql.startswith("PRAGMA busy_timeout"):
            return self._conn.execute("PRAGMA busy_timeout = 100")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.parametrize("command", ["init", "add", "report", "query", "pairs", "stats", "reindex"])
def test_every_command_has_help(runner, command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "--db" in result.output


def test_module_entry_point(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "dedupdb", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "query" in result.stdout
