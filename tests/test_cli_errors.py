from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from dedupdb.cli.commands import app

from .conftest import (
    CHINESE,
    CHINESE_EDITED,
    ENGLISH,
    ENGLISH_EDITED,
    file_hashes,
    write,
)


def _one_line_error(result, text):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert text in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_corrupt_database(cli, db_path):
    db_path.write_bytes(b"this is not a database at all" * 100)
    _one_line_error(cli("stats"), "not a dedupdb database or is corrupt")


def test_database_is_a_directory(runner, tmp_path):
    _one_line_error(runner.invoke(app, ["stats", "--db", str(tmp_path)]), "is a directory")


def test_another_programs_sqlite_database_is_never_made_a_store(cli, db_path, tmp_path):
    """init, add and the library's open() refuse a SQLite file holding another program's tables: it is left
    byte for byte as it was (not given dedupdb's tables, nor switched to a write-ahead log)."""
    import dedupdb

    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    before = db_path.read_bytes()
    (tmp_path / "a.txt").write_text("some words to index here")
    for args in (["init"], ["add", str(tmp_path / "a.txt")]):
        _one_line_error(cli(*args), "holds another program's SQLite database (tables accounts)")
    with pytest.raises(dedupdb.DatabaseError, match="another program's"):
        dedupdb.open(db_path)
    assert db_path.read_bytes() == before and not (tmp_path / (db_path.name + "-wal")).exists()


def test_no_database_yet(cli):
    _one_line_error(cli("report"), "no database at")


