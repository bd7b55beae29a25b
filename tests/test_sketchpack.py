"""Stored sketches in fewer bytes (sketchpack.py): every sketch comes back exactly, plain ones of before too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dedupdb
from dedupdb.storage import sketchpack
from dedupdb.errors import DatabaseError

from .conftest import ENGLISH, ENGLISH_OTHER, write


def _sketch(rng: np.random.Generator, n: int, spread: int = 32) -> np.ndarray:
    return np.unique(rng.integers(0, 1 << spread, n, dtype=np.uint64)).astype(np.uint32)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 1500), st.sampled_from([8, 20, 26, 32])), max_size=40), st.integers(0, 2**32))
def test_every_sketch_comes_back_as_it_was(decoding, shapes, seed):
    """Any mix of sizes and spreads (values crowded low, or spread over all 32 bits), packed together and read
    back joined or one by one."""
    rng = np.random.default_rng(seed)
    sketches = [_sketch(rng, n, spread) for n, spread in shapes]
    blobs = sketchpack.pack(sketches)
    values, lengths = sketchpack.unpack_joined(blobs)
    assert lengths.tolist() == [len(s) for s in sketches]
    assert np.array_equal(values, np.concatenate(sketches or [np.empty(0, np.uint32)]))
    assert all(np.array_equal(a, b) for a, b in zip(sketchpack.unpack_each(blobs), sketches))
    for sketch, blob in zip(sketches, blobs):  # coded only where shorter; the two told apart by length
        plain = 4 * len(sketch)
        assert len(blob) <= plain and (len(blob) % 4 == 1) == (len(blob) < plain)


def test_a_sketch_of_a_typical_text_takes_a_fifth_less():
    rng = np.random.default_rng(1)
    sketches = [_sketch(rng, n) for n in (135, 230, 1024)]
    sizes = [len(b) for b in sketchpack.pack(sketches)]
    assert sizes == sketchpack.coded_size(np.array([len(s) for s in sketches])).tolist()
    assert [size / (4 * len(s)) for size, s in zip(sizes, sketches)] < [0.85, 0.82, 0.8]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 1500), st.sampled_from([8, 20, 26, 32])), max_size=40), st.integers(0, 2**32))
def test_compiled_packing_gives_numpys_bytes(monkeypatch, shapes, seed):
    """A worker codes its batch's sketches compiled (fastdecode.coded), a process without numba with numpy: the
    same bytes, so a store's sketches (and their checksums) do not depend on which process wrote them."""
    from dedupdb.storage import decoding, fastdecode

    rng = np.random.default_rng(seed)
    sketches = [_sketch(rng, n, spread) for n, spread in shapes]
    sketches += [np.array([0, 2**32 - 1], np.uint32), np.arange(0, 2**32, 2**24, dtype=np.uint64).astype(np.uint32)]
    monkeypatch.setattr(decoding, "decoder", lambda: fastdecode)
    compiled = sketchpack.pack(sketches)
    monkeypatch.setattr(decoding, "decoder", lambda: None)
    assert compiled == sketchpack.pack(sketches)


def test_unsorted_values_are_refused_not_stored(decoding):
    for unsorted in (np.arange(200, dtype=np.uint32)[::-1].copy(), np.array([7] * 300, np.uint32)):
        with pytest.raises(ValueError, match="sorted"):
            sketchpack.pack([np.arange(300, dtype=np.uint32), unsorted])


def test_damaged_bytes_are_refused(decoding):
    rng = np.random.default_rng(2)
    blob = sketchpack.pack([_sketch(rng, 300)])[0]
    for damaged in (blob[:-2], blob[:-4], blob[:1], blob[:-8] + bytes(4), blob[:2] + bytes(len(blob) - 2)):
        with pytest.raises(ValueError):
            sketchpack.unpack_joined([damaged])
    flipped = bytearray(blob)
    flipped[-5] ^= 0xFF  # bits of the vector: too many or too few values marked
    with pytest.raises(ValueError):
        sketchpack.unpack_joined([bytes(flipped)])


def test_a_store_reads_plain_sketches_of_before_beside_coded_ones(tmp_path, db_path):
    """Sketches stored plain (as every store before) and coded ones give the same pairs, scores and check."""
    folder = tmp_path / "f"
    long = " ".join(f"{word}{i % 7}" for i, word in enumerate((ENGLISH + " " + ENGLISH_OTHER).split() * 3))
    write(folder / "a.txt", long)  # a few hundred shingles: coded
    write(folder / "b.txt", long + " with a few more words at the end of it")
    write(folder / "c.txt", ENGLISH_OTHER)  # a few dozen: plain
    with dedupdb.open(db_path) as db:
        db.add([folder])
        before = sorted((p.a, p.b, p.jaccard) for p in db.pairs())
        rows = db.store.conn.execute("SELECT id, sketch FROM contents ORDER BY id").fetchall()
        assert any(len(blob) % 4 == 1 for _, blob in rows)
        sketches = db.store.sketches([cid for cid, _ in rows])
    with dedupdb.open(db_path) as db:
        first = rows[0][0]
        db.store.conn.execute("UPDATE contents SET sketch = ?, checksum = NULL WHERE id = ?",  # as then: no checksum
                              (sketches[first][0].astype("<u4").tobytes(), first))
        assert db.store.sketches([first])[first][0].tolist() == sketches[first][0].tolist()
        assert db.check().sound
        db.reindex(threshold=db.settings.threshold)
        assert sorted((p.a, p.b, p.jaccard) for p in db.pairs()) == before
        db.store.conn.execute("UPDATE contents SET sketch = x'01020304050607' WHERE id = ?", (first,))
        with pytest.raises(DatabaseError, match="damaged"):
            db.store.sketch_columns([first])
