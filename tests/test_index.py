"""Clusters stay right as documents arrive, change and vanish; an interrupted ingest loses nothing stored."""

from __future__ import annotations

import pytest

import dedupdb
import dedupdb.index
import dedupdb.pipeline as pipeline
from dedupdb.cluster import UnionFind, components

from .conftest import ENGLISH, ENGLISH_OTHER, write

WORDS = ENGLISH.split()


def _variant(i: int) -> str:
    """A chain of texts: each differs from the next by one word, so neighbours are near-duplicates."""
    words = list(WORDS)
    words[i] = f"changed{i}"
    return " ".join(words)


def _replace(words: list[str], positions: list[int]) -> list[str]:
    return [f"x{i}" if i in positions else w for i, w in enumerate(words)]


def _cluster_sets(db) -> list[set[str]]:
    return sorted(({m.key.rsplit("/", 1)[-1] for m in c.members} for c in db.clusters(related=True)), key=sorted)


def test_union_find_components():
    uf = UnionFind()
    for a, b in [(5, 3), (3, 9), (1, 2)]:
        uf.union(a, b)
    assert uf.find(9) == 3 and uf.find(2) == 1
    assert components([1, 2, 3, 5, 9, 7], [(5, 3), (3, 9), (1, 2)]) == {1: 1, 2: 1, 3: 3, 5: 3, 9: 3, 7: 7}


def test_vanished_bridge_splits_cluster(tmp_path, db_path):
    folder = tmp_path / "chain"
    # a ~ b and b ~ c (Jaccard 0.79), but a and c are further apart (0.62): b bridges them.
    a = " ".join(WORDS)
    b = " ".join(_replace(WORDS, [5, 6]))
    c = " ".join(_replace(_replace(WORDS, [5, 6]), [20, 21]))
    for name, text in (("a.txt", a), ("b.txt", b), ("c.txt", c), ("other.txt", ENGLISH_OTHER)):
        write(folder / name, text)
    with dedupdb.open(db_path, threshold=0.7) as db:
        db.add([folder])
        keys = {frozenset(k.rsplit("/", 1)[-1] for k in (p.a, p.b)) for p in db.pairs()}
        assert {frozenset({"a.txt", "b.txt"}), frozenset({"b.txt", "c.txt"})} <= keys
        assert frozenset({"a.txt", "c.txt"}) not in keys
        assert _cluster_sets(db) == [{"a.txt", "b.txt", "c.txt"}]
        (folder / "b.txt").unlink()
        summary = db.add([folder])
        assert [p.rsplit("/", 1)[-1] for p in summary.missing] == ["b.txt"]
        assert _cluster_sets(db) == []
        write(folder / "b.txt", b)  # it comes back: the chain joins again
        db.add([folder])
        assert _cluster_sets(db) == [{"a.txt", "b.txt", "c.txt"}]


def test_changed_file_leaves_its_cluster(tmp_path, db_path):
    folder = tmp_path / "f"
    for i in range(3):
        write(folder / f"v{i}.txt", _variant(i))
    with dedupdb.open(db_path) as db:
        db.add([folder])
        assert _cluster_sets(db) == [{"v0.txt", "v1.txt", "v2.txt"}]
        write(folder / "v1.txt", ENGLISH_OTHER)
        assert len(db.add([folder]).updated) == 1
        assert _cluster_sets(db) == [{"v0.txt", "v2.txt"}]
        assert db.store.counts()["contents"] == 3


def _index_rows(db) -> int:
    return db.store.index_rows()


def test_forgotten_content_leaves_the_indexes(tmp_path, db_path):
    long_text = " ".join(f"{w}{i}" for i, w in enumerate(WORDS * 3))  # enough words for a SimHash
    folder = tmp_path / "f"
    write(folder / "long.txt", long_text)
    write(folder / "short.txt", ENGLISH_OTHER)
    with dedupdb.open(db_path) as db:
        db.add([folder])
        bands = db.banding.bands
        assert _index_rows(db) == 2 * bands + 10
        assert db.query(long_text)[0].jaccard == 1.0
        db.forget([str(folder / "long.txt")])
        assert _index_rows(db) == bands
        assert db.query(long_text) == []
        db.forget([str(folder / "short.txt")])
        assert _index_rows(db) == 0


def test_interrupted_ingest_keeps_committed_batches_and_resumes(tmp_path, db_path, monkeypatch):
    folder = tmp_path / "many"
    for i in range(25):
        write(folder / f"doc{i:02}.txt", _variant(i % len(WORDS)) + f" number {i}")
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 10)
    monkeypatch.setattr(pipeline, "COMMIT_SECONDS", 0)  # commit every batch (grouping is tested on its own)
    real = pipeline.Indexer.add_documents
    calls = {"n": 0}

    def crash_on_third_batch(self, documents, *args):
        calls["n"] += 1
        if calls["n"] == 3:
            real(self, documents, *args)  # half-done work inside the transaction must vanish too
            raise KeyboardInterrupt
        return real(self, documents, *args)

    monkeypatch.setattr(pipeline.Indexer, "add_documents", crash_on_third_batch)
    with dedupdb.open(db_path) as db:
        with pytest.raises(KeyboardInterrupt):
            db.add([folder])
    with dedupdb.open(db_path) as db:
        counts = db.store.counts()
        assert counts["documents"] == 20 and counts["files"] == 20
        integrity = db.store.conn.execute("PRAGMA integrity_check").fetchone()[0]
        assert integrity == "ok"
        monkeypatch.setattr(pipeline.Indexer, "add_documents", real)
        summary = db.add([folder])
        assert (len(summary.added), summary.unchanged) == (5, 20)
        assert db.store.counts()["documents"] == 25


