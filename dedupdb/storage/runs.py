"""Sorted runs of packed index rows: the part of the storage layer that keeps a large index cheap to grow.

An index row is one integer, (key << 30) | content id (entries.py). Kept as rows of one SQLite B-tree, every
insert of a growing index lands on a page of its own once the index outgrows the cache, and a commit rewrites
each such page whole: a million-document store took four times as long per document as an empty one.

Here rows live as a log-structured merge tree (O'Neil et al. 1996) inside the same SQLite file: every batch of
new rows becomes a sorted run of its own, stored as blocks of one 16 KiB page each (a block packs the key gaps
and content ids of its entries in 4, 5 or 6 bytes each where they allow, 4 once a run is large);
runs of about the same size are merged, FANOUT at a time, into one run FANOUT times larger (size-tiered), so a
row is rewritten once per level (about log4 of the index size over a batch's) and always sequentially. A lookup
finds, in every run, the one or two blocks whose range covers a key from the first entry of each block, which
this module keeps in memory; a million documents make about 20,000 blocks. Every change happens inside the
caller's transaction, so a merge, like an insert, is applied whole or not at all, and a process killed
mid-merge loses nothing committed.

At rest a family's runs can be merged into one of small blocks (compact(), `dedupdb optimize`): a lookup then
reads one 1 KiB block a key instead of a 16 KiB one a key and run.

Rows are deleted from the blocks that hold them (a file removed or changed): a block rewritten, not a
tombstone, so a run always holds exactly the rows the store has.

Each run of index rows keeps, in the run_filters table, the key filter (KeyBits) it was written with: an add in
a new process takes it from there instead of reading the whole run to build it again. Deleting rows leaves a
filter right (a set bit only means "look").
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dedupdb.storage import blocks as block_codec
from dedupdb.storage import decoding
from dedupdb.storage.entries import CONTENT_ID_BITS, CONTENT_ID_MASK
from dedupdb.text.hashing import distinct, distinct_of_sorted

# A run of at most this many entries is kept in memory whole once an ingest probes it (32 MiB): the small runs,
# the newest rows, are where most probes of a growing store land, and the levels below it take at most 3 x 5.2
# million entries (128 MiB) however large the store.
MEMORY_RUN_ENTRIES = 1 << 22
# Runs held in memory are merged there up to this many entries in all (8 MiB): the merges of an add's small levels.
# A larger merge reads its runs from their blocks, a few at a time, as a merge of runs not held does: merged in
# memory, it would hold them and their sorted copy at once (the largest merge of 100,000 reviews, 3.7 million
# entries, raised the add's peak RSS by 30 MB).
MERGE_IN_MEMORY_ENTRIES = 1 << 20
# Unfiltered lookups of a run by one connection after which it gets its filter anyway (Runs.lookup).
WARM_PROBES = 16
# A compacted run's kept filter is taken by a process that probes it WARM_PROBES times when no larger than this
# (a store of about two million documents): a near-duplicate query at a million then takes about 0.8 of its time
# before, for 24 MB more (docs/benchmarks.md, "A million documents").
QUERY_FILTER_BYTES = 32 << 20
# Bits of a run's key filter per entry, at least (a power of two of them in all): a key of no entry of the run
# passes with odds of at most 1 - e^(-1/2), 39%. The filters are the one part of a store held in memory that
# grows with it (18 MB a million documents, where 8 bits took 72 MB); a batch onto a large store reads nearly
# every block of the large runs anyway (8 bits made its probes 0.8 s against 0.96 s for 15,000 documents
# onto a million), and a query is as quick either way (5.2-5.7 ms).
FILTER_BITS_PER_ENTRY = 2
# A filtered lookup with at least this many keys a block of a run read from its blocks passes that run without its
# filter, and lets go of a filter the store keeps: nearly every block is read either way (all but e^-8 of them
# without it; 96% or more with it, when most keys are absent), so an add onto a large store, whose batch has a
# million keys against 56,000 blocks in the largest run at ten million documents, need not hold the large runs'
# filters in memory (177 MB there).
KEYS_A_BLOCK_UNFILTERED = 8
# A filter is kept in the store up to this size (a run of some 500 million rows); a larger one would near
# SQLite's limit on a value, and is built by reading its run in each process that probes it.
KEEP_FILTER_BYTES = 1 << 27
# Runs merged at once: a level holds at most FANOUT - 1 runs before they become one of the next.
FANOUT = 4
# A run of up to this many entries is of level 0 (about one ingest batch of 1,000 documents).
LEVEL_BASE = 1 << 16
# Blocks read per statement when a run is read in order (merging, scanning).
_READ_BLOCKS = 64
# Blocks a probe reads at once (4 MiB, and some 80 MB while they are decoded): memory stays bounded however many
# blocks of a large run a batch needs.
_READ_AT_ONCE = 256
_TOKEN_KEY = "runs.token.{}"  # one per family
_CHUNK = 500


@dataclass
class _Run:
    id: int
    level: int
    entries: int
    block_ids: np.ndarray  # int64, in key order
    firsts: np.ndarray     # int64: the smallest entry of each block
    filter: "KeyBits | None" = None  # made when first needed (filtered lookups), or as the run is written
    filter_kept: bool = False        # whether the store holds this filter (run_filters)
    data: np.ndarray | None = None   # every entry, for a small run that a filtered lookup has read whole
    probes: int = 0                  # lookups by this connection, which warm it up (see Runs.lookup)


class KeyBits:
    """Which keys a run may hold, in memory: one bit per slot, a key's slot its top bits (keys are hashes). A
    clear bit rules a key out; a set bit only means "look". Built from sorted entries, a block at a time."""

    def __init__(self, entries: int, key_bits: int) -> None:
        slot_bits = max(10, min(key_bits, int(np.ceil(np.log2(max(1, entries) * FILTER_BITS_PER_ENTRY)))))
        self._shift = np.int64(CONTENT_ID_BITS + key_bits - slot_bits)
        self._bits = np.zeros(1 << (slot_bits - 3), np.uint8)

    def add_sorted(self, entries: np.ndarray) -> None:
        if len(entries) == 0:
            return
        fast = decoding.decoder()
        if fast is not None:
            fast.set_slots(self._bits, entries, int(self._shift))
            return
        slots = entries >> self._shift
        words = slots >> 3
        masks = (np.uint8(1) << (slots & 7).astype(np.uint8)).astype(np.uint8)
        starts = np.flatnonzero(np.concatenate(([True], words[1:] != words[:-1])))
        self._bits[words[starts]] |= np.bitwise_or.reduceat(masks, starts)

    def may_hold(self, entries: np.ndarray) -> np.ndarray:
        """Whether the key of each entry may be held (the content id bits do not matter)."""
        slots = entries >> self._shift
        return ((self._bits[slots >> 3] >> (slots & 7).astype(np.uint8)) & 1).astype(bool)

    def held_in(self, data: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The entries of sorted data (a run's, held in memory) under each key of these sorted starts (entries of
        content id 0) that this filter may hold: in one compiled pass where there is one, else by masking the
        starts and searching."""
        fast = decoding.decoder()
        if fast is not None:
            return fast.in_key_ranges(data, starts, self._bits, int(self._shift), CONTENT_ID_MASK)
        maybe = starts[self.may_hold(starts)]
        return block_codec.in_ranges(data, maybe, maybe + CONTENT_ID_MASK)

    def to_bytes(self) -> bytes:
        return self._bits.tobytes()

    @classmethod
    def from_bytes(cls, data, key_bits: int) -> "KeyBits | None":
        """A filter kept by to_bytes, or None when the value cannot be one (a damaged store: built again)."""
        if not isinstance(data, bytes) or len(data) < 1 << 7:
            return None
        slot_bits = (len(data) * 8).bit_length() - 1
        if len(data) * 8 != 1 << slot_bits or not 10 <= slot_bits <= key_bits:
            return None
        bits = cls.__new__(cls)
        bits._shift = np.int64(CONTENT_ID_BITS + key_bits - slot_bits)
        bits._bits = np.frombuffer(data, np.uint8).copy()
        return bits


