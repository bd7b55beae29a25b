"""dedupdb check: a sound store passes; each invariant broken by hand fails by name; damaged pages fail cleanly."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import dedupdb
import dedupdb.storage.blocks
from dedupdb.index.check import CHECKS
from dedupdb.index.clusters import components as union_find_components, dense_components as components

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, stored_rows, tamper_rows, write

VOCABULARY = [f"word{i}" for i in range(3000)]


def make_corpus(root: Path, originals: int, seed: int = 7) -> Path:
    """Long texts (with a SimHash), a one-word edit of every third, an exact copy of every seventh, and short
    English and Chinese near-duplicates (MinHash only)."""
    rng = random.Random(seed)
    for i in range(originals):
        words = [rng.choice(VOCABULARY) for _ in range(120)]
        write(root / f"doc{i}.txt", " ".join(words))
        if i % 3 == 0:
            words[10] = "edited"
            write(root / "edits" / f"doc{i}.txt", " ".join(words))
        if i % 7 == 0:
            write(root / "copies" / f"doc{i}.txt", (root / f"doc{i}.txt").read_text())
    write(root / "short" / "en.txt", ENGLISH)
    write(root / "short" / "en-edited.txt", ENGLISH_EDITED)
    write(root / "short" / "zh.txt", CHINESE)
    write(root / "short" / "zh-edited.txt", CHINESE_EDITED)
    write(root / "short" / "zh-other.txt", CHINESE_OTHER)
    return root


@pytest.fixture
def store(tmp_path, cli, db_path) -> Path:
    """A sound store of some 70 documents, with exact and near duplicates, long and short texts."""
    result = cli("add", str(make_corpus(tmp_path / "corpus", 40)), "--workers", "0")
    assert result.exit_code == 0, result.output
    return db_path


def raw(db_path: Path, *statements: str) -> None:
    """Change the store behind dedupdb's back (foreign keys off, as a careless tool would)."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


def scalar(db_path: Path, sql: str):
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


def check_json(cli) -> tuple[int, dict]:
    result = cli("check", "--format", "json")
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout)


# --- a sound store -------------------------------------------------------------


def test_sound_store_passes_cli_and_library(store, cli):
    result = cli("check")
    assert result.exit_code == 0, result.output
    documents = scalar(store, "SELECT count(*) FROM documents")
    contents = scalar(store, "SELECT count(*) FROM contents")
    pairs = scalar(store, "SELECT count(*) FROM pairs")
    assert pairs > 0 and contents < documents  # near and exact duplicates both present
    assert result.output.strip() == f"sound: {documents} documents, {contents} contents, {pairs} pairs"

    code, data = check_json(cli)
    assert code == 0 and data["sound"] is True and data["problems"] == [] and data["checks"] == list(CHECKS)

    with dedupdb.open(store, create=False) as db:
        report = db.check()
    assert report.sound and report.problems == ()
    assert (report.documents, report.contents, report.pairs) == (documents, contents, pairs)


def test_expected_index_rows_include_simhash_blocks(store):
    """The long texts have 53 band rows and 10 SimHash block-pair rows each, the short ones bands only."""
    owners, counts = np.unique(stored_rows(store) & ((1 << 30) - 1), return_counts=True)
    per_content = dict(zip(owners.tolist(), counts.tolist()))
    conn = sqlite3.connect(store)
    with_simhash = {r[0] for r in conn.execute("SELECT id FROM contents WHERE simhash IS NOT NULL")}
    conn.close()
    assert with_simhash and set(per_content) - with_simhash
    assert {per_content[c] for c in with_simhash} == {63}
    assert {n for c, n in per_content.items() if c not in with_simhash} == {53}


def test_stays_sound_through_changes_removals_and_reindex(store, cli, tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "doc1.txt").write_text(ENGLISH_EDITED + " and one more sentence")
    (corpus / "doc4.txt").unlink()
    assert cli("add", str(corpus), "--workers", "0").exit_code == 0
    assert cli("check").exit_code == 0
    assert cli("rm", str(corpus / "edits")).exit_code == 0
    assert cli("prune").exit_code == 0
    assert cli("check").exit_code == 0
    assert cli("reindex", "--threshold", "0.7").exit_code == 0
    result = cli("check")
    assert result.exit_code == 0, result.output