def test_locked_database(cli, db_path, tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("some words to index here")
    assert cli("add", str(tmp_path / "a.txt")).exit_code == 0
    import dedupdb.storage.connection as store

    monkeypatch.setattr(store.sqlite3, "connect", _fast_timeout_connect(store.sqlite3.connect))
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    (tmp_path / "a.txt").write_text("other words, so that the add must write")
    try:
        _one_line_error(cli("add", str(tmp_path / "a.txt")), "locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _fast_timeout_connect(connect):
    def wrapper(*args, **kwargs):
        kwargs["timeout"] = 0.1
        conn = connect(*args, **kwargs)
        return _NoBusyWait(conn)

    return wrapper


class _NoBusyWait:
    """A connection whose busy_timeout pragma is ignored, so a lock test fails fast."""

    def __init__(self, conn):
        self._conn = conn

    def execute(self, sql, *args):
        if sql.startswith("PRAGMA busy_timeout"):
            return self._conn.execute("PRAGMA busy_timeout = 100")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.parametrize("command", ["init", "add", "report", "query", "pairs", "stats", "reindex"])
def test_every_command_has_help(runner, command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "--db" in result.output


def test_module_entry_point(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "dedupdb", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "query" in result.stdout


# --- a first add that fails leaves nothing; bad option values are usage errors --------------------------------


def _one_line(result, status: int, text: str) -> None:
    assert result.exit_code == status, result.output
    assert "Traceback" not in result.output
    assert text in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize(
    "args, status, text",
    [
        (["{missing}"], 1, "no such file or folder"),
        (["{file}", "-"], 1, "needs its record format"),
        (["{file}", "--threshold", "1.5"], 2, "threshold must be in (0, 1], got 1.5"),
        (["{file}", "--max-file-size", "0"], 2, "--max-file-size: the size must be at least 1 byte"),
        (["{file}", "--max-record-size", "lots"], 2, "--max-record-size: 'lots' is not a size"),
    ],
    ids=["missing-path", "stdin-without-format", "threshold", "file-size", "record-size"],
)
def test_a_failed_first_add_leaves_no_database(runner, tmp_path, args, status, text):
    (tmp_path / "a.txt").write_text("some words to index here")
    db = tmp_path / "new" / "notes.db"
    given = [a.format(missing=tmp_path / "nope", file=tmp_path / "a.txt") for a in args]
    _one_line(runner.invoke(app, ["add", *given, "--db", str(db)]), status, text)
    assert not (tmp_path / "new").exists()


def test_init_with_a_bad_setting_is_a_usage_error_and_leaves_nothing(runner, tmp_path):
    db = tmp_path / "new" / "notes.db"
    _one_line(runner.invoke(app, ["init", "--permutations", "3", "--db", str(db)]), 2, "permutations must be between")
    assert not (tmp_path / "new").exists()


def test_bad_option_values_on_an_existing_database_are_usage_errors(cli, tmp_path):
    (tmp_path / "a.txt").write_text("some words to index here")
    assert cli("add", str(tmp_path / "a.txt")).exit_code == 0
    _one_line(cli("add", str(tmp_path / "a.txt"), "--threshold", "1.5"), 2, "threshold must be in (0, 1]")
    _one_line(cli("reindex", "--threshold", "0"), 2, "threshold must be in (0, 1]")
    # A value in range that differs from the database's own is no usage error: the database says why not.
    _one_line(cli("add", str(tmp_path / "a.txt"), "--threshold", "0.7"), 1, "created with threshold=0.5")


def test_bad_filter_values_are_usage_errors(runner):
    _one_line(runner.invoke(app, ["filter", "--capacity", "0"], input=""), 2, "capacity must be at least 1")
    _one_line(runner.invoke(app, ["filter", "--error-rate", "2"], input=""), 2, "error rate must be between 0 and 1")


def test_a_bad_setting_in_the_library_makes_no_file(tmp_path):
    import dedupdb
    from dedupdb import OptionError, SettingsError

    db = tmp_path / "new" / "notes.db"
    with pytest.raises(SettingsError, match="threshold must be in") as caught:
        dedupdb.open(db, threshold=1.5)
    assert isinstance(caught.value, OptionError)
    assert not (tmp_path / "new").exists()


# --- standard output closed ('>&-') ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def listed_db(tmp_path_factory):
    import dedupdb

    from .conftest import ENGLISH, ENGLISH_EDITED

    root = tmp_path_factory.mktemp("closed")
    (root / "a.txt").write_text(ENGLISH)
    (root / "b.txt").write_text(ENGLISH)
    (root / "c.txt").write_text(ENGLISH_EDITED)
    with dedupdb.open(root / "notes.db") as db:
        db.add([root], workers=0)
    return root / "notes.db"


def _closed_stdout(*args: str):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "dedupdb", *args], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=120, preexec_fn=lambda: os.close(1))


@pytest.mark.skipif(sys.platform == "win32", reason="closes a file descriptor before the command starts")
@pytest.mark.parametrize(
    "args",
    [["report"], ["report", "--format", "json"], ["report", "--format", "csv"], ["pairs"], ["query", "quarterly report"],
     ["export"], ["journal"], ["journal", "--format", "json"], ["stats"]],
    ids=lambda a: "-".join(a[:1] + a[2:]),
)
def test_closed_standard_output_is_one_line_and_a_failure(listed_db, args):
    result = _closed_stdout(*args, "--db", str(listed_db))
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == "Error: standard output is closed"


@pytest.mark.skipif(sys.platform == "win32", reason="closes a file descriptor before the command starts")
def test_closed_standard_output_does_not_stop_a_command_that_writes_a_file(listed_db, tmp_path):
    result = _closed_stdout("export", "--output", str(tmp_path / "out.jsonl"), "--db", str(listed_db))
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("args", [
    ["query", "--threshold", "5", "text"],
    ["add", "--bogus"],
    ["add", ".", "--workers", "-3"],
    ["clean", "--action", "nope"],
    ["bogus"],
])
def test_usage_errors_of_the_command_line_are_one_line(tmp_path, args):
    """Click's own usage errors (an unknown option, a value out of range) are one line and status 2 too, as the
    library's OptionError is: no box, no usage block, no traceback."""
    result = subprocess.run([sys.executable, "-m", "dedupdb", *args, "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "--help" in lines[0], result.stderr
    assert not (tmp_path / "x.db").exists()


def test_a_text_there_is_no_memory_to_sketch_fails_alone(cli, db_path, tmp_path, monkeypatch):
    """Sketching that runs out of memory (a text of tens of MB where the address space is limited) fails the file,
    record or attachment whose text it was, with its size, and the add goes on: never a traceback, never the whole
    add. The others of its batch are sketched a text at a time."""
    import json

    import dedupdb
    from dedupdb.ingest import pipeline

    real = pipeline.sketch_texts

    def short_of_memory(settings, texts):
        if any("unsketchable" in text for text in texts):
            raise MemoryError
        return real(settings, texts)

    monkeypatch.setattr(pipeline, "sketch_texts", short_of_memory)
    folder = tmp_path / "notes"
    write(folder / "a.txt", ENGLISH)
    write(folder / "b.txt", ENGLISH_EDITED)
    write(folder / "huge.txt", "an unsketchable text " * 50)
    write(folder / "mail.eml", "From: a@example.org\nSubject: hello\nMessage-ID: <m1@example.org>\n\n"
                               "an unsketchable message\n")
    records = tmp_path / "posts.jsonl"
    records.write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                               for i, t in enumerate([CHINESE, "one unsketchable record here", CHINESE_EDITED])))
    before = file_hashes(folder), records.read_bytes()
    result = cli("add", str(folder), str(records), "--id-field", "id", "--workers", "0", "--format", "json")
    assert result.exit_code == 23, result.output
    summary = json.loads(result.stdout)
    assert summary["added"] == 3 and summary["records"] == 2
    assert sorted((f["path"].rsplit("/", 1)[-1], f["reason"]) for f in summary["failed_paths"]) == [
        ("huge.txt", "not enough memory to sketch its text (0.0 MiB of it)"),
        ("mail.eml", "not enough memory to sketch its text (0.0 MiB of it)")]
    assert [(b["where"].rsplit("/", 1)[-1], b["reason"]) for b in summary["bad_records"]] == [
        ("posts.jsonl:2", "not enough memory to sketch its text (0.0 MiB of it)")]
    assert (file_hashes(folder), records.read_bytes()) == before
    assert len(json.loads(cli("report", "--format", "json").stdout)) == 2  # both pairs found
    with dedupdb.open(db_path) as db:  # the library's add, the same
        again = db.add([folder], workers=0)
    assert [reason for _, reason in again.failed] == ["not enough memory to sketch its text (0.0 MiB of it)"] * 2
