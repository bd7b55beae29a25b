"""Document pairs (exact copies included) and containment: excerpts, truncated copies and merged texts."""

from __future__ import annotations

import csv
import io
import json
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import dedupdb
from dedupdb.storage import schema as migrate
from dedupdb.sketch.winnowing import Side, containment, winnowed
from dedupdb.text.hashing import distinct
from dedupdb.text.tokens import Tokenizer, shingle_hashes

from .conftest import ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, stored_rows, tamper_rows, write

VOCABULARY = [f"word{i}" for i in range(5000)]


def _words(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) for _ in range(count)]


@pytest.fixture
def library(tmp_path) -> Path:
    """Long texts, a truncated copy of one, two merged into one, exact copies of another, and short texts."""
    root = tmp_path / "library"
    long = {f"long{i}.txt": _words(i, 400) for i in range(6)}
    for name, words in long.items():
        write(root / name, " ".join(words))
    write(root / "truncated.txt", " ".join(long["long0.txt"][:180]))  # 45% of it: Jaccard 0.45
    write(root / "merged.txt", " ".join(long["long1.txt"] + long["long2.txt"]))
    write(root / "copies" / "a.txt", " ".join(long["long3.txt"]))
    write(root / "copies" / "b.txt", " ".join(long["long3.txt"]))
    write(root / "short.txt", ENGLISH)
    write(root / "short-edited.txt", ENGLISH_EDITED)
    write(root / "weather.txt", ENGLISH_OTHER)
    return root


@pytest.fixture
def indexed(cli, library) -> Path:
    result = cli("add", str(library), "--workers", "0")
    assert result.exit_code == 0, result.output
    return library


def _name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _pairs(cli, *args: str) -> list[dict]:
    result = cli("pairs", *args)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def _named(pairs: list[dict]) -> dict[frozenset, dict]:
    return {frozenset((_name(p["a"]), _name(p["b"]))): p for p in pairs}


# --- winnowing ----------------------------------------------------------------------------------------------


def test_winnowing_keeps_the_minimum_of_every_window_and_finds_every_long_shared_run():
    tokenizer = Tokenizer(2, 2)
    rng = random.Random(5)
    texts = [" ".join(rng.choice(VOCABULARY[:60]) for _ in range(rng.randrange(0, 80))) for _ in range(200)]
    batch = tokenizer.batch(texts)
    for ngram, window in ((4, 9), (2, 8), (1, 1)):
        got = winnowed(batch, ngram, window)
        for i in range(len(texts)):
            runs = shingle_hashes(batch.hashes[batch.bounds[i] : batch.bounds[i + 1]], ngram)
            if len(runs) < window:
                expected = runs[:0] if len(runs) == 0 else np.array([runs.min()], np.uint32)
            else:
                expected = distinct(np.array([runs[j : j + window].min() for j in range(len(runs) - window + 1)]))
            assert np.array_equal(got[i], expected), (ngram, window, i)
    # Two texts sharing a run of window + ngram - 1 tokens share a fingerprint, wherever the run lies.
    for seed in range(30):
        shared = _words(1000 + seed, 12)
        a = _words(2000 + seed, 50) + shared + _words(3000 + seed, 7)
        b = _words(4000 + seed, 3) + shared + _words(5000 + seed, 90)
        fa, fb = winnowed(tokenizer.batch([" ".join(a), " ".join(b)]), 4, 9)
        assert len(np.intersect1d(fa, fb)) >= 1


def test_containment_is_exact_for_small_texts_and_uses_fingerprints_for_a_passage_in_a_long_one():
    small = Side(3, np.array([2, 10, 18], np.uint32), np.array([5], np.uint32))  # token n-grams: even hashes
    large = Side(4, np.array([2, 10, 14, 18], np.uint32), np.array([5, 7], np.uint32))
    assert containment(small, large, 1024) == 1.0 and containment(large, small, 1024) == 0.75
    # A sketch of 8 hashes standing for 100 shingles covers only hashes up to 80: none of the passage's lie there,
    # so its fingerprints decide (all of them are among the long text's).
    passage = Side(10, np.arange(100, 120, 2, dtype=np.uint32), np.array([104, 107], np.uint32))
    long = Side(100, np.arange(10, 90, 10, dtype=np.uint32), np.array([3, 104, 107, 500], np.uint32))
    assert containment(passage, long, 8) == 1.0
    # A short text's character view (odd hashes) is not looked for: a long text has none.
    viewed = Side(5, np.array([1, 2, 3, 10, 18], np.uint32), None)
    assert containment(viewed, large, 1024) == 1.0