def level_of(entries: int) -> int:
    """Runs of about the same size share a level: 0 up to LEVEL_BASE entries, then one level per FANOUT times."""
    level, size = 0, LEVEL_BASE
    while entries > size:
        level, size = level + 1, size * FANOUT
    return level


def _fences(run: _Run) -> bytes:
    """A run's block numbers and first entries, interleaved: what opening a store reads to find any row."""
    return np.column_stack((run.block_ids, run.firsts)).astype("<i8").tobytes()


# How a block keeps its entries, told apart by its length against its count of entries (a block row holds it).
class Runs:
    """The runs of one family of rows (0: LSH and SimHash index rows, 1: containment rows) in a store's
    connection. Reads see the committed state of the store (or the caller's transaction); writes must run inside
    the caller's write transaction."""

    def __init__(self, conn, family: int, key_bits: int, keep_filters: bool = True) -> None:
        self.conn = conn
        self.family = family
        self.key_bits = key_bits
        # Whether runs keep their filters in the store: worth it for a family an ingest probes through them.
        self.keep_filters = keep_filters
        self._runs: dict[int, _Run] | None = None  # the block fences, as of _token
        self._token: str | None = None

    # --- the fences, kept in memory ---------------------------------------------------------------

    def _current(self) -> dict[int, _Run]:
        """The runs and their block fences: read again whenever the store's runs changed since they were read
        (another process, or a rolled-back transaction of this one: every change writes a new random token)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (_TOKEN_KEY.format(self.family),)).fetchone()
        token = row[0] if row else ""
        if self._runs is None or token != self._token:
            runs: dict[int, _Run] = {}
            for run_id, level, entries, fences in self.conn.execute(
                "SELECT id, level, entries, fences FROM runs WHERE family = ? ORDER BY id", (self.family,)
            ).fetchall():
                pairs = np.frombuffer(fences, dtype="<i8").reshape(-1, 2)
                runs[run_id] = _Run(run_id, level, entries, pairs[:, 0].copy(), pairs[:, 1].copy())
            self._runs, self._token = runs, token
        return self._runs

    def _changed(self) -> None:
        """Mark a change (inside the writing transaction): other connections, and this one after a rollback,
        read the fences again."""
        self._token = secrets.token_hex(8)
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (_TOKEN_KEY.format(self.family), self._token))

    # --- writing ----------------------------------------------------------------------------------

    def insert(self, entries: np.ndarray, sorted_distinct: bool = False) -> None:
        """Add rows (any order, repeats stored once; with sorted_distinct, already so) as a run of their own, then
        merge runs while some level holds FANOUT of them. The rows must not be stored already: every row names its
        content, and a content's rows are added once (when it arrives, or when an index is rebuilt after clear())."""
        entries = np.asarray(entries, dtype=np.int64)
        if not sorted_distinct:
            entries = distinct(entries)
        if len(entries) == 0:
            return
        runs = self._current()
        run = self._new_run(level_of(len(entries)), len(entries))
        self._write_blocks(run, entries)
        run.data = entries if len(entries) <= MEMORY_RUN_ENTRIES else None
        self._finish_run(run)
        runs[run.id] = run
        self._changed()
        self._compact(runs)

    def delete(self, entries: np.ndarray) -> None:
        """Remove rows wherever they are (rows not stored are ignored): each block holding one is rewritten."""
        entries = distinct(np.asarray(entries, dtype=np.int64))
        if len(entries) == 0:
            return
        runs = self._current()
        # Marked first: the runs are changed in memory as their blocks are, so should a statement fail and the
        # transaction roll back, this connection must read them again, not trust what it changed.
        self._changed()
        for run in list(runs.values()):
            blocks = block_codec.covering_blocks(run.firsts, entries, entries)
            if len(blocks) == 0:
                continue
            removed = 0
            keep = np.ones(len(run.block_ids), bool)
            for position, data in zip(blocks.tolist(), self._read(run.block_ids[blocks])):
                left = data[~np.isin(data, entries, assume_unique=True)]
                if len(left) == len(data):
                    continue
                removed += len(data) - len(left)
                block_id = int(run.block_ids[position])
                if len(left):
                    self.conn.execute(
                        "UPDATE run_blocks SET first = ?, entries = ?, data = ? WHERE id = ?",
                        (int(left[0]), len(left), block_codec.encode(left), block_id),
                    )
                    run.firsts[position] = left[0]
                else:
                    self.conn.execute("DELETE FROM run_blocks WHERE id = ?", (block_id,))
                    keep[position] = False
            if not removed:
                continue
            run.data = None  # read again when next needed
            run.block_ids, run.firsts, run.entries = run.block_ids[keep], run.firsts[keep], run.entries - removed
            if run.entries:
                self._finish_run(run)
            else:
                self.conn.execute("DELETE FROM runs WHERE id = ?", (run.id,))
                del runs[run.id]

    def clear(self) -> None:
        self.conn.execute("DELETE FROM run_blocks WHERE run IN (SELECT id FROM runs WHERE family = ?)", (self.family,))
        self.conn.execute("DELETE FROM runs WHERE family = ?", (self.family,))
        self._runs = {}
        self._changed()

    def compact(self) -> int:
        """Merge every run of this family into one of small blocks (COMPACT_BLOCK_ENTRIES; inside the caller's
        write transaction): a lookup then reads one small block a key instead of one large block a key and run.
        A single run of large blocks is written again too. Returns the runs merged (0: nothing to do)."""
        runs = self._current()
        whole = block_codec.COMPACT_BLOCK_ENTRIES
        if not runs or (len(runs) == 1 and self._small_blocks(next(iter(runs.values())), whole)):
            return 0
        merged = sorted(runs.values(), key=lambda r: r.id)
        self._merge(runs, merged, whole)
        return len(merged)

    def _small_blocks(self, run: _Run, whole: int) -> bool:
        """Whether a run's blocks are no larger than blocks of `whole` entries (it was compacted)."""
        return run.entries <= len(run.block_ids) * block_codec.per_block(block_codec.SPLIT_WIDTHS[0], whole)

    def _new_run(self, level: int, expected: int) -> _Run:
        """An empty run, with a key filter sized for the entries it is about to receive."""
        cursor = self.conn.execute(
            "INSERT INTO runs (family, level, entries, fences) VALUES (?, ?, 0, x'')", (self.family, level)
        )
        return _Run(cursor.lastrowid, level, 0, np.empty(0, np.int64), np.empty(0, np.int64),
                    KeyBits(expected, self.key_bits))

    def _write_blocks(self, run: _Run, entries: np.ndarray, final: bool = True, whole: int | None = None) -> np.ndarray:
        """Append sorted entries, all above those the run holds, as blocks (the last may be short when final) of
        the codec's size or of `whole` entries' bytes; returns those left for a later call (final false: fewer
        than fill a block)."""
        blobs, bounds = block_codec.packed_blocks(entries, whole, final)
        start = int(bounds[-1])
        if not blobs:
            return entries[start:]
        firsts, counts = entries[bounds[:-1]], np.diff(bounds)
        last = self.conn.execute("SELECT coalesce(max(id), 0) FROM run_blocks").fetchone()[0]
        ids = np.arange(last + 1, last + 1 + len(blobs), dtype=np.int64)
        self.conn.executemany(
            "INSERT INTO run_blocks (id, run, first, entries, data) VALUES (?, ?, ?, ?, ?)",
            zip(ids.tolist(), [run.id] * len(blobs), firsts.tolist(), counts.tolist(), blobs),
        )
        written = entries[:start]
        if run.filter is not None:
            run.filter.add_sorted(written)
        run.block_ids = np.concatenate((run.block_ids, ids))
        run.firsts = np.concatenate((run.firsts, firsts))
        run.entries += len(written)
        return entries[start:]

    def _finish_run(self, run: _Run) -> None:
        """Store a run's count, level and fences, and its filter when it has one in memory (one kept before stays
        right when rows are deleted: a set bit only means "look")."""
        self.conn.execute(
            "UPDATE runs SET entries = ?, level = ?, fences = ? WHERE id = ?",
            (run.entries, run.level, _fences(run), run.id),
        )
        if run.filter is not None:
            self._keep_filter(run)  # the insert, merge or delete writing the run marks the change

    # --- merging ----------------------------------------------------------------------------------

    def _compact(self, runs: dict[int, _Run]) -> None:
        """Merge the runs of a level into one while any level holds FANOUT runs (the smallest level first)."""
        while True:
            by_level: dict[int, list[_Run]] = {}
            for run in runs.values():
                by_level.setdefault(run.level, []).append(run)
            full = sorted(level for level, members in by_level.items() if len(members) >= FANOUT)
            if not full:
                return
            self._merge(runs, sorted(by_level[full[0]], key=lambda r: r.id))

    def _merge(self, runs: dict[int, _Run], merged: list[_Run], whole: int | None = None) -> None:
        """One run of all rows of `merged`: from the rows held in memory when all are and the merge is small
        (MERGE_IN_MEMORY_ENTRIES), else written in order while they are read in order from their blocks, a k-way
        merge in bounded memory (a few blocks of each run at a time); its blocks of `whole` entries' bytes when
        given."""
        total = sum(r.entries for r in merged)
        if whole is None and total <= min(MERGE_IN_MEMORY_ENTRIES, MEMORY_RUN_ENTRIES) and all(
                r.data is not None for r in merged):
            # Small runs an ingest holds in memory (most merges of an add) are merged there: reading their blocks
            # back, and the merged run's again at the next probe, cost more than the merge itself.
            joined = np.concatenate([r.data for r in merged])
            for run in merged:  # let go before the sort's scratch is taken
                run.filter, run.data = None, None
            joined.sort(kind="stable")  # sorted stretches: a merge of them
            out = self._new_run(level_of(total), total)
            joined = distinct_of_sorted(joined)  # no copy: rows are stored once
            self._write_blocks(out, joined)
            out.data = joined  # what the next probe would read back whole
        else:
            out = self._merged_from_blocks(merged, total, whole)
        out.level = level_of(out.entries)
        self._finish_run(out)
        if out.filter_kept and out.entries > MEMORY_RUN_ENTRIES:
            out.filter = None  # read from the store when a lookup needs it; a large add reads such runs without one
        ids = [r.id for r in merged]
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            self.conn.execute(f"DELETE FROM run_blocks WHERE run IN ({marks})", chunk)
            self.conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", chunk)
        for run_id in ids:
            del runs[run_id]
        runs[out.id] = out
        self._changed()

    def _merged_from_blocks(self, merged: list[_Run], total: int, whole: int | None) -> _Run:
        # The merged runs are read from their blocks and dropped after: their filters and copies in memory are
        # let go first, so that the largest merge does not hold the old filters beside the new (64 MB at ten
        # million documents). Should the merge fail, they are read again when next needed (None means "not made").
        for run in merged:
            run.filter, run.data = None, None
        out = self._new_run(level_of(total), total)
        readers = [_RunReader(self, r) for r in merged]
        pending = np.empty(0, np.int64)
        while any(not r.done for r in readers):
            # Every run's loaded rows up to the smallest of their last loaded rows are all the merged run has
            # below that bound: emit them, then load more of the runs that ran dry.
            bound = min(r.last for r in readers if not r.done)
            parts = [pending] + [r.take_through(bound) for r in readers]
            merged_part = np.concatenate(parts)
            merged_part.sort(kind="stable")
            pending = self._write_blocks(out, distinct_of_sorted(merged_part), final=False, whole=whole)
        rest = np.concatenate([pending] + [r.take_through(np.iinfo(np.int64).max) for r in readers])
        rest.sort()
        self._write_blocks(out, distinct_of_sorted(rest), whole=whole)
        return out

    # --- reading ----------------------------------------------------------------------------------

    def _read_joined(self, block_ids: np.ndarray, lows: np.ndarray | None = None,
                     highs: np.ndarray | None = None) -> np.ndarray:
        """The entries of blocks of one run, joined in key order (a run's blocks are numbered in key order: each
        is written after those below it, and a rewritten block keeps its number); with lows and highs, only those
        within the ranges (see block_codec.decode_blocks). One statement for them all: a probe of a large run reads thousands
        of blocks."""
        if len(block_ids) == 0:
            return np.empty(0, np.int64)
        rows = self.conn.execute(
            "SELECT b.first, b.entries, b.data FROM json_each(?) j JOIN run_blocks b ON b.id = j.value ORDER BY b.id",
            (str(block_ids.tolist()),),
        ).fetchall()
        firsts = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        counts = np.fromiter((r[1] for r in rows), np.int64, len(rows))
        return block_codec.decode_blocks(firsts, counts, [r[2] for r in rows], lows, highs)

    def _read(self, block_ids: np.ndarray) -> list[np.ndarray]:
        """The entries of blocks, in the order asked."""
        wanted = block_ids.tolist()
        found: dict[int, np.ndarray] = {}
        for chunk in _chunks(wanted):
            for block_id, first, count, data in self.conn.execute(
                f"SELECT id, first, entries, data FROM run_blocks WHERE id IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall():
                found[block_id] = block_codec.decode_block(first, count, data)
        return [found[i] for i in wanted]

    def _holds(self, runs: dict[int, _Run], entries: np.ndarray) -> np.ndarray:
        """Which of these sorted distinct entries some run holds."""
        held = np.zeros(len(entries), bool)
        for run in runs.values():
            found = self._within(run, entries, entries)
            if len(found):
                held |= np.isin(entries, found, assume_unique=True)
        return held

    def _within(self, run: _Run, lows: np.ndarray, highs: np.ndarray, every_block: bool = False) -> np.ndarray:
        """The entries of one run within any of the ranges [lows[i], highs[i]] (lows sorted, ranges disjoint); with
        every_block, its blocks are all read rather than found range by range (ranges by the million: see
        KEYS_A_BLOCK_UNFILTERED)."""
        if len(lows) == 0:
            return np.empty(0, np.int64)
        if run.data is not None:
            return block_codec.in_ranges(run.data, lows, highs)
        blocks = np.arange(len(run.block_ids)) if every_block else block_codec.covering_blocks(run.firsts, lows, highs)
        if len(blocks) <= _READ_AT_ONCE:
            return self._read_joined(run.block_ids[blocks], lows, highs)
        # A batch of many keys may need most blocks of a large run: read them a bounded stretch at a time, each
        # stretch asked only for the ranges that reach into it.
        parts = []
        for start in range(0, len(blocks), _READ_AT_ONCE):
            stretch = blocks[start : start + _READ_AT_ONCE]
            low = run.firsts[stretch[0]]
            after = stretch[-1] + 1
            high = run.firsts[after] if after < len(run.firsts) else np.iinfo(np.int64).max
            # The ranges reaching into it, one slice of them (lows and highs both sorted, the ranges disjoint).
            first, end = np.searchsorted(highs, low, "left"), np.searchsorted(lows, high, "left")
            if first < end:
                parts.append(self._read_joined(run.block_ids[stretch], lows[first:end], highs[first:end]))
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def lookup(self, lows: np.ndarray, highs: np.ndarray, filtered: bool = False) -> np.ndarray:
        """Every stored entry within any of the ranges [lows[i], highs[i]] (lows sorted and distinct, ranges
        disjoint), sorted. With filtered, each range must be the entries of one key (as the store's probes are),
        and a run is looked into only for the keys its filter may hold: what an ingest, which probes many keys
        of which most are in no run or one, asks for. The filters cost two to four bits an entry in memory, made
        by reading each run once. Without it, a run takes its filter (and a small one its place in memory) once
        it has been probed WARM_PROBES times by this connection: a single query reads a few blocks and no more,
        a process that answers many pays the reading once. A compacted run (compact()) takes only the filter the
        store keeps for it, when small (QUERY_FILTER_BYTES): a whole read to build one (the containment run's)
        would cost more than its small blocks."""
        lows, highs = np.asarray(lows, np.int64), np.asarray(highs, np.int64)
        if len(lows) == 0:
            return np.empty(0, np.int64)
        parts = []
        for run in self._current().values():
            run.probes += 1
            if filtered and run.data is None and run.entries > MEMORY_RUN_ENTRIES and (
                    len(lows) >= KEYS_A_BLOCK_UNFILTERED * len(run.block_ids)):
                if run.filter_kept:
                    run.filter = None
                parts.append(self._within(run, lows, highs, every_block=True))
                continue
            # A compacted run is read a small block a key, and is read whole for no filter (the containment run
            # keeps none). The filter the store keeps, when small (16 MB a million documents), spares the blocks of
            # most keys the run does not hold, which a query of a text with no near-duplicate mostly asks for.
            compacted = self._small_blocks(run, block_codec.COMPACT_BLOCK_ENTRIES)
            if compacted and run.probes == WARM_PROBES and run.filter is None:
                self._take_kept_filter(run, QUERY_FILTER_BYTES)
            warm = run.probes >= WARM_PROBES and not compacted
            if filtered or run.filter is not None or warm:
                if run.data is None and run.entries <= MEMORY_RUN_ENTRIES:
                    run.data = np.concatenate(list(self._run_chunks(run)) or [np.empty(0, np.int64)])
                keys = self._filter_of(run, keep=filtered)
                if filtered and run.data is not None:  # each range one key's: [start, start + CONTENT_ID_MASK]
                    parts.append(keys.held_in(run.data, lows))
                    continue
                maybe = keys.may_hold(lows)
                parts.append(self._within(run, lows[maybe], highs[maybe]))
            else:
                parts.append(self._within(run, lows, highs))
        found = np.concatenate(parts) if parts else np.empty(0, np.int64)
        found.sort()
        return found

    def _filter_of(self, run: _Run, keep: bool = False) -> KeyBits:
        """A run's filter: in memory, else as the store keeps it, else built by reading the run (and, with keep,
        kept in the store: a filtered lookup runs inside a write transaction, and a run written before filters
        were kept is read whole only once)."""
        if run.filter is None and self.keep_filters:
            run.filter = self._kept_filter(run)
            run.filter_kept = run.filter is not None
        if run.filter is None:
            bits = KeyBits(run.entries, self.key_bits)
            for entries in [run.data] if run.data is not None else self._run_chunks(run):
                bits.add_sorted(entries)
            run.filter = bits
        if keep and self._keep_filter(run):
            # Marked as a change: should this transaction roll back, this connection reads the runs again, so a
            # filter it thinks kept always is.
            self._changed()
        return run.filter

    def _kept_filter(self, run: _Run, limit: int | None = None) -> KeyBits | None:
        """The filter the store keeps for a run, if it keeps one (of at most `limit` bytes, when given); None for a
        damaged one, to be built again."""
        row = self.conn.execute(
            "SELECT bits FROM run_filters WHERE run = ? AND (? IS NULL OR length(bits) <= ?)", (run.id, limit, limit)
        ).fetchone()
        return KeyBits.from_bytes(row[0], self.key_bits) if row else None

    def _take_kept_filter(self, run: _Run, limit: int) -> None:
        """Take into memory the filter the store keeps for a run, if it keeps one of at most `limit` bytes."""
        bits = self._kept_filter(run, limit) if self.keep_filters else None
        if bits is not None:  # else as it was: a larger filter may be kept, and read when a lookup needs it
            run.filter, run.filter_kept = bits, True

    def _keep_filter(self, run: _Run) -> bool:
        """Keep a run's filter in the store, unless kept already, of a family that keeps none, or too large
        (inside the caller's write transaction); whether it was written."""
        if not self.keep_filters or run.filter_kept:
            return False
        data = run.filter.to_bytes()
        if len(data) > KEEP_FILTER_BYTES:
            return False
        self.conn.execute("INSERT OR REPLACE INTO run_filters (run, bits) VALUES (?, ?)", (run.id, data))
        run.filter_kept = True
        return True

    def _run_chunks(self, run: _Run) -> Iterator[np.ndarray]:
        reader = _RunReader(self, run)
        while not reader.done:
            yield reader.take_through(reader.last)

    def holds(self, entries: np.ndarray) -> np.ndarray:
        """Those of these entries that are stored."""
        entries = distinct(np.asarray(entries, dtype=np.int64))
        return entries[self._holds(self._current(), entries)]

    def faults(self) -> list[str]:
        """What is wrong with this family's runs, one line each: fences that do not match the blocks, blocks out of
        order or not sorted, entry counts that do not add up, a kept filter that would hide an entry (a damaged
        store; 'dedupdb check' reports them)."""
        out: list[str] = []
        for run in self._current().values():
            rows = self.conn.execute(
                "SELECT id, first, entries, data FROM run_blocks WHERE run = ? ORDER BY id", (run.id,)
            ).fetchall()
            row = self.conn.execute("SELECT bits FROM run_filters WHERE run = ?", (run.id,)).fetchone()
            kept = row[0] if row and self.keep_filters else None
            bits = None if kept is None else KeyBits.from_bytes(kept, self.key_bits)
            if kept is not None and bits is None:
                out.append(f"run {run.id}: its kept filter is not a filter ({type(kept).__name__}, "
                           f"{len(kept) if isinstance(kept, (bytes, str)) else 0} long)")
            if row and not self.keep_filters:
                out.append(f"run {run.id}: a filter is kept for it, but runs of its family keep none")
            ids = np.array([r[0] for r in rows], np.int64)
            if not np.array_equal(ids, run.block_ids):
                out.append(f"run {run.id}: its fences name {len(run.block_ids)} blocks, {len(ids)} are stored")
                continue
            total, previous = 0, None
            for position, (block_id, first, entries, data) in enumerate(rows):
                if not isinstance(data, bytes) or not block_codec.readable(data, entries):
                    out.append(f"run {run.id}: block {block_id} holds {len(data)} bytes for {entries} entries")
                    continue
                values = block_codec.decode_block(first, entries, data)
                if len(values) != entries or len(values) == 0 or (np.diff(values) <= 0).any():
                    out.append(f"run {run.id}: block {block_id} is not a sorted block of {entries} entries")
                elif values[0] != first or first != run.firsts[position]:
                    out.append(f"run {run.id}: block {block_id} starts at {int(values[0])}, not at its fence")
                elif previous is not None and values[0] <= previous:
                    out.append(f"run {run.id}: block {block_id} overlaps the block before it")
                if len(values):
                    previous = int(values[-1])
                    if bits is not None and not bits.may_hold(values).all():
                        out.append(f"run {run.id}: its filter hides entries of block {block_id}")
                        bits = None  # said once a run
                total += len(values)
            if total != run.entries:
                out.append(f"run {run.id}: {total} entries stored, {run.entries} counted")
        return out

    def count(self) -> int:
        row = self.conn.execute("SELECT coalesce(sum(entries), 0) FROM runs WHERE family = ?", (self.family,)).fetchone()
        return int(row[0])

    def run_count(self) -> int:
        return len(self._current())

    def chunks(self) -> Iterator[np.ndarray]:
        """Every stored entry, a few blocks at a time (sorted within each run, runs one after another)."""
        for run in list(self._current().values()):
            yield from self._run_chunks(run)


class _RunReader:
    """Reads one run in order, _READ_BLOCKS blocks at a time."""

    def __init__(self, runs: Runs, run: _Run) -> None:
        self._runs = runs
        self._block_ids = run.block_ids
        self._next = 0
        self._loaded = np.empty(0, np.int64)
        self.done = False
        self._load()

    def _load(self) -> None:
        if self._next >= len(self._block_ids):
            self.done = len(self._loaded) == 0
            return
        ids = self._block_ids[self._next : self._next + _READ_BLOCKS]
        self._next += len(ids)
        self._loaded = np.concatenate((self._loaded, self._runs._read_joined(ids)))

    @property
    def last(self) -> int:
        return int(self._loaded[-1])

    def take_through(self, bound: int) -> np.ndarray:
        """The loaded entries up to bound (all of them when the bound is their last), loading more after."""
        if self.done:
            return np.empty(0, np.int64)
        # All of them when the bound is their last: also what keeps a damaged (unsorted) block moving on.
        cut = len(self._loaded) if bound >= self.last else int(np.searchsorted(self._loaded, bound, "right"))
        taken, self._loaded = self._loaded[:cut], self._loaded[cut:]
        if len(self._loaded) == 0:
            self._load()
        return taken


def _chunks(items: list, size: int = _CHUNK) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