def test_an_empty_store_is_sound(cli):
    assert cli("init").exit_code == 0
    result = cli("check")
    assert result.exit_code == 0 and result.output.strip() == "sound: 0 documents, 0 contents, 0 pairs"


def test_no_database_is_one_line(cli):
    result = cli("check")
    assert result.exit_code == 1 and "no database at" in result.output
    assert len(result.output.strip().splitlines()) == 1


# --- each invariant broken by hand ------------------------------------------------


def _fails(cli, check: str, *, also: tuple[str, ...] = ()) -> dict:
    """check fails with exactly this invariant (and those in also), one line each plus the verdict."""
    result = cli("check")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    failed = sorted({check, *also}, key=CHECKS.index)
    assert [line.split(":")[0] for line in lines[:-1]] == failed, result.output
    assert lines[-1].startswith(f"not sound: {len(failed)} of {len(CHECKS)} checks failed")
    code, data = check_json(cli)
    assert code == 1 and data["sound"] is False and data["failed"] == failed
    return next(p for p in data["problems"] if p["check"] == check)


def test_deleted_index_row(store, cli):
    entries = np.sort(stored_rows(store))
    entry = int(entries[100])
    owner = entry & ((1 << 30) - 1)
    rows = int(np.count_nonzero((entries & ((1 << 30) - 1)) == owner))
    tamper_rows(store, remove=[entry])
    problem = _fails(cli, "index_rows")
    assert problem["count"] == 1 and problem["what"] == "wrong index rows (1 missing and 0 extra, in 1 content)"
    assert problem["examples"] == [f"content {owner}: 1 of {rows} missing"]


def test_stray_index_rows(store, cli):
    # One extra row for an existing content, one for a content id beyond every stored one.
    tamper_rows(store, add=[(12345 << 30) | 1, (777 << 30) | 99999])
    problem = _fails(cli, "index_rows")
    assert problem["count"] == 2
    assert problem["what"] == "wrong index rows (0 missing and 1 extra, in 1 content; 1 of contents that do not exist)"
    assert problem["examples"] == ["content 1: 1 extra", "content 99999 (no such content): 1 row"]


def test_index_rows_left_by_a_deleted_content(store, cli):
    # A content id among the stored ones that no content has any more; it was in no pair, so clusters hold.
    victim = scalar(
        store,
        "SELECT id FROM contents WHERE documents = 1 AND id < (SELECT max(id) FROM contents) "
        "AND id NOT IN (SELECT a FROM pairs UNION SELECT b FROM pairs) ORDER BY id LIMIT 1",
    )
    rows = int(np.count_nonzero((stored_rows(store) & ((1 << 30) - 1)) == victim))
    raw(store, f"DELETE FROM documents WHERE content_id = {victim}", f"DELETE FROM contents WHERE id = {victim}")
    problem = _fails(cli, "index_rows", also=("containment_rows",))  # its containment rows are left behind too
    assert problem["count"] == rows
    assert problem["examples"] == [f"content {victim} (no such content): {rows} rows"]


def test_wrong_documents_count(store, cli):
    raw(store, "UPDATE contents SET documents = documents + 1 WHERE id = 3")
    problem = _fails(cli, "document_counts")
    assert problem["count"] == 1 and problem["examples"] == ["content 3: documents = 2, 1 point at it"]


def test_content_without_documents(store, cli):
    victim = scalar(store, "SELECT id FROM contents WHERE documents = 1 ORDER BY id LIMIT 1")
    raw(store, f"DELETE FROM documents WHERE content_id = {victim}", f"UPDATE contents SET documents = 0 WHERE id = {victim}")
    problem = _fails(cli, "orphan_contents")
    assert problem["count"] == 1 and problem["examples"] == [f"content {victim}"]


def test_document_pointing_at_nothing(store, cli):
    raw(store, "UPDATE documents SET file_id = 99999 WHERE id = 2")
    problem = _fails(cli, "document_links")
    assert problem["count"] == 1 and "no file 99999" in problem["examples"][0]