@pytest.mark.parametrize("compiled", [False, True])
def test_shares_of_many_queries_are_containment_pair_by_pair(monkeypatch, compiled):
    """The batch scoring (compiled where numba is loaded, else numpy a query) gives containment()'s number for every
    pair: whole and sampled sketches, character views, empty sketches, missing fingerprints, a sample too small."""
    from dedupdb.index import containment as finder
    from dedupdb.sketch import fastverify

    assert fastverify.held is not None  # numba is loaded: the compiled path is the one taken unless refused
    if not compiled:
        monkeypatch.setattr(finder, "compiled_verifying", lambda: None)
    else:
        calls = []
        monkeypatch.setattr(finder, "compiled_verifying", lambda: calls.append(1) or fastverify)
    rng = np.random.default_rng(7)
    k = 64

    def side(universe: int) -> Side:
        shingles = int(rng.integers(0, 3 * k))
        values = np.unique(rng.integers(0, universe, shingles).astype(np.uint32))
        prints = None if rng.random() < 0.2 else np.unique(rng.integers(0, 60, int(rng.integers(0, 40))).astype(np.uint32))
        return Side(len(values), values[:k], prints)

    sides = [side(int(rng.choice([200, 2000, 200_000]))) for _ in range(120)]
    sides.append(Side(0, np.empty(0, np.uint32), None))
    asked = [(sides[q], [sides[int(o)] for o in rng.integers(0, len(sides), int(rng.integers(0, 9)))])
             for q in range(len(sides))]
    got = finder.shares_of(asked, k)
    expected = [[containment(query, other, k) for other in others] for query, others in asked]
    assert got == expected
    kinds = {(q.shingles <= k, o.shingles <= k) for q, others in asked for o in others}
    assert kinds == {(True, True), (True, False), (False, True), (False, False)}
    assert any(s is None for row in got for s in row) and any(s == 1.0 for row in got for s in row)
    assert finder.shares_in(asked[3][0], asked[3][1], k) == expected[3]
    if compiled:
        assert calls


# --- document pairs -----------------------------------------------------------------------------------------


def test_pairs_are_document_pairs_with_exact_copies(cli, indexed, db_path):
    pairs = _named(_pairs(cli))
    copies = pairs[frozenset(("a.txt", "b.txt"))]
    assert copies["exact"] is True and copies["jaccard"] == 1.0 and copies["containment"] == 1.0
    assert copies["hamming"] == 0  # both have the one SimHash
    near = pairs[frozenset(("short.txt", "short-edited.txt"))]
    assert near["exact"] is False and 0.5 <= near["jaccard"] < 1.0 and near["containment"] is None
    assert all(p["a"] < p["b"] for p in pairs.values())
    # The library lists the same, lazily; a text with k documents gives k(k-1)/2 exact pairs.
    for i in range(3):
        write(indexed / "copies" / f"more{i}.txt", (indexed / "long3.txt").read_text())
    assert cli("add", str(indexed), "--workers", "0").exit_code == 0
    with dedupdb.open(db_path) as db:
        first = next(iter(db.pairs()))
        assert isinstance(first, dedupdb.Pair)
        exact = [p for p in db.pairs() if p.exact]
        assert len(exact) == 6 * 5 // 2 and all(_name(p.a).startswith(("a", "b", "more", "long3")) for p in exact)


def test_pairs_by_content_keeps_one_key_per_text(cli, indexed):
    by_content = _pairs(cli, "--by", "content")
    assert not any(p["exact"] for p in by_content)
    names = _named(by_content)
    assert frozenset(("short.txt", "short-edited.txt")) in names and frozenset(("a.txt", "b.txt")) not in names
    assert len(by_content) == len({frozenset((p["a"], p["b"])) for p in by_content})


def test_pairs_csv_has_the_jsonl_fields(cli, indexed):
    rows = list(csv.DictReader(io.StringIO(cli("pairs", "--containment", "0.8", "--format", "csv").stdout)))
    lines = _pairs(cli, "--containment", "0.8")
    assert list(rows[0]) == list(lines[0]) == ["a", "b", "jaccard", "hamming", "exact", "containment", "kind"]
    assert [(r["a"], r["b"], float(r["containment"])) for r in rows] == [(p["a"], p["b"], p["containment"]) for p in lines]
    assert {r["exact"] for r in rows} == {"true", "false"}


