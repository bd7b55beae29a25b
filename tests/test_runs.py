"""The sorted runs that hold index and containment rows (runs.py), against a plain set of integers."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest

from dedupdb.storage import blocks as block_codec
from dedupdb.storage import runs as runs_module
from dedupdb.storage.entries import CONTENT_ID_BITS, CONTENT_ID_MASK
from dedupdb.storage.store import Store


@pytest.fixture
def small_runs(monkeypatch):
    """Tiny blocks and levels, so a few thousand rows make many blocks, levels and merges."""
    monkeypatch.setattr(block_codec, "BLOCK_ENTRIES", 7)
    monkeypatch.setattr(block_codec, "COMPACT_BLOCK_ENTRIES", 3)
    monkeypatch.setattr(runs_module, "LEVEL_BASE", 40)
    monkeypatch.setattr(runs_module, "_READ_BLOCKS", 3)
    monkeypatch.setattr(runs_module, "_READ_AT_ONCE", 2)


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "runs.db")
    from dedupdb.storage import schema as migrate

    migrate.apply(s.conn, migrate.available())
    yield s
    s.close()


def _within(model: set[int], lows, highs) -> list[int]:
    return sorted(v for v in model if any(lo <= v <= hi for lo, hi in zip(lows, highs)))


@pytest.mark.parametrize("memory_entries", [0, 100, runs_module.MEMORY_RUN_ENTRIES])
def test_runs_match_a_set_through_inserts_deletes_and_merges(store, small_runs, monkeypatch, memory_entries, decoding):
    """Against a set, with no run held in memory, some, or all the small ones (lookups read blocks, memory or
    both), and as another connection reads the blocks."""
    monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", memory_entries)
    rng = random.Random(7)
    runs = store._index
    model: set[int] = set()
    for step in range(120):
        with store.transaction():
            if step % 5 == 4 and model:
                gone = rng.sample(sorted(model), min(len(model), rng.randint(1, 30))) + [rng.randrange(1 << 40)]
                runs.delete(np.array(gone))
                model -= set(gone)
            else:
                fresh = {rng.randrange(1 << 40) for _ in range(rng.randint(1, 60))} - model
                runs.insert(np.array(sorted(fresh), np.int64))
                model |= fresh
        lows = np.unique(np.array([rng.randrange(1 << 40) for _ in range(20)], np.int64))
        highs = lows + (1 << 34)
        overlapping = np.concatenate(([True], lows[1:] > highs[:-1]))
        lows, highs = lows[overlapping], highs[overlapping]
        assert runs.lookup(lows, highs).tolist() == _within(model, lows.tolist(), highs.tolist())
        # An add's probe: every entry under each of some keys, stored ones and others, through the runs' filters.
        keys = {rng.choice(sorted(model)) >> CONTENT_ID_BITS for _ in range(8)} if model else set()
        starts = np.array(sorted(keys | {rng.randrange(1 << 10) for _ in range(8)}), np.int64) << CONTENT_ID_BITS
        assert runs.lookup(starts, starts + CONTENT_ID_MASK, filtered=True).tolist() == _within(
            model, starts.tolist(), (starts + CONTENT_ID_MASK).tolist())
    everything = np.array(sorted(model), np.int64)
    assert runs.count() == len(model)
    assert np.array_equal(np.sort(np.concatenate(list(runs.chunks()))), everything)
    assert np.array_equal(runs.holds(np.concatenate((everything[:50], [-5, 1 << 50]))), everything[:50])
    assert runs.lookup(everything, everything).tolist() == everything.tolist()
    # Merges kept the levels small: never FANOUT runs of one level.
    levels = [r.level for r in runs._current().values()]
    assert all(levels.count(level) < runs_module.FANOUT for level in set(levels))
    assert len(levels) < 20 and max(levels) >= 2
    # What was merged in memory is what the blocks hold, as another connection reads them.
    assert runs.faults() == []
    other = Store.open(store.path)
    try:
        assert np.array_equal(np.sort(np.concatenate(list(other._index.chunks()))), everything)
    finally:
        other.close()


def test_a_rolled_back_change_is_forgotten(store, small_runs):
    runs = store._index
    with store.transaction():
        runs.insert(np.arange(0, 500, 3))
    with pytest.raises(RuntimeError):
        with store.transaction():
            runs.insert(np.arange(1, 500, 3))
            runs.delete(np.arange(0, 100, 3))
            assert len(runs.lookup(np.array([0]), np.array([499]))) == 2 * 167 - 34
            raise RuntimeError
    assert runs.lookup(np.array([0]), np.array([499])).tolist() == list(range(0, 500, 3))


def test_another_connection_sees_each_change(tmp_path, store, small_runs):
    other = Store.open(tmp_path / "runs.db")
    try:
        assert other._index.count() == 0 and len(other._index.lookup(np.array([0]), np.array([10**6]))) == 0
        with store.transaction():
            store._index.insert(np.arange(1000))
        assert other._index.lookup(np.array([10]), np.array([20])).tolist() == list(range(10, 21))
        with store.transaction():
            store._index.delete(np.arange(10, 15))
        assert other._index.lookup(np.array([10]), np.array([20])).tolist() == list(range(15, 21))
        with other.transaction():
            other._index.insert(np.arange(2000, 2100))
        assert store._index.lookup(np.array([1990]), np.array([3000])).tolist() == list(range(2000, 2100))
    finally:
        other.close()


def test_families_are_apart(store):
    with store.transaction():
        store._index.insert(np.arange(10))
        store._containment.insert(np.arange(5, 20))
    assert store._index.count() == 10 and store._containment.count() == 15
    with store.transaction():
        store._index.clear()
    assert store._index.count() == 0 and store._containment.lookup(np.array([0]), np.array([100])).tolist() == list(range(5, 20))


def test_level_of_groups_runs_by_size():
    base, fanout = runs_module.LEVEL_BASE, runs_module.FANOUT
    assert runs_module.level_of(1) == 0 and runs_module.level_of(base) == 0
    assert runs_module.level_of(base + 1) == 1 and runs_module.level_of(base * fanout) == 1
    assert runs_module.level_of(base * fanout + 1) == 2


def test_filtered_lookups_find_what_unfiltered_ones_do(tmp_path, store, small_runs):
    """Key filters made as runs are written, and made again from the blocks by another connection, never rule out
    a stored key; and they do rule out most absent ones."""
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 1 << 33, 3000, dtype=np.int64)
    entries = (keys << 30) | rng.integers(1, 1 << 30, len(keys))
    with store.transaction():
        for part in np.array_split(entries, 30):
            store._index.insert(part)
    other = Store.open(tmp_path / "runs.db")
    try:
        probe_keys = np.unique(np.concatenate((keys[::3], rng.integers(0, 1 << 33, 3000, dtype=np.int64))))
        lows = probe_keys << 30
        highs = lows | ((1 << 30) - 1)
        expected = store._index.lookup(lows, highs)
        assert len(expected) >= 1000
        for runs in (store._index, other._index):
            assert np.array_equal(runs.lookup(lows, highs, filtered=True), expected)
        absent = np.setdiff1d(probe_keys, keys)
        passed = sum(int(run.filter.may_hold(absent << 30).sum()) for run in other._index._current().values())
        bound = 1 - np.exp(-1 / runs_module.FILTER_BITS_PER_ENTRY)  # the odds an absent key passes, at most (runs.py)
        assert passed < bound * len(absent) * other._index.run_count()
    finally:
        other.close()


def test_filters_are_kept_while_only_this_connection_writes(store, small_runs):
    """Each family marks its own changes: writing containment rows leaves the index's filters (and fences) be."""
    with store.transaction():
        store._index.insert(np.arange(0, 1 << 40, 1 << 30))
    store._index.lookup(np.array([0]), np.array([(1 << 30) - 1]), filtered=True)
    filters = [run.filter for run in store._index._current().values()]
    with store.transaction():
        store._containment.insert(np.arange(100))
        store._index.insert(np.arange(5, 1 << 40, 1 << 30))
    kept = [run.filter for run in store._index._current().values()]
    assert all(any(f is k for k in kept) for f in filters)