def test_a_document_whose_snippet_or_key_is_damaged(store, cli):
    """Bytes damaged inside a row (not valid UTF-8) pass SQLite's own check, which reads pages, not values; then
    stats, report and export failed on them while check said sound."""
    raw(store, "UPDATE documents SET snippet = CAST(X'61FF0E62' AS TEXT) WHERE id = (SELECT min(id) FROM documents)",
        "UPDATE documents SET key = CAST(X'C328' AS TEXT) WHERE id = (SELECT max(id) FROM documents)")
    problem = _fails(cli, "document_texts")
    assert problem["count"] == 2
    assert problem["examples"][0].endswith("its snippet is not text") and problem["examples"][1].endswith("its key is not text")


def test_pair_to_a_missing_content(store, cli):
    raw(store, "INSERT INTO pairs (a, b, jaccard, hamming) VALUES (1, 99999, 0.7, NULL)")
    problem = _fails(cli, "pairs")
    assert problem["count"] == 1 and problem["examples"] == ["pair (1, 99999): no content 99999"]


def test_pair_with_jaccard_out_of_range(store, cli):
    a, b = sqlite3.connect(store).execute("SELECT a, b FROM pairs LIMIT 1").fetchone()
    raw(store, f"UPDATE pairs SET jaccard = 1.5 WHERE a = {a} AND b = {b}")
    problem = _fails(cli, "pairs")
    assert problem["examples"] == [f"pair ({a}, {b}): jaccard 1.5 outside [0, 1]"]


def test_wrong_cluster_label(store, cli):
    # The larger side of a pair labelled as its own cluster, as if the pair had never been merged.
    b = scalar(store, "SELECT max(b) FROM pairs")
    right = scalar(store, f"SELECT cluster FROM contents WHERE id = {b}")
    assert right < b
    raw(store, f"UPDATE contents SET cluster = id WHERE id = {b}")
    problem = _fails(cli, "clusters")
    assert problem["count"] == 1 and problem["examples"] == [f"content {b}: cluster {b}, should be {right}"]


def test_cluster_label_of_a_lone_content(store, cli):
    lone = scalar(store, "SELECT id FROM contents WHERE id NOT IN (SELECT a FROM pairs UNION SELECT b FROM pairs) "
                         "ORDER BY id DESC LIMIT 1")
    raw(store, f"UPDATE contents SET cluster = 1 WHERE id = {lone}")
    assert _fails(cli, "clusters")["count"] == 1


def test_library_report_names_the_failed_invariants(store):
    raw(store, "UPDATE contents SET documents = 7 WHERE id = 2", "INSERT INTO pairs (a, b, jaccard, hamming) VALUES (2, 99998, 0.9, NULL)")
    with dedupdb.open(store, create=False) as db:
        report = db.check()
    assert not report.sound and report.failed() == ["document_counts", "pairs"]
    assert report.problem("pairs").count == 1


# --- stored signatures changed behind the store's back ---------------------------------


@pytest.fixture
def long_store(store, tmp_path, cli) -> tuple[Path, int, str]:
    """The store, with a text of more shingles than a sketch holds: it keeps its MinHash signature, so its index
    rows do not follow from its sketch. Returns (store, that content's id, its text)."""
    rng = random.Random(11)
    text = " ".join(rng.choice(VOCABULARY) for _ in range(1500))
    result = cli("add", str(write(tmp_path / "long" / "long.txt", text)), "--workers", "0")
    assert result.exit_code == 0, result.output
    victim = scalar(store, "SELECT id FROM contents WHERE length(minhash) > 0")
    assert scalar(store, f"SELECT length(sketch) % 4 FROM contents WHERE id = {victim}") == 1  # coded
    return store, victim, text


def overwrite(db_path: Path, content_id: int, column: str, at: int, data: bytes) -> None:
    """Overwrite bytes of one content's stored blob in place, as a failing disk or a careless tool would."""
    blob = scalar(db_path, f"SELECT {column} FROM contents WHERE id = {content_id}")
    assert at + len(data) <= len(blob)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute(f"UPDATE contents SET {column} = ? WHERE id = ?", (blob[:at] + data + blob[at + len(data):],
                                                                          content_id))
    finally:
        conn.close()


