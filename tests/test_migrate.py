from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import dedupdb
from dedupdb.errors import DatabaseError
from dedupdb.storage import schema as migrate
from dedupdb.storage.store import Store


def test_blank_database_gets_current_schema(db_path):
    store = Store.open(db_path)
    migrations = migrate.available()
    assert migrate.schema_version(store.conn) == len(migrations) >= 1
    tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "files", "documents", "contents", "runs", "run_blocks", "pairs"} <= tables
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


def test_a_store_of_a_newer_algorithm_is_neither_used_nor_rebuilt(db_path, cli, tmp_path):
    """Fingerprints of a newer algorithm than this dedupdb's: adding, querying and either reindex are refused with
    what to do (a newer dedupdb), and the store is left byte for byte, not rebuilt back to the older algorithm."""
    (tmp_path / "a.txt").write_text("some words to index here, and a few more of them")
    assert cli("add", str(tmp_path / "a.txt")).exit_code == 0
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'setting.algorithm'")
    conn.commit()
    conn.close()
    before = db_path.read_bytes()
    for args in (["add", str(tmp_path / "a.txt")], ["query", "some words"], ["reindex", "--from-sources"],
                 ["reindex", "--threshold", "0.6"]):
        result = cli(*args)
        assert result.exit_code == 1 and "newer version of dedupdb's algorithm (99" in result.output, result.output
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