def test_a_merge_lets_go_of_the_merged_runs_filters_and_rows_before_it_writes(store, small_runs, monkeypatch):
    """What bounds an add's memory at a large merge: the runs merged are read from their blocks, so their filters
    and copies in memory are dropped before the new run's filter fills, not held beside it."""
    monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", 100)
    merging, seen = [], []
    real_merge, real_reader = runs_module.Runs._merge, runs_module._RunReader.__init__

    def spying_merge(self, runs, merged, whole=None):
        merging.append(merged)
        try:
            return real_merge(self, runs, merged, whole)
        finally:
            merging.pop()

    def spying_reader(self, owner, run):
        if merging:
            seen.append((run.filter, run.data))
        real_reader(self, owner, run)

    monkeypatch.setattr(runs_module.Runs, "_merge", spying_merge)
    monkeypatch.setattr(runs_module._RunReader, "__init__", spying_reader)
    rng = np.random.default_rng(31)
    runs, model = store._index, set()
    for _ in range(runs_module.FANOUT):
        batch = rng.integers(0, 1 << 45, 30)
        with store.transaction():
            runs.insert(batch)
        model.update(batch.tolist())
        lows = np.array(sorted(model), np.int64)
        with store.transaction():  # as an add probes: every run gets its filter and a copy of its rows
            assert np.array_equal(runs.lookup(lows, lows, filtered=True), lows)
    assert len(seen) == runs_module.FANOUT and all(f is None and d is None for f, d in seen)
    everything = np.array(sorted(model), np.int64)
    assert runs.run_count() == 1 and np.array_equal(runs.lookup(everything, everything, filtered=True), everything)
    assert runs.faults() == []


def test_runs_held_in_memory_merge_there_into_the_blocks_a_merge_from_blocks_writes(tmp_path, small_runs, monkeypatch):
    """An add's small runs are merged from the rows it holds, reading no block, and the merged run stays in memory;
    the blocks written are byte for byte those of a merge that reads the runs back from their blocks."""
    def build(path, memory_entries):
        monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", memory_entries)
        store = Store.open(path)
        from dedupdb.storage import schema as migrate

        migrate.apply(store.conn, migrate.available())
        rng = np.random.default_rng(5)
        readers = []
        real_reader = runs_module._RunReader.__init__

        def counting_reader(self, owner, run):
            readers.append(run.id)
            real_reader(self, owner, run)

        monkeypatch.setattr(runs_module._RunReader, "__init__", counting_reader)
        try:
            for _ in range(runs_module.FANOUT ** 2):
                with store.transaction():
                    store._index.insert(rng.integers(0, 1 << 45, 35))
            held = [r.data is not None for r in store._index._current().values()]
            blocks = store.conn.execute("SELECT first, entries, data FROM run_blocks ORDER BY id").fetchall()
            assert store._index.faults() == []
            return readers, held, blocks
        finally:
            monkeypatch.setattr(runs_module._RunReader, "__init__", real_reader)
            store.close()

    monkeypatch.setattr(runs_module, "MERGE_IN_MEMORY_ENTRIES", 10_000)
    readers, held, in_memory = build(tmp_path / "memory.db", 10_000)
    assert readers == [] and held == [True]  # FANOUT squared runs merged twice over, no block read
    readers, held, from_blocks = build(tmp_path / "blocks.db", 0)
    assert len(readers) == runs_module.FANOUT ** 2 + runs_module.FANOUT and held == [False]
    assert in_memory == from_blocks
    # A merge larger than MERGE_IN_MEMORY_ENTRIES reads its runs from their blocks though it holds them: the first
    # merges (of FANOUT x 35 rows) are made in memory, the last (of FANOUT times that) from blocks.
    monkeypatch.setattr(runs_module, "MERGE_IN_MEMORY_ENTRIES", 200)
    readers, held, bounded = build(tmp_path / "bounded.db", 10_000)
    assert len(readers) == runs_module.FANOUT and held == [False] and bounded == from_blocks