def test_every_content_carries_a_checksum_and_a_sound_store_stays_sound(long_store, cli):
    store, _, _ = long_store
    assert scalar(store, "SELECT count(*) FROM contents WHERE checksum IS NULL") == 0
    code, data = check_json(cli)
    assert code == 0 and data["sound"] is True and data["without_checksums"] == 0
    assert "signatures" in data["checks"]


def test_overwritten_sketch_bytes_are_named_and_refused_on_read(long_store, cli):
    """12 bytes inside the low bytes of a coded sketch: it still decodes, and the content's index rows come from
    its kept signature, so nothing but a checksum tells."""
    store, victim, text = long_store
    overwrite(store, victim, "sketch", 2 + 3 * 40, random.Random(5).randbytes(12))
    problem = _fails(cli, "signatures")
    assert problem["count"] == 1
    assert problem["examples"] == [f"content {victim}: its stored signatures do not match their checksum"]
    assert "reindex --from-sources" in cli("check").output.strip().splitlines()[-1]
    with dedupdb.open(store, create=False) as db:
        report = db.check()
        assert report.failed() == ["signatures"] and report.problem("signatures").count == 1
        for read in (lambda: db.store.sketch_columns([victim]), lambda: db.store.sketches([victim]),
                     lambda: db.store.contents([victim]), lambda: db.query(text)):
            with pytest.raises(dedupdb.errors.DatabaseError, match=f"damaged .*content {victim}"):
                read()
    result = cli("query", text)
    assert result.exit_code != 0 and "damaged" in result.output and "Traceback" not in result.output
    # The repair check names: every file read again, every text's signatures stored anew.
    assert cli("reindex", "--from-sources").exit_code == 0
    assert cli("check").exit_code == 0


def test_one_flipped_byte_of_a_kept_signature_is_named(long_store, cli):
    store, victim, _ = long_store
    signature = scalar(store, f"SELECT minhash FROM contents WHERE id = {victim}")
    overwrite(store, victim, "minhash", 100, bytes([signature[100] ^ 0x10]))
    problem = _fails(cli, "signatures")  # only: its index rows are not compared with a damaged signature
    assert problem["examples"] == [f"content {victim}: its stored signatures do not match their checksum"]
    with dedupdb.open(store, create=False) as db:
        assert db.check().failed() == ["signatures"]


def test_contents_without_checksums_check_sound_as_far_as_their_bytes_allow(long_store, cli):
    """Contents stored before checksums existed (NULL) are read and checked sound; damage their bytes show is
    still named; 'dedupdb reindex' gives them their checksums."""
    store, victim, text = long_store
    contents = scalar(store, "SELECT count(*) FROM contents")
    raw(store, "UPDATE contents SET checksum = NULL")
    result = cli("check")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("sound: ") and f"({contents} contents stored before checksums" in result.output
    code, data = check_json(cli)
    assert code == 0 and data["sound"] and data["without_checksums"] == contents
    with dedupdb.open(store, create=False) as db:
        assert db.query(text)[0].jaccard == 1.0

    # Two values of one high part given the same low bytes: no longer in order.
    with dedupdb.open(store, create=False) as db:
        values = db.store.sketches([victim])[victim][0]
    k = next(i for i in range(len(values) - 1) if values[i] >> 24 == values[i + 1] >> 24)
    sketch = scalar(store, f"SELECT sketch FROM contents WHERE id = {victim}")
    overwrite(store, victim, "sketch", 2 + 3 * k, b"\xff" * 12)
    problem = _fails(cli, "signatures")
    assert problem["examples"] == [f"content {victim}: its sketch is out of order or too long"]

    raw(store, f"UPDATE contents SET sketch = x'{sketch.hex()}' WHERE id = {victim}")
    assert cli("reindex").exit_code == 0
    code, data = check_json(cli)
    assert code == 0 and data["without_checksums"] == 0
    assert scalar(store, "SELECT count(*) FROM contents WHERE checksum IS NULL") == 0
    overwrite(store, victim, "sketch", 2 + 3 * 40, random.Random(5).randbytes(12))
    assert _fails(cli, "signatures")["count"] == 1