def _as_schema_2(db_path) -> None:
    """Turn a current database back into the schema-2 layout: index rows in two tables, user_version 2."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.executescript(
        "BEGIN; DROP TABLE run_filters; DROP TABLE run_blocks; DROP TABLE runs;"
        "CREATE TABLE lsh_bands (band INTEGER NOT NULL, key INTEGER NOT NULL, content_id INTEGER NOT NULL,"
        " PRIMARY KEY (band, key, content_id)) WITHOUT ROWID;"
        "CREATE TABLE simhash_blocks (block INTEGER NOT NULL, value INTEGER NOT NULL, content_id INTEGER NOT NULL,"
        " PRIMARY KEY (block, value, content_id)) WITHOUT ROWID;"
        "DELETE FROM pairs; UPDATE contents SET cluster = id;"
        "DROP INDEX contents_without_fingerprints; ALTER TABLE contents DROP COLUMN fingerprints;"
        "ALTER TABLE contents DROP COLUMN checksum; PRAGMA user_version = 2; COMMIT;"
    )
    conn.close()


def _five_documents_stored(tmp_path, db_path) -> tuple[list, int, int]:
    """Two near-duplicate pairs and one other text, added: (pairs, index rows, containment rows)."""
    from .conftest import (
        CHINESE,
        CHINESE_EDITED,
        ENGLISH,
        ENGLISH_EDITED,
        ENGLISH_OTHER,
        write,
    )

    folder = tmp_path / "docs"
    for name, text in [("a", ENGLISH), ("b", ENGLISH_EDITED), ("c", ENGLISH_OTHER), ("d", CHINESE), ("e", CHINESE_EDITED)]:
        write(folder / f"{name}.txt", text)
    with dedupdb.open(db_path) as db:
        db.add([folder])
        return sorted((p.a, p.b, p.jaccard) for p in db.pairs()), db.store.index_rows(), db.store.containment_rows()


def test_schema_2_database_is_migrated_and_its_index_rebuilt(tmp_path, db_path, cli):
    from .conftest import ENGLISH_EDITED

    before, rows, _ = _five_documents_stored(tmp_path, db_path)
    assert len(before) == 2
    _as_schema_2(db_path)

    result = cli("report", "--format", "json")  # opening migrates and rebuilds
    assert result.exit_code == 0, result.output
    with dedupdb.open(db_path) as db:
        assert migrate.schema_version(db.store.conn) == len(migrate.available())
        assert db.store.read_meta()["index.rebuild"] == "0"
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == before
        assert db.store.index_rows() == rows
        assert db.query(ENGLISH_EDITED)[0].path.endswith("b.txt")


def test_store_refuses_more_contents_than_index_rows_can_name(tmp_path, db_path, cli):
    from dedupdb.storage.entries import CONTENT_ID_BITS

    from .conftest import ENGLISH, ENGLISH_OTHER, write

    with dedupdb.open(db_path) as db:
        db.add([write(tmp_path / "a.txt", ENGLISH)])
    conn = sqlite3.connect(db_path, isolation_level=None)  # move the one content to the last id there is
    conn.execute("UPDATE contents SET id = ?, cluster = ?", (2**CONTENT_ID_BITS - 1, 2**CONTENT_ID_BITS - 1))
    conn.execute("UPDATE documents SET content_id = ?", (2**CONTENT_ID_BITS - 1,))
    conn.close()
    result = cli("add", str(write(tmp_path / "b.txt", ENGLISH_OTHER)))
    assert result.exit_code == 1
    assert "at most" in result.output and "Traceback" not in result.output
    with dedupdb.open(db_path) as db:
        assert db.store.counts()["contents"] == 1  # the failed batch left nothing behind


def test_schema_4_index_tables_become_runs_on_open(tmp_path, db_path, cli):
    """A store whose rows sit in the index_keys and containment_keys tables (schema 4) is migrated: the rows are
    rebuilt into runs from the stored signatures and fingerprints, with the same pairs and answers."""
    before, rows, containment_rows = _five_documents_stored(tmp_path, db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.executescript(
        "BEGIN; DROP TABLE run_filters; DROP TABLE run_blocks; DROP TABLE runs; DELETE FROM meta WHERE key LIKE 'runs.%';"
        "CREATE TABLE index_keys (entry INTEGER PRIMARY KEY); CREATE TABLE containment_keys (entry INTEGER PRIMARY KEY);"
        "PRAGMA user_version = 4; COMMIT;"
    )
    conn.close()
    result = cli("check")
    assert result.exit_code == 0, result.output
    with dedupdb.open(db_path) as db:
        tables = {r[0] for r in db.store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "index_keys" not in tables and "containment_keys" not in tables
        assert (db.store.index_rows(), db.store.containment_rows()) == (rows, containment_rows)
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == before


def test_schema_6_signatures_are_cut_to_16_bits_and_a_reindex_from_sources_makes_the_store_current(
    tmp_path, db_path, cli
):
    from .conftest import ENGLISH_EDITED, write

    rng = np.random.default_rng(1)
    # One text with more shingles than a sketch holds keeps a signature; the others' follow from their sketches.
    write(tmp_path / "docs" / "long.txt", " ".join(f"w{int(i)}" for i in rng.integers(0, 10**6, 1500)))
    before, rows, _ = _five_documents_stored(tmp_path, db_path)
    with dedupdb.open(db_path) as db:
        stored = dict(db.store.conn.execute("SELECT id, minhash FROM contents").fetchall())
        signatures = {cid: fp.minhash for cid, fp in db.indexer.stored_fingerprints(db.store.contents(stored)).items()}
    assert sum(blob == b"" for blob in stored.values()) == len(stored) - 1
    assert sum(len(blob) == 2 * len(signatures[cid]) for cid, blob in stored.items()) == 1
    conn = sqlite3.connect(db_path, isolation_level=None)
    # A store of schema 6 kept sketches plain (4 bytes a hash); the Elias-Fano coded ones of today's store (the
    # English texts' with their character view) came with schema 10, so those contents are left as they are.
    plain = {cid for cid, shingles, sketch in conn.execute("SELECT id, shingles, sketch FROM contents")
             if len(sketch) == 4 * min(shingles, 1024)}
    signatures = {cid: low for cid, low in signatures.items() if cid in plain}
    for cid, low in signatures.items():  # what an older version kept: every signature, 32-bit, low halves as today's
        wide = low.astype(np.uint32) | (rng.integers(0, 1 << 16, len(low)).astype(np.uint32) << 16)
        conn.execute("UPDATE contents SET minhash = ? WHERE id = ?", (wide.astype("<u4").tobytes(), cid))
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'setting.algorithm'")
    conn.execute("INSERT INTO blobs (name, data) VALUES ('corpus_idf', zeroblob(64))")  # SimHash's weights then
    conn.execute("PRAGMA user_version = 6")
    conn.close()

    opened = cli("report", "--format", "json")
    assert opened.exit_code == 0, opened.output  # opening migrates and rebuilds the index
    assert cli("check").exit_code == 0
    with dedupdb.open(db_path) as db:
        # Algorithm 3: its signatures are today's, but its SimHashes were weighed by the corpus IDF it learnt, which
        # only reading its texts again can replace. It answers what it holds meanwhile.
        assert db.outdated and db.settings.algorithm == 3 < dedupdb.config.ALGORITHM_VERSION
        assert dict(db.store.conn.execute("SELECT id, minhash FROM contents").fetchall()) == stored
        assert db.store.read_meta()["index.rebuild"] == "0"
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == before
        assert db.store.index_rows() == rows
    result = cli("query", ENGLISH_EDITED)
    assert result.exit_code == 1 and "reindex --from-sources" in result.output
    assert cli("reindex", "--from-sources").exit_code == 0
    with dedupdb.open(db_path) as db:
        assert not db.outdated and db.settings.algorithm == dedupdb.config.ALGORITHM_VERSION
        assert db.store.read_blob("corpus_idf") is None
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == before
        assert db.query(ENGLISH_EDITED)[0].path.endswith("b.txt")


def test_schema_7_pairs_lose_their_foreign_keys_and_a_content_takes_its_pairs_along(tmp_path, db_path, cli):
    before, _, _ = _five_documents_stored(tmp_path, db_path)
    assert len(before) == 2
    conn = sqlite3.connect(db_path, isolation_level=None)
    views = conn.execute("SELECT count(*) FROM duplicate_pairs").fetchone()
    conn.executescript(  # the pairs table as schema 7 had it: both sides checked, deleted with their content
        "BEGIN; PRAGMA legacy_alter_table = ON; ALTER TABLE pairs RENAME TO old_pairs;"
        "CREATE TABLE pairs (a INTEGER NOT NULL REFERENCES contents (id) ON DELETE CASCADE,"
        " b INTEGER NOT NULL REFERENCES contents (id) ON DELETE CASCADE, jaccard REAL NOT NULL, hamming INTEGER,"
        " PRIMARY KEY (a, b), CHECK (a < b)) WITHOUT ROWID;"
        "INSERT INTO pairs SELECT a, b, jaccard, hamming FROM old_pairs; DROP TABLE old_pairs; CREATE INDEX pairs_b ON pairs (b);"
        "PRAGMA user_version = 7; COMMIT;"
    )
    conn.close()

    with dedupdb.open(db_path) as db:
        conn = db.store.conn
        assert "REFERENCES" not in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'pairs'").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM duplicate_pairs").fetchone() == views
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == before
    (tmp_path / "docs" / "b.txt").unlink()  # its content leaves, and with it its pair
    assert cli("add", str(tmp_path / "docs")).exit_code == 0
    with dedupdb.open(db_path) as db:
        assert len(list(db.pairs())) == 1
        stored = db.store.conn.execute("SELECT count(*) FROM pairs").fetchone()[0]
        assert stored == 1
    assert cli("check").exit_code == 0


def test_schema_8_runs_take_kept_filters_from_the_next_add(tmp_path, db_path, cli):
    """Runs written before filters were kept (schema 8) have none: the next add builds those it probes by reading
    the runs once and keeps them; every run written from then on keeps its own."""
    from .conftest import CHINESE_OTHER, write

    before, rows, _ = _five_documents_stored(tmp_path, db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.executescript("BEGIN; DROP TABLE run_filters; PRAGMA user_version = 8; COMMIT;")
    conn.close()
    write(tmp_path / "more" / "f.txt", CHINESE_OTHER)
    assert cli("add", str(tmp_path / "more")).exit_code == 0
    with dedupdb.open(db_path) as db:
        conn = db.store.conn
        assert migrate.schema_version(conn) == len(migrate.available())
        index_runs = {r for (r,) in conn.execute("SELECT id FROM runs WHERE family = 0")}
        assert index_runs and index_runs <= {r for (r,) in conn.execute("SELECT run FROM run_filters")}
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == before
        assert db.store.index_rows() > rows
    assert cli("check").exit_code == 0


def test_schema_10_contents_get_no_checksum_until_reindex_gives_them_one(tmp_path, db_path, cli):
    """Opening a store of schema 10 adds the checksum column and computes nothing: its contents are read and
    checked as before; 'dedupdb reindex' fills the checksums in. The migration run again adds nothing."""
    before, rows, _ = _five_documents_stored(tmp_path, db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    stored = conn.execute("SELECT id, checksum FROM contents ORDER BY id").fetchall()
    conn.executescript("BEGIN; ALTER TABLE contents DROP COLUMN checksum; PRAGMA user_version = 10; COMMIT;")
    conn.close()

    result = cli("check", "--format", "json")
    assert result.exit_code == 0, result.output
    assert '"without_checksums": 5' in result.output
    with dedupdb.open(db_path) as db:
        assert migrate.schema_version(db.store.conn) == len(migrate.available())
        assert db.store.count_without_checksums() == 5
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == before
        db.reindex()
        assert db.store.conn.execute("SELECT id, checksum FROM contents ORDER BY id").fetchall() == stored
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA user_version = 10")
    conn.close()
    assert cli("check").exit_code == 0
    with dedupdb.open(db_path) as db:
        assert migrate.schema_version(db.store.conn) == len(migrate.available())
        assert db.store.count_without_checksums() == 0


def test_a_store_of_algorithm_6_takes_texts_as_before_until_reindexed_to_7(tmp_path, db_path, cli, monkeypatch):
    """Algorithm 7 changed only who segments Chinese words (jieba-rs for jieba's Python code), so a store of 6 is
    not outdated: it adds and answers, segmenting with jieba's code, until reindex --from-sources moves it to 7."""
    from dedupdb.sketch import fingerprint

    from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, write

    used = []
    for name in ("chinese_words", "jieba_words"):
        real = getattr(fingerprint, name)
        monkeypatch.setattr(fingerprint, name, lambda text, real=real, name=name: used.append(name) or real(text))
    rest = (CHINESE_OTHER + "他用c#和c++写程序,价格在60-70元之间。樱花香味,香香的,618搞活动买的很划算。一次就买了好多,"
            "还送了电吹风。屏幕挺大,运行速度一般般吧,一分钱一分货,反应相对还是慢了一拍。")  # 60 words and more: a SimHash
    long_text, edited = (text + rest for text in (CHINESE, CHINESE_EDITED))
    folder = tmp_path / "docs"
    write(folder / "a.txt", long_text)
    with dedupdb.open(db_path, algorithm=6) as db:
        db.add([folder], workers=0)
        first = db.store.conn.execute("SELECT simhash FROM contents").fetchone()[0]
    assert first is not None and set(used) == {"jieba_words"}
    write(folder / "b.txt", edited)
    assert cli("add", str(folder), "--workers", "0").exit_code == 0
    with dedupdb.open(db_path) as db:
        assert not db.outdated and db.settings.algorithm == 6
        assert [Path(p.path).name for p in db.query(edited)][:1] == ["b.txt"]
        pairs = sorted((p.a, p.b, p.jaccard) for p in db.pairs())
    assert len(pairs) == 1 and set(used) == {"jieba_words"}
    stats = cli("stats")
    assert stats.exit_code == 0 and "made by algorithm 6" in stats.stdout and "reindex --from-sources" in stats.stdout
    used.clear()
    assert cli("reindex", "--from-sources").exit_code == 0
    assert set(used) == {"chinese_words"}
    with dedupdb.open(db_path) as db:
        assert not db.outdated and db.settings.algorithm == dedupdb.config.ALGORITHM_VERSION == 7
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == pairs
        assert first in {row[0] for row in db.store.conn.execute("SELECT simhash FROM contents")}
    assert "made by algorithm" not in cli("stats").stdout