def test_a_lookup_with_many_keys_a_block_holds_no_filter_of_a_run_read_from_blocks(store, small_runs, monkeypatch):
    """An add's batch has many keys a block of the large runs: it reads them without their filters (nearly every
    block is read either way) and holds none in memory, a merged run's included; a lookup of few keys still takes
    the filter the store keeps. Both answer as an unfiltered lookup does."""
    monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", 100)
    monkeypatch.setattr(runs_module, "KEYS_A_BLOCK_UNFILTERED", 2)
    rng = np.random.default_rng(41)
    runs, model = store._index, set()
    for _ in range(2 * runs_module.FANOUT):
        batch = rng.integers(0, 1 << 45, 60)
        with store.transaction():
            runs.insert(batch)
        model.update(batch.tolist())
    large = [run for run in runs._current().values() if run.entries > 100]
    assert large and all(run.filter is None for run in large)  # merged, its filter kept in the store only
    assert all(run.filter_kept for run in large)
    stored = np.array(sorted(model), np.int64)
    keys = np.unique(np.concatenate((stored[::2], rng.integers(0, 1 << 45, 400)))) >> 30
    lows, highs = keys << 30, (keys << 30) | ((1 << 30) - 1)
    expected = runs.lookup(lows, highs)
    assert len(keys) >= 2 * max(len(run.block_ids) for run in large)
    with store.transaction():
        assert np.array_equal(runs.lookup(lows, highs, filtered=True), expected)
    assert all(run.filter is None for run in large)
    few = slice(0, 3)
    with store.transaction():
        assert np.array_equal(runs.lookup(lows[few], highs[few], filtered=True), runs.lookup(lows[few], highs[few]))
    assert all(run.filter is not None for run in large)
    with store.transaction():  # many keys again: the filter read for the few is let go
        assert np.array_equal(runs.lookup(lows, highs, filtered=True), expected)
    assert all(run.filter is None for run in large)


def test_small_runs_probed_in_memory_answer_as_blocks_do(store, small_runs, monkeypatch):
    monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", 100)
    rng = np.random.default_rng(5)
    with store.transaction():
        for _ in range(12):
            store._index.insert(rng.integers(0, 1 << 45, rng.integers(20, 300)))
    lows = np.unique(rng.integers(0, 1 << 45, 400)) & ~np.int64((1 << 30) - 1)
    lows = np.unique(lows)
    highs = lows | ((1 << 30) - 1)
    expected = store._index.lookup(lows, highs)
    assert np.array_equal(store._index.lookup(lows, highs, filtered=True), expected)
    in_memory = [r for r in store._index._current().values() if r.data is not None]
    assert in_memory and all(r.entries <= 100 for r in in_memory)
    with store.transaction():  # a delete drops the copy in memory; the next probe reads the blocks again
        store._index.delete(expected[::2])
    assert np.array_equal(store._index.lookup(lows, highs, filtered=True), expected[1::2])


def test_queries_warm_a_run_up_after_a_few_lookups(store, small_runs):
    rng = np.random.default_rng(11)
    entries = rng.integers(0, 1 << 45, 400)
    with store.transaction():
        store._index.insert(entries)
    other = Store.open(store.path)
    try:
        runs = other._index
        lows = np.unique(entries[:50] & ~np.int64((1 << 30) - 1))
        highs = lows | ((1 << 30) - 1)
        expected = runs.lookup(lows, highs)
        (run,) = runs._current().values()
        assert run.filter is None  # one query: no run read whole
        for _ in range(runs_module.WARM_PROBES):
            assert np.array_equal(runs.lookup(lows, highs), expected)
        assert run.filter is not None and run.data is not None
    finally:
        other.close()


@pytest.mark.parametrize("small_filter", [True, False])
def test_a_compacted_run_warms_up_to_its_kept_filter_and_the_containment_run_to_none(store, small_runs, monkeypatch,
                                                                                     small_filter):
    """A query process probing a compacted index run many times takes the filter the store keeps for it (when no
    larger than QUERY_FILTER_BYTES), and then reads no block for most keys the run does not hold; the compacted
    containment run, which keeps none, is never read whole to make one. Every lookup finds what the first did."""
    monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", 0)  # as a large run: read from its blocks
    if not small_filter:
        monkeypatch.setattr(runs_module, "QUERY_FILTER_BYTES", 100)
    rng = np.random.default_rng(12)
    mask = ~np.int64((1 << CONTENT_ID_BITS) - 1)

    def keys(runs, count):  # hashes: spread over every key the family has
        return rng.integers(0, 1 << runs.key_bits, count) << CONTENT_ID_BITS

    stored = {}
    with store.transaction():
        for runs in (store._index, store._containment):
            stored[runs.family] = np.unique(keys(runs, 3000) | rng.integers(1, 1 << 20, 3000))
            runs.insert(stored[runs.family])
            assert runs.compact()
    other = Store.open(store.path)
    try:
        read: list[int] = []
        real = runs_module.Runs._read_joined
        monkeypatch.setattr(runs_module.Runs, "_read_joined",
                            lambda self, ids, *a: read.append(len(ids)) or real(self, ids, *a))
        for runs in (other._index, other._containment):
            entries = stored[runs.family]
            absent = np.setdiff1d(np.unique(keys(runs, 200)), entries & mask)
            lows = np.unique(np.concatenate([entries[:40] & mask, absent]))
            highs = lows | ((1 << CONTENT_ID_BITS) - 1)
            (run,) = runs._current().values()
            kept = run.filter_kept = runs is other._index  # as an add that let the filter go from memory knows
            read.clear()
            expected = runs.lookup(lows, highs)
            cold = sum(read)
            for _ in range(runs_module.WARM_PROBES + 1):
                read.clear()
                assert np.array_equal(runs.lookup(lows, highs), expected)
            if runs is other._index and small_filter:  # blocks read by the last lookup: at most half the absent
                assert run.filter is not None and run.data is None  # keys pass
                assert sum(read) < cold - len(absent) // 2
            else:
                assert run.filter is None and run.data is None and sum(read) == cold
            assert run.filter_kept == kept  # a filter too large to take is still known to be kept
    finally:
        other.close()