@pytest.mark.parametrize("args", [("--by", "file"), ("--containment", "1.5"), ("--containment", "0"), ("--containment", "nan")])
def test_pairs_rejects_bad_options(cli, indexed, args):
    """Each a usage error (exit 2), one line, NaN among them (which every comparison lets through)."""
    result = cli("pairs", *args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    if args[1] in ("0", "nan"):
        assert result.output.strip() == f"Error: containment must be in (0, 1], got {float(args[1])}"


def test_library_pairs_rejects_bad_arguments(tmp_path, indexed, db_path):
    with dedupdb.open(db_path) as db:
        with pytest.raises(dedupdb.InputError, match="document or content"):
            list(db.pairs(by="file"))
        with pytest.raises(dedupdb.InputError, match="containment"):
            list(db.pairs(containment=0))


# --- containment --------------------------------------------------------------------------------------------


def test_pairs_containment_lists_truncated_copies_and_merged_texts(cli, indexed, db_path):
    assert frozenset(("long0.txt", "truncated.txt")) not in _named(_pairs(cli))  # below the Jaccard threshold
    found = _named(_pairs(cli, "--containment", "0.8"))
    for pair in (("long0.txt", "truncated.txt"), ("long1.txt", "merged.txt"), ("long2.txt", "merged.txt")):
        p = found[frozenset(pair)]
        assert p["containment"] == 1.0 and p["jaccard"] < 0.5 and p["exact"] is False
    assert frozenset(("long1.txt", "long2.txt")) not in found
    assert found[frozenset(("short.txt", "short-edited.txt"))]["containment"] >= 0.8  # known for ordinary pairs too
    with dedupdb.open(db_path) as db:
        listed = {frozenset((_name(p.a), _name(p.b))): p for p in db.pairs(containment=0.8)}
    assert listed[frozenset(("long0.txt", "truncated.txt"))].containment == 1.0


def test_query_finds_the_text_holding_a_remembered_passage(cli, indexed, db_path):
    passage = " ".join(_words(4, 400)[180:205])  # 25 words from the middle of long4.txt
    result = cli("query", passage, "--format", "json")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert _name(hits[0]["key"]) == "long4.txt" and hits[0]["containment"] == 1.0 and hits[0]["jaccard"] < 0.1
    table = cli("query", passage)
    assert "contained" in table.stdout and "long4.txt" in table.stdout and "1.000" in table.stdout
    assert "No near-duplicates" in cli("query", passage, "--containment", "0").stdout
    # A passage of long1 lies in long1 and in the merged text alike.
    with dedupdb.open(db_path) as db:
        hits = db.query(" ".join(_words(1, 400)[300:330]))
        assert {_name(h.key) for h in hits[:2]} == {"long1.txt", "merged.txt"}
        assert all(h.containment == 1.0 for h in hits[:2])
        assert db.query(" ".join(_words(1, 400)[300:330]), containment=None) == []


def test_forgetting_a_text_removes_its_containment_rows(cli, indexed, db_path):
    with dedupdb.open(db_path) as db:
        before = db.store.containment_rows()
        counts = {cid: len(fp) for cid, fp in _fingerprints(db).items()}
    assert cli("rm", str(indexed / "merged.txt")).exit_code == 0
    with dedupdb.open(db_path) as db:
        (gone,) = set(counts) - set(_fingerprints(db))
        after = before - counts[gone]
        assert counts[gone] > 0 and db.store.containment_rows() == after
        assert all(_name(h.key) != "merged.txt" for h in db.query(" ".join(_words(1, 400)[300:330])))
    assert cli("check").exit_code == 0
    # One of two exact copies going leaves the text, and its rows, to the other.
    assert cli("rm", str(indexed / "copies" / "a.txt")).exit_code == 0
    with dedupdb.open(db_path) as db:
        assert db.store.containment_rows() == after
    assert cli("check").exit_code == 0


def _fingerprints(db) -> dict[int, np.ndarray]:
    return {cid: row.fingerprints for cid, row in db.store.contents(db.store.all_content_ids()).items()}


def test_check_finds_missing_and_stray_containment_rows_and_reindex_repairs_them(cli, indexed, db_path):
    tamper_rows(db_path, "containment", remove=stored_rows(db_path, "containment")[:3], add=[(12345 << 30) | 99999])
    result = cli("check", "--format", "json")
    assert result.exit_code == 1
    problem = next(p for p in json.loads(result.stdout)["problems"] if p["check"] == "containment_rows")
    assert problem["count"] == 4 and "3 missing" in problem["what"]
    assert cli("reindex").exit_code == 0
    assert cli("check").exit_code == 0


# --- a store made before containment -------------------------------------------------------------------------


def _as_schema_3(db_path: Path) -> None:
    """Turn a current store back into schema 3: no containment rows, no fingerprints."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.executescript(
        "BEGIN; DROP TABLE run_filters; DROP TABLE run_blocks; DROP TABLE runs; CREATE TABLE index_keys (entry INTEGER PRIMARY KEY);"
        "DROP INDEX contents_without_fingerprints;"
        "ALTER TABLE contents DROP COLUMN fingerprints; ALTER TABLE contents DROP COLUMN checksum;"
        "PRAGMA user_version = 3; COMMIT;"
    )
    conn.close()


def test_store_made_before_containment_upgrades_and_reindex_from_sources_fills_it(cli, indexed, db_path):
    passage = " ".join(_words(4, 400)[180:205])
    _as_schema_3(db_path)
    result = cli("query", passage, "--format", "json")  # opening migrates: the store works, without containment
    assert result.exit_code == 0, result.output
    with dedupdb.open(db_path) as db:
        assert migrate.schema_version(db.store.conn) == len(migrate.available())
        contents = db.store.counts()["contents"]
        assert db.unfingerprinted() == contents and db.store.containment_rows() == 0
    assert json.loads(result.stdout) == [] and f"Warning: {contents} texts stored before containment" in result.output
    assert "reindex --from-sources" in result.output
    assert cli("check").exit_code == 0  # no rows are expected of texts without fingerprints
    assert frozenset(("a.txt", "b.txt")) in _named(_pairs(cli, "--containment", "0.8"))  # pairs still listed
    result = cli("reindex", "--from-sources")
    assert result.exit_code == 0, result.output
    with dedupdb.open(db_path) as db:
        assert db.unfingerprinted() == 0 and db.store.containment_rows() > 0
    hits = json.loads(cli("query", passage, "--format", "json").stdout)
    assert _name(hits[0]["key"]) == "long4.txt" and hits[0]["containment"] == 1.0
    assert cli("check").exit_code == 0


def test_a_short_cut_of_a_longer_text_is_contained_whatever_its_character_view(tmp_path):
    """A cut of 40 words has a character view and so more shingles than the 60-word text it comes from, which has
    none: containment is still that of the cut in the whole (token n-grams decide which text is the smaller)."""
    words = [f"term{i}" for i in range(60)]
    root = tmp_path / "docs"
    write(root / "whole.txt", " ".join(words))
    write(root / "cut.txt", " ".join(words[:40]))
    with dedupdb.open(tmp_path / "c.db") as db:
        db.add([root])
        found = {frozenset(k.rsplit("/", 1)[-1] for k in (p.a, p.b)): p.containment for p in db.pairs(containment=0.8)}
    assert found[frozenset({"whole.txt", "cut.txt"})] == 1.0


def test_fingerprints_read_together_are_each_ones_own():
    """Stored fingerprints read for many contents at once (views of one array) are what each blob holds, None
    stays None, and a blob that is not whole is refused as reading it alone refuses it."""
    from dedupdb.storage.rows import optional_u32_array, optional_u32_arrays

    rng = np.random.default_rng(2)
    arrays = [rng.integers(0, 2**32, n, dtype=np.uint32) for n in (0, 1, 7, 300)]
    blobs = [a.astype("<u4").tobytes() for a in arrays] + [None, b""]
    got = optional_u32_arrays(blobs)
    assert [None if g is None else g.tolist() for g in got] == \
        [None if b is None else optional_u32_array(b).tolist() for b in blobs]
    assert all(g is None or g.dtype == np.uint32 for g in got)
    assert optional_u32_arrays([]) == [] and optional_u32_arrays([None]) == [None]
    with pytest.raises(ValueError):
        optional_u32_arrays([blobs[2], b"\x01\x02\x03", blobs[3]])