# --- damaged pages ----------------------------------------------------------------


def damage_middle(db_path: Path, pages: int = 4, seed: int = 1) -> None:
    """Overwrite whole pages in the middle of the file with noise, as a failing disk would."""
    assert not Path(str(db_path) + "-wal").exists()  # everything is in the main file
    page_size = scalar(db_path, "PRAGMA page_size")
    count = db_path.stat().st_size // page_size
    assert count > 40
    noise = random.Random(seed).randbytes(pages * page_size)
    with open(db_path, "r+b") as f:
        f.seek((count // 2) * page_size)
        f.write(noise)


def damage_roots(db_path: Path, *tables: str) -> None:
    """Overwrite the root pages of these tables: the store still opens, reading them fails later."""
    conn = sqlite3.connect(db_path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (t,)).fetchone()[0] for t in tables]
    conn.close()
    with open(db_path, "r+b") as f:
        for root in roots:
            f.seek((root - 1) * page_size)
            f.write(random.Random(root).randbytes(page_size))


@pytest.fixture
def big_store(tmp_path, cli, db_path) -> Path:
    """Enough documents for many pages of contents and index rows."""
    result = cli("add", str(make_corpus(tmp_path / "corpus", 300)), "--workers", "0")
    assert result.exit_code == 0, result.output
    return db_path


def test_damaged_pages_fail_check_without_traceback(big_store, cli):
    damage_middle(big_store)
    result = cli("check")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("integrity: ") and lines[-1].startswith("not sound:")
    code, data = check_json(cli)
    assert code == 1 and "integrity" in data["failed"]


def test_damaged_table_pages_fail_check_without_traceback(big_store, cli):
    damage_roots(big_store, "contents", "run_blocks")
    result = cli("check")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.output.startswith("integrity: ")
    assert "index_rows" in result.output  # the scan of the damaged index could not finish


def test_check_library_on_damaged_table_pages(big_store):
    damage_roots(big_store, "run_blocks")
    with dedupdb.open(big_store, create=False) as db:
        report = db.check()
    assert not report.sound and report.failed()[:3] == ["integrity", "runs", "index_rows"]
    assert report.documents is not None  # the rest could be read


def test_components_is_smallest_member_of_each_component():
    rng = np.random.default_rng(3)
    for _ in range(20):
        size = int(rng.integers(1, 300))
        edges = rng.integers(0, size, size=(int(rng.integers(0, 400)), 2))
        got = components(size, edges[:, 0], edges[:, 1])
        want = union_find_components(range(size), map(tuple, edges.tolist()))
        assert got.tolist() == [want[i] for i in range(size)]


def test_damaged_runs_are_named(store, cli):
    """A block rewritten behind the store's back (its entries shuffled, its fence left as it was) fails 'runs', and
    the rows it hides fail 'index_rows' too, as lookups can no longer find them."""
    conn = sqlite3.connect(store)
    block, first, entries, data = conn.execute(
        "SELECT b.id, b.first, b.entries, b.data FROM run_blocks b JOIN runs r ON r.id = b.run WHERE r.family = 0 "
        "ORDER BY b.id LIMIT 1"
    ).fetchone()
    values = dedupdb.storage.blocks.decode_block(first, entries, data)[::-1].astype("<i8")  # kept whole, out of order
    conn.execute("UPDATE run_blocks SET data = ? WHERE id = ?", (values.tobytes(), block))
    conn.commit()
    conn.close()
    result = cli("check", "--format", "json")
    assert result.exit_code == 1
    problems = {p["check"]: p for p in json.loads(result.stdout)["problems"]}
    assert problems["runs"]["count"] == 1 and f"block {block} is not a sorted block" in problems["runs"]["examples"][0]


def test_blocks_of_no_run_are_named_once(store, cli):
    raw(store, "INSERT INTO run_blocks (run, first, entries, data) VALUES (987654, 5, 1, x'0500000000000000')")
    result = cli("check", "--format", "json")
    assert result.exit_code == 1
    problem = next(p for p in json.loads(result.stdout)["problems"] if p["check"] == "runs")
    assert problem["count"] == 1 and problem["examples"] == ["1 blocks belong to no run"]
