from __future__ import annotations

import sqlite3

import pytest

import dedupdb
from dedupdb import migrate
from dedupdb.errors import DatabaseError
from dedupdb.store import Store


def test_blank_database_gets_current_schema(db_path):
    store = Store.open(db_path)
    migrations = migrate.available()
    assert migrate.schema_version(store.conn) == len(migrations) >= 1
    tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "files", "documents", "contents", "index_keys", "pairs"} <= tables
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    store.close()
    again = Store.open(db_path)  # reopening applies nothing more
    assert migrate.apply(again.conn, migrations) == 0
    again.close()


def test_newer_database_is_refused_and_untouched(db_path, cli):
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(DatabaseError, match="newer"):
        dedupdb.open(db_path)
    result = cli("stats")
    assert result.exit_code == 1 and "newer than this dedupdb" in result.output
    assert db_path.read_bytes() == before


def test_failed_migration_rolls_back(tmp_path, db_path):
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_ok.sql").write_text("CREATE TABLE a (x);")
    (folder / "0002_bad.sql").write_text("CREATE TABLE b (x); THIS IS NOT SQL;")
    conn = sqlite3.connect(db_path, isolation_level=None)
    with pytest.raises(DatabaseError, match="0002_bad.sql"):
        migrate.apply(conn, migrate.available(folder))
    assert migrate.schema_version(conn) == 1
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'b'").fetchone()[0] == 0


def test_migrations_ship_with_the_package():
    names = [m.path.name for m in migrate.available()]
    assert names[0] == "0001_initial.sql"