def test_interrupt_through_cli_exits_130(cli, tmp_path, monkeypatch):
    write(tmp_path / "a.txt", ENGLISH)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.Ingest, "run", interrupted)
    result = cli("add", str(tmp_path / "a.txt"))
    assert result.exit_code == 130 and "Interrupted" in result.output


def test_grouped_commits_commit_on_schedule_and_roll_back_together(db_path):
    import sqlite3

    from dedupdb.store import Store

    def seen_elsewhere(key: str) -> str | None:
        other = sqlite3.connect(db_path)
        try:
            row = other.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return row[0] if row else None
        finally:
            other.close()

    store = Store.open(db_path)
    with store.grouped_commits(3600):
        with store.transaction():
            store.write_meta({"t.first": "1"})
        assert seen_elsewhere("t.first") is None  # inside the window: not committed yet
    assert seen_elsewhere("t.first") == "1"      # committed when the block ended
    with pytest.raises(KeyboardInterrupt), store.grouped_commits(3600):
        with store.transaction():
            store.write_meta({"t.kept": "1"})
        raise KeyboardInterrupt                  # between transactions: the finished one is kept
    assert seen_elsewhere("t.kept") == "1"
    with pytest.raises(RuntimeError), store.grouped_commits(3600):
        with store.transaction():
            store.write_meta({"t.lost": "1"})
        with store.transaction():
            store.write_meta({"t.failed": "1"})
            raise RuntimeError                   # inside one: everything since the last commit goes
    assert seen_elsewhere("t.lost") is None and seen_elsewhere("t.failed") is None
    with store.grouped_commits(0):
        with store.transaction():
            store.write_meta({"t.second": "1"})
        assert seen_elsewhere("t.second") == "1"  # window over: committed at once
    store.close()


# --- the in-memory filter of stored keys --------------------------------------------------------


def test_key_filter_never_rules_out_an_added_key():
    import numpy as np

    from dedupdb.keyfilter import KeyFilter
    from dedupdb.store import INDEX_KEY_BITS

    rng = np.random.default_rng(7)
    added = rng.integers(0, 2**INDEX_KEY_BITS, 50_000, dtype=np.uint64)
    key_filter = KeyFilter(INDEX_KEY_BITS)
    key_filter.add(np.concatenate([added, added[:10]]))  # repeats within one call are kept too
    assert key_filter.may_hold(added).all()
    others = rng.integers(0, 2**INDEX_KEY_BITS, 50_000, dtype=np.uint64)
    assert key_filter.may_hold(others).mean() < 0.01  # 50,000 keys set few of the 2**28 bits


def test_ingest_with_the_key_filter_finds_what_probing_everything_finds(tmp_path, monkeypatch):
    folder = tmp_path / "f"
    for i in range(len(WORDS)):
        write(folder / f"v{i:02}.txt", _variant(i))
    write(folder / "other.txt", ENGLISH_OTHER)
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 4)
    found = []
    for filtered in (True, False):
        if not filtered:  # no filter: every key is probed
            monkeypatch.setattr(dedupdb.index.Indexer, "_key_filter", lambda self: None)
        with dedupdb.open(tmp_path / f"{filtered}.db") as db:
            db.add([folder], workers=0)
            assert (db.indexer._filter is not None) == filtered
            found.append(sorted((p.a.rsplit("/")[-1], p.b.rsplit("/")[-1], p.jaccard) for p in db.pairs()))
    assert found[0] == found[1] and len(found[0]) >= len(WORDS) - 1


def test_key_filter_is_dropped_when_another_connection_writes(tmp_path, db_path):
    import sqlite3

    write(tmp_path / "a.txt", ENGLISH)
    with dedupdb.open(db_path) as db:
        db.add([tmp_path / "a.txt"])
        assert db.indexer._filter is not None  # made for the empty index
        other = sqlite3.connect(db_path)
        other.execute("INSERT INTO meta (key, value) VALUES ('elsewhere', '1')")
        other.commit()
        other.close()
        # Rows written elsewhere would be missing from the filter: it goes, and comes back only once this
        # connection has written a quarter as many rows as the index holds, read from the index itself.
        assert db.indexer._key_filter() is None
        for i in range(5):
            write(tmp_path / "more" / f"{i}.txt", f"{ENGLISH_OTHER} {i} " + _variant(i))
        db.add([tmp_path / "more"], workers=0)
        assert db.indexer._key_filter() is not None
        assert all(db.indexer._filter.may_hold(keys).all() for keys in db.store.index_key_chunks())