def test_blocks_are_packed_as_their_entries_allow_and_read_back_whole(store, small_runs, decoding):
    """A block's gaps and ids split 4, 5 or 6 bytes an entry between them (and a byte a block), as the largest of
    each allows; sparse keys are kept whole. One run may hold blocks of every layout, and reading any mix of them
    gives the entries back in order."""
    rng = np.random.default_rng(2)
    shift = CONTENT_ID_BITS
    dense_small = (np.arange(0, 70, dtype=np.int64) << shift) | rng.integers(0, 1 << 24, 70)           # 4
    spread_small = ((1000 + np.arange(0, 70, dtype=np.int64) * 300) << shift) | rng.integers(1 << 23, 1 << 24, 70)  # 5
    spread_large = ((50000 + np.arange(0, 70, dtype=np.int64) * 2000) << shift) | rng.integers(1 << 29, 1 << 30, 70)  # 6
    sparse = (np.arange(1, 71, dtype=np.int64) << (shift + 30)) | rng.integers(0, 1 << 30, 70)          # whole
    everything = np.unique(np.concatenate((dense_small, spread_small, spread_large, sparse)))
    runs = store._index
    with store.transaction():
        runs.insert(everything)
    layouts = {(length // count, length % count) for length, count in
               store.conn.execute("SELECT length(data), entries FROM run_blocks WHERE entries > 1")}
    assert {(4, 1), (5, 1), (6, 1), (8, 0)} <= layouts and layouts <= {(4, 1), (5, 1), (6, 1), (8, 0)}
    _assert_reads(runs, everything)
    with store.transaction():
        runs.delete(everything[::4])
    assert np.array_equal(np.sort(np.concatenate(list(runs.chunks()))), np.setdiff1d(everything, everything[::4]))
    assert runs.faults() == []
    store.conn.execute("UPDATE run_blocks SET data = substr(data, 1, length(data) - 1) WHERE id = (SELECT min(id) FROM run_blocks)")
    assert any("bytes for" in fault for fault in runs.faults())


def _assert_reads(runs, everything: np.ndarray) -> None:
    """Read whole, looked up by key ranges and checked, the runs hold exactly these entries: as read from their
    blocks, not as this connection holds them in memory."""
    shift = CONTENT_ID_BITS
    runs._runs = None
    assert np.array_equal(np.sort(np.concatenate(list(runs.chunks()))), everything)
    lows = everything[::9]
    assert runs.lookup(lows, lows + (1 << shift) - 1).tolist() == [
        v for v in everything.tolist() if any(lo <= v < lo + (1 << shift) for lo in lows.tolist())
    ]
    assert runs.faults() == []


def test_blocks_packed_as_stores_of_before_are_read(store, small_runs, decoding):
    """Blocks of the two packed layouts written before the split ones (a 16-bit gap, and a 24- or 32-bit id) are
    read as they were, beside split ones."""
    rng = np.random.default_rng(4)
    shift = CONTENT_ID_BITS
    small_ids = ((np.arange(0, 60, dtype=np.int64) * 900) << shift) | rng.integers(0, 1 << 24, 60)
    large_ids = ((60000 + np.arange(0, 60, dtype=np.int64) * 900) << shift) | rng.integers(1 << 24, 1 << 30, 60)
    everything = np.unique(np.concatenate((small_ids, large_ids)))
    runs = store._index
    with store.transaction():
        runs.insert(everything)
    rows = store.conn.execute("SELECT id, first, entries, data FROM run_blocks ORDER BY id").fetchall()
    for block_id, first, count, data in rows[::2]:  # every other block as a store of before would hold it
        entries = block_codec.decode_block(first, count, data)
        keys, ids = entries >> shift, entries & ((1 << shift) - 1)
        layout = block_codec.GAP_AND_ID24 if ids.max() < 1 << 24 else block_codec.GAP_AND_ID32
        packed = np.zeros(count, layout)
        packed["gap"] = np.diff(keys, prepend=keys[:1])
        if layout is block_codec.GAP_AND_ID24:
            packed["id_low"], packed["id_high"] = ids & 0xFFFF, ids >> 16
        else:
            packed["id"] = ids
        store.conn.execute("UPDATE run_blocks SET data = ? WHERE id = ?", (packed.tobytes(), block_id))
    widths = {length // count for length, count in
              store.conn.execute("SELECT length(data), entries FROM run_blocks WHERE length(data) % entries = 0")}
    assert widths - {8} == {5, 6}  # (a block of one entry is kept whole)
    _assert_reads(runs, everything)


def test_filters_are_kept_so_another_process_reads_no_block_to_filter(tmp_path, store, small_runs, monkeypatch):
    """A run keeps the filter it was written with: a filtered lookup by another connection (a later add) takes it
    instead of reading the run whole, and finds what an unfiltered one does. A run kept without one (a store from
    before) has it built by its first filtered lookup, inside the write, and kept."""
    monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", 0)  # no run read whole into memory either
    rng = np.random.default_rng(9)
    keys = rng.integers(0, 1 << 33, 2000, dtype=np.int64)
    with store.transaction():
        for part in np.array_split((keys << 30) | rng.integers(1, 1 << 30, len(keys)), 9):
            store._index.insert(part)
        store._containment.insert(np.arange(1, 500))  # containment runs are never probed filtered: none kept
    runs_ids = [r.id for r in store._index._current().values()]
    kept = dict(store.conn.execute("SELECT run, bits FROM run_filters").fetchall())
    assert sorted(kept) == sorted(runs_ids)
    lows = np.unique(np.concatenate((keys[::4], rng.integers(0, 1 << 33, 500)))) << 30
    highs = lows | ((1 << 30) - 1)
    expected = store._index.lookup(lows, highs)

    def no_reading(*args):
        raise AssertionError("a run read whole to build its filter")

    other = Store.open(store.path)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(runs_module.Runs, "_run_chunks", no_reading)
            with other.transaction():
                assert np.array_equal(other._index.lookup(lows, highs, filtered=True), expected)
    finally:
        other.close()

    store.conn.execute("DELETE FROM run_filters WHERE run = ?", (runs_ids[0],))
    fresh = Store.open(store.path)
    try:
        with fresh.transaction():
            assert np.array_equal(fresh._index.lookup(lows, highs, filtered=True), expected)
        rebuilt = fresh.conn.execute("SELECT bits FROM run_filters WHERE run = ?", (runs_ids[0],)).fetchone()
        assert rebuilt is not None and rebuilt[0] == kept[runs_ids[0]]
    finally:
        fresh.close()
    with store.transaction():  # merged away, a run's filter goes with it
        for _ in range(runs_module.FANOUT):
            store._index.insert(rng.integers(0, 1 << 60, 50))
    live = {r.id for r in store._index._current().values()}
    assert {run for (run,) in store.conn.execute("SELECT run FROM run_filters")} == live


def test_a_damaged_filter_is_named_and_never_trusted(store, small_runs):
    """A kept filter that would hide stored keys makes lookups miss rows: check names it; one of a size no filter
    has is named too and built again instead of being used."""
    entries = np.arange(1, 1 << 40, 1 << 31, dtype=np.int64)
    with store.transaction():
        store._index.insert(entries)
    (run_id,) = [r.id for r in store._index._current().values()]
    (size,) = store.conn.execute("SELECT length(bits) FROM run_filters").fetchone()
    store.conn.execute("UPDATE run_filters SET bits = zeroblob(?)", (size,))
    assert any("filter hides entries" in fault for fault in store._index.faults())
    for damaged in ("x'00ff'", "x''", "'text'"):
        store.conn.execute(f"UPDATE run_filters SET bits = {damaged}")
        assert any("kept filter is not a filter" in fault for fault in store._index.faults())
        other = Store.open(store.path)
        try:
            with other.transaction():  # built again from the blocks, and kept in place of the damaged one
                assert np.array_equal(other._index.lookup(entries, entries, filtered=True), entries)
        finally:
            other.close()
        assert store._index.faults() == []
    store.conn.execute("PRAGMA foreign_keys = OFF")  # as a hand-made change could leave it
    store.conn.execute("INSERT INTO run_filters (run, bits) VALUES (?, zeroblob(128))", (run_id + 100,))
    assert "1 kept filters belong to no run" in store.run_faults()


def test_a_filter_built_for_queries_is_kept_by_the_next_add(store, small_runs, monkeypatch):
    """A run without a kept filter, warmed up by queries (its filter built in memory, outside any write), has
    that filter kept by this connection's next filtered lookup."""
    monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", 0)
    entries = np.arange(1, 1 << 40, 1 << 31, dtype=np.int64)
    with store.transaction():
        store._index.insert(entries)
    store.conn.execute("DELETE FROM run_filters")
    reader = Store.open(store.path)
    try:
        for _ in range(runs_module.WARM_PROBES + 1):
            reader._index.lookup(entries[:3], entries[:3])
        assert all(r.filter is not None for r in reader._index._current().values())
        assert store.conn.execute("SELECT count(*) FROM run_filters").fetchone()[0] == 0
        with reader.transaction():
            reader._index.lookup(entries[:3], entries[:3], filtered=True)
        assert reader.conn.execute("SELECT count(*) FROM run_filters").fetchone()[0] == 1
    finally:
        reader.close()


def test_a_delete_that_fails_midway_leaves_nothing_wrong_in_memory(store, small_runs, monkeypatch):
    """A delete rewrites blocks one by one and changes the run in memory as it goes: should a statement fail,
    the rolled-back transaction must not leave this connection with fences (or a filter built from them) that
    the store no longer has."""
    monkeypatch.setattr(runs_module, "MEMORY_RUN_ENTRIES", 0)
    entries = np.arange(1, 1 << 40, 1 << 33, dtype=np.int64)
    with store.transaction():
        store._index.insert(entries)
    store.conn.execute("DELETE FROM run_filters")
    real_blob, calls = block_codec.encode, []

    def failing_blob(values):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("the disk is full")
        return real_blob(values)

    monkeypatch.setattr(block_codec, "encode", failing_blob)
    with pytest.raises(OSError):
        with store.transaction():
            store._index.delete(entries[0::7])  # the first entry of the first block among them
    monkeypatch.setattr(block_codec, "encode", real_blob)
    assert len(calls) == 2  # the first block was rewritten in memory before the second failed
    assert np.array_equal(store._index.lookup(entries, entries), entries)
    with store.transaction():
        assert np.array_equal(store._index.lookup(entries, entries, filtered=True), entries)
    assert store._index.faults() == []


def test_index_and_match_returns_new_rows_in_key_order_and_those_stored_before(store, small_runs):
    """The new rows come back distinct and in key order (what pairing them takes), the rows stored before under
    their keys beside them, and both are stored afterwards: against a plain list of (key, id) rows."""
    rng = np.random.default_rng(11)
    stored: set[tuple[int, int]] = set()
    with store.transaction():
        for batch in range(6):
            ids = rng.integers(1 + 50 * batch, 50 * (batch + 1), 120)
            keys = rng.integers(0, 90, 120).astype(np.uint64)  # repeats within the batch and across batches
            (new_keys, new_ids), (old_keys, old_ids) = store.index_and_match(ids, keys)
            rows = sorted(set(zip(keys.tolist(), ids.tolist())))
            assert list(zip(new_keys.tolist(), new_ids.tolist())) == rows
            wanted = {k for k, _ in rows}
            assert sorted(zip(old_keys.tolist(), old_ids.tolist())) == sorted(r for r in stored if r[0] in wanted)
            stored |= set(rows)
    found_keys, found_ids = store.match_index(np.arange(90, dtype=np.uint64))
    assert sorted(zip(found_keys.tolist(), found_ids.tolist())) == sorted(stored)


def test_a_split_block_with_impossible_id_bits_is_named_and_refused(store, small_runs):
    """A split block's leading byte (its id bits) outside what could have been written is damage: check names the
    block, and reading it is a DatabaseError, never entries read wrong (ids spilling into the keys)."""
    from dedupdb.errors import DatabaseError

    rng = np.random.default_rng(5)
    shift = CONTENT_ID_BITS
    everything = np.unique((np.arange(0, 60, dtype=np.int64) << shift) | rng.integers(0, 1 << 20, 60))
    runs = store._index
    with store.transaction():
        runs.insert(everything)
    block, data = store.conn.execute("SELECT id, data FROM run_blocks ORDER BY id LIMIT 1").fetchone()
    assert len(data) % 4 == 1  # a split block of 4 bytes an entry
    for id_bits in (0, 31, 32, 200):
        store.conn.execute("UPDATE run_blocks SET data = ? WHERE id = ?", (bytes([id_bits]) + data[1:], block))
        runs._runs = None
        assert any(f"block {block} holds" in fault for fault in runs.faults())
        with pytest.raises(DatabaseError, match="damaged"):
            list(runs.chunks())


def test_blocks_of_every_width_and_id_size_decode_at_once_whole_or_by_ranges(decoding):
    """Blocks of one call may differ in width and in the bits their ids take; each gives back its entries, and
    a ranged read exactly those within the ranges, in order."""
    rng = np.random.default_rng(9)
    shift = CONTENT_ID_BITS
    blocks, start = [], 0
    for gap, id_bits in [(3, 4), (900, 20), (5, 30), (70000, 12), (2, 1), (40, 29)]:
        keys = start + np.cumsum(rng.integers(1, gap + 1, 50))
        start = int(keys[-1]) + 1
        blocks.append((keys << shift) | rng.integers(0, 1 << id_bits, 50))
        start = (1 << 33) - 2100 if gap == 2 else start  # the last block reaches the top of the keys
    everything = np.concatenate(blocks)
    blobs = [block_codec.encode(b) for b in blocks]
    assert {len(blob) % len(b) for blob, b in zip(blobs, blocks)} == {1}  # all split
    assert len({len(blob) // len(b) for blob, b in zip(blobs, blocks)}) > 1
    firsts = np.array([b[0] for b in blocks], np.int64)
    counts = np.array([len(b) for b in blocks], np.int64)
    assert np.array_equal(block_codec.decode_blocks(firsts, counts, blobs), everything)
    for stride in (1, 7, 60):
        lows = np.unique(everything[::stride] & ~np.int64((1 << shift) - 1))
        highs = lows + (1 << shift) - 1
        expected = [v for v in everything.tolist() if any(lo <= v <= hi for lo, hi in zip(lows.tolist(), highs.tolist()))]
        assert block_codec.decode_blocks(firsts, counts, blobs, lows, highs).tolist() == expected
    # Ranges that are not whole keys: single entries (as a removal checks what runs hold), present or not, and
    # ranges beginning and ending within a key.
    for stride in (1, 5, 60):
        picked = everything[::stride]
        for lows, highs in [(np.unique(np.concatenate((picked, picked + 1))),) * 2,
                            (picked[:-1:2] + 1, picked[1::2] - 1)]:
            keep = lows <= highs
            lows, highs = lows[keep], highs[keep]
            expected = [v for v in everything.tolist()
                        if any(lo <= v <= hi for lo, hi in zip(lows.tolist(), highs.tolist()))]
            assert block_codec.decode_blocks(firsts, counts, blobs, lows, highs).tolist() == expected


def test_compiled_decoding_is_taken_only_where_numba_is_loaded():
    """Decoding alone never loads numba (a cold query would pay for it); a process that has it decodes compiled."""
    code = ("import sys; from dedupdb.storage import decoding; print(decoding.decoder() is None); import numba; "
            "print(decoding.decoder().__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "dedupdb.storage.fastdecode"]


def _many_runs(store, rng, batches: int = 14) -> set[int]:
    """Rows in several runs of several levels, some deleted after: what a store's adds and removals leave."""
    model: set[int] = set()
    for step in range(batches):
        with store.transaction():
            fresh = {int(v) for v in rng.integers(0, 1 << 45, int(rng.integers(5, 90)))} - model
            store._index.insert(np.array(sorted(fresh), np.int64))
            model |= fresh
            if step % 4 == 3:
                gone = sorted(model)[:: 9]
                store._index.delete(np.array(gone, np.int64))
                model -= set(gone)
    return model


def test_compact_merges_every_run_into_one_that_answers_alike(store, small_runs, decoding):
    rng = np.random.default_rng(17)
    model = _many_runs(store, rng)
    runs = store._index
    assert runs.run_count() >= 3
    lows = np.unique(rng.integers(0, 1 << 45, 300)) & ~np.int64((1 << 30) - 1)
    lows = np.unique(lows)
    highs = lows | ((1 << 30) - 1)
    everything = np.array(sorted(model), np.int64)
    before = runs.lookup(lows, highs)
    merged = runs.run_count()
    with store.transaction():
        assert runs.compact() == merged
    assert runs.run_count() == 1 and runs.count() == len(model)
    assert np.array_equal(runs.lookup(lows, highs), before)
    assert np.array_equal(runs.lookup(everything, everything), everything)
    with store.transaction():
        assert np.array_equal(runs.lookup(lows, highs, filtered=True), before)
    assert runs.faults() == []
    (run,) = runs._current().values()
    assert run.level == runs_module.level_of(len(model))
    # The merged run's filter is kept: another connection sees one run and reads no block to filter.
    assert store.conn.execute("SELECT count(*) FROM run_filters WHERE run = ?", (run.id,)).fetchone()[0] == 1
    other = Store.open(store.path)
    try:
        assert other._index.run_count() == 1
        assert np.array_equal(np.sort(np.concatenate(list(other._index.chunks()))), everything)
    finally:
        other.close()
    # Its blocks are small ones: up to 3 entries' bytes (6 entries of 4 bytes), against 7 (14) before.
    sizes = [r[0] for r in store.conn.execute("SELECT entries FROM run_blocks WHERE run = ?", (run.id,))]
    assert max(sizes) <= 6 and len(sizes) >= len(model) / 6
    with store.transaction():  # nothing left to do
        assert runs.compact() == 0
    with store.transaction():  # adds go on as before: new runs beside the merged one
        runs.insert(np.array([5, 1 << 44], np.int64))
    assert runs.run_count() == 2 and runs.lookup(np.array([5]), np.array([5])).tolist() == [5]


def test_compact_writes_a_lone_run_of_large_blocks_again_in_small_ones(store, small_runs):
    rng = np.random.default_rng(29)
    entries = np.unique(rng.integers(0, 1 << 45, 200))
    with store.transaction():
        store._index.insert(entries)
    assert store._index.run_count() == 1
    with store.transaction():
        assert store._index.compact() == 1
    (run,) = store._index._current().values()
    assert len(run.block_ids) >= len(entries) / 6
    assert np.array_equal(store._index.lookup(entries, entries), entries) and store._index.faults() == []
    with store.transaction():
        assert store._index.compact() == 0


def test_a_compaction_that_fails_midway_changes_nothing(store, small_runs, monkeypatch):
    """A merge writes the new run's blocks before it drops the old runs: failing midway, its transaction rolls
    back and the runs are those of before, in the store and in this connection's memory."""
    rng = np.random.default_rng(23)
    model = _many_runs(store, rng)
    runs = store._index
    everything = np.array(sorted(model), np.int64)
    before = {r.id: r.entries for r in runs._current().values()}
    real_next, calls = block_codec.next_block, []
    from dedupdb.storage import decoding

    monkeypatch.setattr(decoding, "decoder", lambda: None)  # blocks packed by next_block, one at a time

    def failing_next(rest, whole=None):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt  # Ctrl-C midway
        return real_next(rest, whole)

    monkeypatch.setattr(block_codec, "next_block", failing_next)
    with pytest.raises(KeyboardInterrupt):
        with store.transaction():
            runs.compact()
    monkeypatch.setattr(block_codec, "next_block", real_next)
    assert len(calls) == 5
    assert {r.id: r.entries for r in runs._current().values()} == before
    assert np.array_equal(runs.lookup(everything, everything), everything)
    assert runs.faults() == []
    with store.transaction():
        runs.compact()
    assert runs.run_count() == 1 and np.array_equal(runs.lookup(everything, everything), everything)


def test_compiled_range_search_and_filter_bits_are_numpys(monkeypatch):
    """The compiled twins an add takes where numba is loaded (fastdecode.py): the entries within ranges, galloping
    (ranges at the ends of the data and past them, an open top, none), and a filter's bits, against numpy's paths."""
    pytest.importorskip("numba")
    from dedupdb.storage import decoding, fastdecode

    rng = np.random.default_rng(17)
    for trial in range(400):
        data = np.unique(rng.integers(-50, 500, int(rng.integers(0, 200))))
        bounds = np.unique(rng.integers(-60, 520, 2 * int(rng.integers(0, 40))))
        bounds = bounds[: len(bounds) // 2 * 2]
        lows, highs = bounds[0::2], bounds[1::2].copy()
        if trial % 7 == 0 and len(highs):
            highs[-1] = np.iinfo(np.int64).max
        monkeypatch.setattr(decoding, "decoder", lambda: None)
        expected = block_codec.in_ranges(data, lows, highs)
        monkeypatch.setattr(decoding, "decoder", lambda: fastdecode)
        assert np.array_equal(block_codec.in_ranges(data, lows, highs), expected)
        assert np.array_equal(expected, np.array(sorted(v for v in data.tolist()
                                                        if any(lo <= v <= hi for lo, hi in zip(lows, highs))), np.int64))
        entries = np.sort(rng.integers(0, 1 << 63, int(rng.integers(0, 3000)), dtype=np.int64))
        filters = []
        for decoder in (None, fastdecode):
            monkeypatch.setattr(decoding, "decoder", lambda d=decoder: d)
            bits = runs_module.KeyBits(len(entries) + 1, 33)
            bits.add_sorted(entries)
            filters.append(bits.to_bytes())
        assert filters[0] == filters[1]
        # A filtered probe of a run held in memory: the entries under each key the filter may hold, in one pass.
        held = np.unique(rng.integers(0, 1 << 12, int(rng.integers(0, 400)), dtype=np.int64) << CONTENT_ID_BITS
                         | rng.integers(0, 1 << 30, 1, dtype=np.int64))
        starts = np.unique(np.concatenate((held[::3] >> CONTENT_ID_BITS, rng.integers(0, 1 << 12, 30))))
        starts = starts << CONTENT_ID_BITS
        bits = runs_module.KeyBits(1 << 12, 12)  # a slot a key: the filter tells every key apart
        bits.add_sorted(held[::2])
        passed = starts[bits.may_hold(starts)]
        expected = [v for v in held.tolist() if any(s <= v <= s + CONTENT_ID_MASK for s in passed.tolist())]
        for decoder in (None, fastdecode):
            monkeypatch.setattr(decoding, "decoder", lambda d=decoder: d)
            assert bits.held_in(held, starts).tolist() == expected


@pytest.mark.parametrize("whole", [None, 125, 3])
def test_compiled_block_packing_gives_next_blocks_bytes(monkeypatch, whole):
    """Blocks packed compiled (fastdecode.packed_blocks), as a run is written where numba is loaded, are next_block's
    bytes and bounds: every split width and whole blocks, ids of few and many bits, gaps that fit no width, runs of
    one entry, and a last block left over when it is not final."""
    pytest.importorskip("numba")
    from dedupdb.storage import decoding, fastdecode

    rng = np.random.default_rng(31)
    seen: set[int] = set()
    cases = []
    for _ in range(60):
        n = int(rng.choice([0, 1, 2, 3, 50, 1999, 2000, 2001, 7000]))
        spread = int(rng.choice([4, 16, 28, 36, 44, 60]))  # key gaps of a few bits to more than any width holds
        keys = np.cumsum(rng.integers(0, 1 << spread, n, dtype=np.int64)) % (1 << 33)
        cases.append((np.sort(keys), rng.integers(0, 1 << int(rng.integers(1, 31)), n, dtype=np.int64)))
    for bits in (1, 7, 20):  # a gap at the most a width holds with ids of `bits` bits, and one past it
        for width in (4, 5):
            for gap in ((1 << (8 * width - bits)) - 1, 1 << (8 * width - bits)):
                keys = np.arange(40, dtype=np.int64) * gap % (1 << 33)
                cases.append((keys, np.full(40, (1 << bits) - 1, np.int64)))
    for keys, ids in cases:
        entries = np.unique(keys << CONTENT_ID_BITS | ids)
        for final in (True, False):
            monkeypatch.setattr(decoding, "decoder", lambda: None)
            expected, bounds = block_codec.packed_blocks(entries, whole, final)
            monkeypatch.setattr(decoding, "decoder", lambda: fastdecode)
            blobs, starts = block_codec.packed_blocks(entries, whole, final)
            assert blobs == expected
            assert starts.tolist() == bounds.tolist()
            for blob, count in zip(blobs, np.diff(bounds).tolist()):
                seen.add(len(blob) // count)  # the width: a split block's leading byte is less than an entry
    assert seen == {4, 5, 6, 8}


def test_compiled_covering_blocks_gives_numpys_positions(monkeypatch):
    """The blocks a lookup reads, found compiled (fastdecode.covering_blocks, galloping from range to range) and by
    numpy (two binary searches a range, then a sort): the same positions, each once, in order, for ranges before,
    between, on and after the blocks' first entries, wide and narrow, sorted or not (numpy's then)."""
    pytest.importorskip("numba")
    from dedupdb.storage import decoding, fastdecode

    rng = np.random.default_rng(7)
    cases = 0
    for _ in range(300):
        firsts = np.unique(rng.integers(0, 1 << 20, int(rng.choice([0, 1, 2, 5, 40, 500])), dtype=np.int64))
        lows = np.sort(rng.integers(-10, (1 << 20) + 10, int(rng.choice([0, 1, 2, 3, 30, 400])), dtype=np.int64))
        if len(firsts) and rng.random() < 0.3:  # ranges starting exactly at blocks' first entries
            lows = np.sort(np.concatenate((lows, rng.choice(firsts, 5))))
        highs = lows + rng.integers(0, int(rng.choice([1, 100, 1 << 16])), len(lows), dtype=np.int64)
        orders = [(lows, highs)]
        if len(lows) > 2:
            shuffled = rng.permutation(len(lows))
            orders.append((lows[shuffled], highs[shuffled]))
        for low, high in orders:
            monkeypatch.setattr(decoding, "decoder", lambda: None)
            expected = block_codec.covering_blocks(firsts, low, high)
            monkeypatch.setattr(decoding, "decoder", lambda: fastdecode)
            found = block_codec.covering_blocks(firsts, low, high)
            assert found.tolist() == expected.tolist()
            cases += len(expected) > 0
    assert cases > 100
    assert fastdecode.covering_blocks(np.array([5, 9]), np.array([9, 5]), np.array([9, 5])) is None  # out of order


def test_compiled_layouts_are_numpys_for_every_block_sound_or_damaged():
    """fastdecode.layouts, which a process with numba loaded reads a probe's blocks' layouts with, gives
    layouts_of's kinds and id bits: for blocks of every layout written now or before, and for lengths and
    leading bytes that fit none (a damaged block, which decoding then refuses)."""
    pytest.importorskip("numba")
    from dedupdb.storage import fastdecode

    rng = np.random.default_rng(4)
    counts = rng.integers(0, 300, 3000)
    widths = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9], 3000)
    sizes = widths * counts + rng.choice([0, 1, 2], 3000)
    blobs = [bytes([int(rng.integers(0, 256))]) + bytes(max(int(size) - 1, 0)) if size else b""
             for size in sizes]
    sizes = np.array([len(b) for b in blobs], np.int64)
    expected = block_codec.layouts_of(sizes, counts, blobs, strict=False)
    got = fastdecode.layouts(b"".join(blobs), sizes, counts, block_codec.SPLIT_WIDTHS,
                             (block_codec.GAP_AND_ID24.itemsize, block_codec.GAP_AND_ID32.itemsize),
                             block_codec.WHOLE, CONTENT_ID_BITS)
    known = expected[0] != 0
    assert np.array_equal(got[0], expected[0])
    assert np.array_equal(got[1][known], expected[1][known])
    assert 0 < np.count_nonzero(known) < len(blobs)
    assert {-5, -6, 4, 5, 6, 8} <= set(expected[0].tolist())
