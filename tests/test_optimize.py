"""dedupdb optimize and Database.optimize: each index's sorted runs merged into one, with the same answers, safe
to interrupt and beside another process that adds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dedupdb
from dedupdb.errors import DatabaseError
from dedupdb.storage.store import Store

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write

WORDS = ("river", "market", "council", "harvest", "engine", "library", "winter", "signal", "garden", "ledger")
QUERIES = [ENGLISH, ENGLISH_EDITED, CHINESE_EDITED, ENGLISH_OTHER[:90], f"{ENGLISH_OTHER} {ENGLISH}",
           "nothing like any stored text at all, just a few words of its own"]


def _text(part: int, i: int) -> str:
    words = " ".join(WORDS[(part * 3 + i * 7 + j) % len(WORDS)] + str(j % 5) for j in range(40))
    return f"Entry {part}-{i}: {words}"


def _folders(tmp_path: Path, parts: int = 3) -> list[Path]:
    """Folders each added on its own (a run of index rows and one of containment rows each), with exact copies,
    near-duplicates and a passage held in a longer text among them."""
    folders = []
    for part in range(parts):
        folder = tmp_path / f"part{part}"
        for i in range(6):
            write(folder / f"{i}.txt", _text(part, i))
        write(folder / "report.txt", ENGLISH if part % 2 == 0 else ENGLISH_EDITED)
        write(folder / "park.txt", CHINESE if part % 2 == 0 else CHINESE_EDITED)
        write(folder / "long.txt", f"{_text(part, 9)} {ENGLISH_OTHER} {CHINESE_OTHER}")
        folders.append(folder)
    return folders


def _answers(db) -> list:
    """Every hit of every query, near-duplicates alone and with containment, with its scores."""
    return [[(h.key, h.jaccard, h.hamming, h.exact, h.containment) for h in db.query(text, top=0, containment=c)]
            for text in QUERIES for c in (None, 0.5)]


def _state(path: Path) -> tuple:
    with dedupdb.open(path, create=False) as db:
        report = db.check()
        assert report.sound, report
        return _answers(db), sorted((p.a, p.b, p.jaccard, p.hamming, p.exact) for p in db.pairs())


def test_optimize_through_the_cli_merges_the_runs_and_answers_alike(tmp_path, cli, db_path):
    for folder in _folders(tmp_path):
        assert cli("add", str(folder), "--workers", "0").exit_code == 0
    with dedupdb.open(db_path, create=False) as db:
        runs = db.store.run_counts()
    assert runs["index"] == 3 and runs["containment"] == 3
    answers, pairs = _state(db_path)
    assert any(answers) and pairs
    result = cli("optimize")
    assert result.exit_code == 0, result.output
    assert "index rows: 3 runs merged into 1 of small blocks" in result.output
    assert "containment rows: 3 runs merged into 1 of small blocks" in result.output
    with dedupdb.open(db_path, create=False) as db:
        assert db.store.run_counts() == {"index": 1, "containment": 1}
    assert _state(db_path) == (answers, pairs)
    again = cli("optimize", "--format", "json")
    assert again.exit_code == 0, again.output
    out = json.loads(again.stdout)
    assert out["runs_before"] == out["runs_after"] == {"index": 1, "containment": 1} and out["seconds"] >= 0
    assert out["rewritten"] == {"index": 0, "containment": 0}
    assert "nothing to merge" in cli("optimize").output


def test_optimize_through_the_library(tmp_path):
    path = tmp_path / "lib.db"
    with dedupdb.open(path) as db:
        for folder in _folders(tmp_path, parts=2):
            db.add([folder], workers=0)
        before = _answers(db)
        summary = db.optimize()
        assert summary.merged and summary.runs_before == {"index": 2, "containment": 2}
        assert summary.runs_after == {"index": 1, "containment": 1}
        assert summary.rewritten == {"index": 2, "containment": 2}
        assert _answers(db) == before  # this connection reads the merged runs too
        assert not db.optimize().merged
        # An add afterwards starts a run beside the merged one, and finds what is stored.
        write(tmp_path / "later" / "new.txt", _text(7, 1))
        db.add([write(tmp_path / "later" / "copy.txt", ENGLISH).parent], workers=0)
        assert db.store.run_counts()["index"] == 2
        assert any(h.path.endswith("copy.txt") for h in db.query(ENGLISH))
        assert db.check().sound


def test_an_interrupted_optimize_keeps_what_it_finished_and_loses_nothing(tmp_path, monkeypatch):
    path = tmp_path / "stop.db"
    with dedupdb.open(path) as db:
        for folder in _folders(tmp_path):
            db.add([folder], workers=0)
    answers, pairs = _state(path)

    def stopped(self):
        raise KeyboardInterrupt  # Ctrl-C once the index rows are merged

    monkeypatch.setattr(Store, "compact_containment", stopped)
    with dedupdb.open(path, create=False) as db:
        with pytest.raises(KeyboardInterrupt):
            db.optimize()
    monkeypatch.undo()
    with dedupdb.open(path, create=False) as db:
        assert db.store.run_counts() == {"index": 1, "containment": 3}
    assert _state(path) == (answers, pairs)
    with dedupdb.open(path, create=False) as db:
        assert db.optimize().runs_after == {"index": 1, "containment": 1}
    assert _state(path) == (answers, pairs)


def test_optimize_beside_another_process_adding(tmp_path):
    """Each holds the write lock in turn: both finish, and the store holds everything, whichever went first."""
    path = tmp_path / "shared.db"
    folders = _folders(tmp_path, parts=4)
    with dedupdb.open(path) as db:
        for folder in folders[:3]:
            db.add([folder], workers=0)
    add = subprocess.Popen([sys.executable, "-m", "dedupdb", "add", str(folders[3]), "--db", str(path), "--workers", "0"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with dedupdb.open(path, create=False) as db:
            db.optimize()
    finally:
        _, err = add.communicate(timeout=120)
    assert add.returncode == 0, err
    with dedupdb.open(path, create=False) as db:
        assert db.store.counts()["documents"] == 4 * 9
        assert db.check().sound
        assert sum(h.path.endswith("report.txt") for h in db.query(ENGLISH, top=0, containment=None)) == 4
    with dedupdb.open(tmp_path / "alone.db") as alone:  # the same files added one folder at a time, not optimized
        for folder in folders:
            alone.add([folder], workers=0)
    assert _state(path)[1] == _state(tmp_path / "alone.db")[1]


def test_optimize_of_a_store_it_cannot_write_says_so(tmp_path, runner):
    from dedupdb.cli.commands import app

    missing = runner.invoke(app, ["optimize", "--db", str(tmp_path / "none.db")])
    assert missing.exit_code == 1 and "no database" in missing.output and "Traceback" not in missing.output
    path = tmp_path / "ro.db"
    with dedupdb.open(path) as db:
        db.add([write(tmp_path / "one" / "a.txt", ENGLISH).parent], workers=0)
    with dedupdb.open(path, readonly=True) as db:
        with pytest.raises(DatabaseError):
            db.optimize()
