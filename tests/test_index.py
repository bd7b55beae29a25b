"""Clusters stay right as documents arrive, change and vanish; an interrupted ingest loses nothing stored."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dedupdb
import dedupdb.index.check
import dedupdb.index.indexer
import dedupdb.ingest.pipeline as pipeline
from dedupdb.index.clusters import UnionFind, components
from dedupdb.text.hashing import content_hash
from dedupdb.text.normalize import normalize
from dedupdb.ingest.records import RecordOptions

from .conftest import ENGLISH, ENGLISH_OTHER, interrupt_batch, write

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
    # a ~ b and b ~ c (Jaccard 0.83 and 0.80), but a and c are further apart (0.66): b bridges them.
    a = " ".join(WORDS)
    b = " ".join(_replace(WORDS, [5, 6, 7]))
    c = " ".join(_replace(_replace(WORDS, [5, 6, 7]), [20, 21, 22]))
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
    # A commit every batch (grouping is tested on its own); the third's work, written inside its transaction
    # before the interrupt, must vanish too.
    resume = interrupt_batch(monkeypatch, at=3, after_work=True)
    with dedupdb.open(db_path) as db:
        with pytest.raises(KeyboardInterrupt):
            db.add([folder])
    with dedupdb.open(db_path) as db:
        counts = db.store.counts()
        assert counts["documents"] == 20 and counts["files"] == 20
        integrity = db.store.conn.execute("PRAGMA integrity_check").fetchone()[0]
        assert integrity == "ok"
        resume()
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

    from dedupdb.storage.store import Store

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


# --- the runs' key filters ----------------------------------------------------------------------


def test_ingest_with_key_filters_finds_what_probing_everything_finds(tmp_path, monkeypatch):
    from dedupdb.storage import runs

    folder = tmp_path / "f"
    for i in range(len(WORDS)):
        write(folder / f"v{i:02}.txt", _variant(i))
    write(folder / "other.txt", ENGLISH_OTHER)
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 4)
    monkeypatch.setattr(runs, "MEMORY_RUN_ENTRIES", 0)  # every probe goes through the filters to the blocks
    monkeypatch.setattr(runs, "FANOUT", 1000)  # a run per batch, none merged
    found, ruled_out = [], []
    may_hold = runs.KeyBits.may_hold

    def counted(self, entries):
        held = may_hold(self, entries)
        ruled_out.append(int((~held).sum()))
        return held

    # Filters; none (a filter that holds everything: every key probed in every run); and a batch with many keys a
    # block, which passes every run read from blocks without its filter (runs.KEYS_A_BLOCK_UNFILTERED).
    for mode in ("filters", "none", "many keys a block"):
        monkeypatch.setattr(runs.KeyBits, "may_hold",
                            (lambda self, e: np.ones(len(e), bool)) if mode == "none" else counted)
        monkeypatch.setattr(runs, "KEYS_A_BLOCK_UNFILTERED", 1 if mode == "many keys a block" else 10**9)
        ruled_out.clear()
        with dedupdb.open(tmp_path / f"{mode}.db") as db:
            db.add([folder], workers=0)
            assert db.store._index.run_count() > 1
            assert (sum(ruled_out) > 0) == (mode == "filters")
            found.append(sorted((p.a.rsplit("/")[-1], p.b.rsplit("/")[-1], p.jaccard) for p in db.pairs()))
    assert found[0] == found[1] == found[2] and len(found[0]) >= len(WORDS) - 1


def test_signatures_left_out_of_the_store_give_the_same_index_rows(tmp_path, db_path):
    """A text whose sketch holds all its shingles keeps no MinHash signature: computed again from the sketch, it
    must give the very index rows the text was added with, for a rebuild and for removing them."""
    rng = np.random.default_rng(4)
    folder = tmp_path / "f"
    write(folder / "short.txt", ENGLISH)
    write(folder / "other.txt", ENGLISH_OTHER)
    write(folder / "long.txt", " ".join(f"w{int(i)}" for i in rng.integers(0, 10**6, 1500)))
    with dedupdb.open(db_path) as db:
        db.add([folder])
        kept = dict(db.store.conn.execute("SELECT shingles, length(minhash) FROM contents").fetchall())
        assert sorted(kept.values()) == [0, 0, 2 * db.settings.num_perm]
        entries = np.sort(np.concatenate(list(db.store.index_entry_chunks())))
        with db.store.transaction():
            db.indexer.rebuild()
        assert np.array_equal(np.sort(np.concatenate(list(db.store.index_entry_chunks()))), entries)
        db.forget([str(folder / "short.txt")])
        assert _index_rows(db) == len(entries) - db.banding.bands
        assert dedupdb.index.check.check_database(db).sound


def test_ingest_batch_grows_with_the_store_within_its_bounds():
    from dedupdb import config

    assert config.ingest_batch(0) == config.INGEST_BATCH
    assert config.ingest_batch(config.INGEST_BATCH * config.INGEST_BATCH_SHARE * 4) == config.INGEST_BATCH * 4
    assert config.ingest_batch(10**9) == config.MAX_INGEST_BATCH
    assert config.ingest_batch(10**9, floor=10**6) == 10**6  # a batch asked for is never cut


def test_batches_grow_as_an_add_fills_the_store_and_find_the_same_pairs(tmp_path, monkeypatch):
    import json

    from dedupdb import config
    from dedupdb.ingest.records import RecordOptions

    records = tmp_path / "r.jsonl"
    texts = [_variant(i % len(WORDS)) + f" tail{i // len(WORDS)}" for i in range(3 * len(WORDS))]
    records.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 3)
    real = pipeline.Indexer.add_documents
    found = []
    for share in (4, 10**6):  # batches of a quarter of the store, then always 3
        monkeypatch.setattr(config, "INGEST_BATCH_SHARE", share)
        sizes = []

        def counted(self, documents, *args):
            sizes.append(len(documents))
            return real(self, documents, *args)

        monkeypatch.setattr(pipeline.Indexer, "add_documents", counted)
        with dedupdb.open(tmp_path / f"{share}.db") as db:
            db.add([records], records=RecordOptions(format="jsonl"), workers=0)
            found.append(sorted((p.a, p.b, p.jaccard) for p in db.pairs()))
        if share == 4:
            assert sizes[0] == 3 and max(sizes) > 3 and sizes == sorted(sizes[:-1]) + sizes[-1:]
        else:
            assert set(sizes[:-1]) == {3}
    assert found[0] == found[1] and len(found[0]) >= len(texts)


def test_sketch_columns_hold_what_sketches_gives(tmp_path, db_path):
    """Verifying a batch reads the stored sketches as columns: the same sketches and SimHashes, texts too short
    for a SimHash included, and contents asked for but not stored left out."""
    from dedupdb.text.hashing import to_unsigned64

    folder = tmp_path / "f"
    write(folder / "a.txt", ENGLISH)
    write(folder / "b.txt", ENGLISH_OTHER)
    write(folder / "short.txt", "a few words only here")
    with dedupdb.open(db_path) as db:
        db.add([folder])
        stored = db.store.sketches(db.store.all_content_ids())
        assert any(simhash is None for _, simhash in stored.values())
        ids, values, lengths, simhashes, has_simhash = db.store.sketch_columns(sorted(stored) + [10**6])
    assert ids.tolist() == sorted(stored)
    starts = np.cumsum(lengths) - lengths
    for position, cid in enumerate(ids.tolist()):
        sketch, simhash = stored[cid]
        assert np.array_equal(values[starts[position] : starts[position] + lengths[position]], sketch)
        assert bool(has_simhash[position]) == (simhash is not None)
        assert int(simhashes[position]) == (0 if simhash is None else to_unsigned64(simhash))
    with dedupdb.open(db_path) as db:  # a damaged sketch would shift every one after it: refused
        db.store.conn.execute("UPDATE contents SET sketch = x'0102' WHERE id = (SELECT min(id) FROM contents)")
        with pytest.raises(dedupdb.errors.DatabaseError, match="damaged"):
            db.store.sketch_columns(sorted(stored))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=60),
       st.lists(st.integers(0, 40), min_size=41, max_size=41))
def test_merging_clusters_gives_the_labels_union_find_gives(edges, cluster_choice):
    """A batch's new pairs join clusters as components() over the clusters would: every cluster a pair touches
    moves under the smallest cluster id it is now connected to, and no other moves."""
    # A content's cluster is the smallest id of a group it already shares (a cluster is named by its smallest member).
    cluster_of = {c: min(c, cluster_choice[c]) for c in range(41)}
    cluster_of = {c: cluster_of[cluster_of[c]] for c in cluster_of}

    class Recorder:
        moved: dict[int, int] = {}

        def clusters_of(self, ids):
            return {i: cluster_of[i] for i in ids}

        def relabel_clusters(self, mapping):
            Recorder.moved = mapping

    indexer = object.__new__(dedupdb.index.indexer.Indexer)
    indexer.store = Recorder()
    indexer._merge_clusters(edges)
    touched = {c for e in edges for c in e}
    labels = components({cluster_of[c] for c in touched}, [(cluster_of[a], cluster_of[b]) for a, b in edges])
    assert Recorder.moved == {old: new for old, new in labels.items() if old != new}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=60),
       st.lists(st.integers(0, 29), min_size=30, max_size=30))
def test_contents_linked_before_they_are_stored_end_in_the_clusters_relabelling_gives(edges, cluster_choice):
    """A batch's new contents (30..40 here) are linked before their rows exist: the clusters they are written
    with, and the relabelling of the stored clusters (0..29), leave every content where storing them first, each
    its own cluster, then relabelling would."""
    cluster_of = {c: min(c, cluster_choice[c]) for c in range(30)}
    cluster_of = {c: cluster_of[cluster_of[c]] for c in cluster_of}
    new = list(range(30, 41))

    class Recorder:
        moved: dict[int, int] = {}

        def clusters_of(self, ids):
            assert not set(ids) & set(new), "a content without a row was looked up"
            return {i: cluster_of[i] for i in ids}

        def relabel_clusters(self, mapping):
            Recorder.moved = mapping

    indexer = object.__new__(dedupdb.index.indexer.Indexer)
    indexer.store = Recorder()
    written = indexer._merge_clusters(edges, new)
    final = {c: Recorder.moved.get(k, k) for c, k in cluster_of.items()} | {c: written.get(c, c) for c in new}

    everything = {**cluster_of, **{c: c for c in new}}
    touched = {c for e in edges for c in e}
    labels = components({everything[c] for c in touched}, [(everything[a], everything[b]) for a, b in edges])
    assert final == {c: labels.get(k, k) for c, k in everything.items()}


def test_whether_a_store_holds_texts_and_how_many_at_most(tmp_path, db_path):
    """is_empty() and the estimate batches are sized by (content_id_bound) read neither a count of the contents
    (a whole index of the table: a quarter of a second at a million before it is cached): the bound is the highest
    content id, never below the count, and 0 or empty again once every text is gone."""
    records = tmp_path / "r.jsonl"
    records.write_text("".join(f'{{"id": "{i}", "text": "{t}"}}\n' for i, t in enumerate([ENGLISH, ENGLISH_OTHER])))
    with dedupdb.open(db_path) as db:
        assert db.is_empty() and db.store.content_id_bound() == 0
        db.add([records], records=RecordOptions("jsonl", id_field="id"))
        statements = []
        db.store.conn.set_trace_callback(statements.append)
        try:
            assert not db.is_empty()
            bound = db.store.content_id_bound()
        finally:
            db.store.conn.set_trace_callback(None)
        assert not any("count(" in statement.lower() for statement in statements) and statements
        count = db.store.counts()["contents"]
        assert count == 2 and bound == max(r[0] for r in db.store.conn.execute("SELECT id FROM contents")) >= count
        records.write_text("")  # the record file emptied: its documents, and so its texts, go
        db.add([records], records=RecordOptions("jsonl", id_field="id"))
        assert db.store.counts()["contents"] == 0 and db.is_empty() and db.store.content_id_bound() == 0


def test_document_counts_of_texts_repeated_in_a_batch_and_stored_before(tmp_path, db_path):
    """A batch holding a new text three times and a stored one twice: the new content is written with its
    count, the stored one's count grows, and removing documents brings both down (check agrees every time)."""
    records = tmp_path / "r.jsonl"
    lines = [ENGLISH, ENGLISH_OTHER, ENGLISH_OTHER, ENGLISH, ENGLISH + " again", ENGLISH]
    records.write_text("".join(f'{{"id": "{i}", "text": "{t}"}}\n' for i, t in enumerate(lines)))
    first = tmp_path / "first.txt"
    write(first, ENGLISH_OTHER)
    with dedupdb.open(db_path) as db:
        db.add([first])
        db.add([records], records=RecordOptions("jsonl", id_field="id"))
        counts = dict(db.store.conn.execute("SELECT hash, documents FROM contents").fetchall())
        by_text = {t: counts[content_hash(normalize(t))] for t in set(lines)}
        assert by_text == {ENGLISH: 3, ENGLISH_OTHER: 3, ENGLISH + " again": 1}
        assert db.check().sound
        records.write_text(f'{{"id": "0", "text": "{ENGLISH}"}}\n')
        db.add([records], records=RecordOptions("jsonl", id_field="id"))
        counts = dict(db.store.conn.execute("SELECT hash, documents FROM contents").fetchall())
        assert sorted(counts.values()) == [1, 1]
        assert db.check().sound
